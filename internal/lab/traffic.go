package lab

import (
	"context"
	"time"
)

// transfer says what one transfer sends.
type transfer struct {
	mode    Mode
	d       time.Duration
	ipv6    bool
	payload int     // UDP datagram (or latency message) payload, bytes
	rate    float64 // UDP: offered payload bits per second, 0 for no limit
	streams int     // TCP: parallel streams, 0 is 1
	gso     bool    // UDP: send with UDP_SEGMENT, many datagrams per send
	rcvbuf  int     // UDP: the receiver's socket buffer, 0 for the default
	reverse bool    // b sends to a (iperf3 -R; iperf3 only)
	omit    int     // seconds at the start left out of the figures (iperf3 -O; iperf3 only)
}

// tcp reports whether the transfer is TCP (tcp, tcp4, latency-tcp).
func (t transfer) tcp() bool { return t.mode.kind() == kindTCP || t.mode == LatencyTCP }

// newTransfer returns the transfer of mode m lasting d at no rate limit.
func newTransfer(m Mode, d time.Duration, ipv6 bool) transfer {
	t := transfer{mode: m, d: d, ipv6: ipv6, payload: m.payload(ipv6), streams: 1}
	switch m {
	case UDPGSO:
		t.gso = true
	case TCP4:
		t.streams = TCPStreams4
	}
	return t
}

// generator starts transfers between the guests of a variant.
type generator interface {
	// name says what generates the traffic, e.g. "iperf3 3.12".
	name() string
	// start begins transfer t from guest a to guest b. Whatever it
	// started is stopped by the flow's wait, which the caller must call.
	start(ctx context.Context, p *guestPair, t transfer) (flow, error)
}

// flow is a running transfer.
type flow interface {
	// wait waits for the transfer to end and returns what the receiver
	// saw. If ctx is done first, it stops the transfer and returns ctx's
	// error. Either way nothing the flow started is left running.
	wait(ctx context.Context) (flowResult, error)
	// threads returns the OS threads of this process that generate or
	// receive the traffic (the built-in generator's), nil for external
	// processes. Their CPU time is not the datapath's.
	threads() []int
}

// flowResult is what a transfer achieved, as its receiver counted it.
type flowResult struct {
	bitsPerSecond float64 // payload received
	seconds       float64
	// UDP only: datagrams received, and lost on the way (sent but never
	// received).
	packets, lost uint64
	lossPct       float64
	hasLoss       bool
	// TCP only: the sender's retransmitted segments.
	retransmits    int64
	hasRetransmits bool
	// Latency only: one-way latency (half the round trip) in µs.
	latency *latencyStats
}

// latencyStats is a ping-pong's one-way latency, in µs.
type latencyStats struct {
	p50, p99, avg float64
	observations  int
}

// transferPort is the port of every throughput transfer: each variant's
// namespaces are new, so it never collides with another variant's.
// Latency has a port of its own: the TCP transfers before it leave
// connections to transferPort in TIME_WAIT, and sockperf's server does
// not bind with SO_REUSEADDR as iperf3's does.
const (
	transferPort = 5201
	latencyPort  = 5202
)
