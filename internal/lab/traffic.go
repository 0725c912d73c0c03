package lab

import (
	"context"
	"time"
)

// generator starts transfers between the guests of a variant.
type generator interface {
	// name says what generates the traffic, e.g. "iperf3 3.12".
	name() string
	// start begins a transfer of mode from guest a to guest b lasting d.
	// Whatever it started is stopped by the flow's wait, which the caller
	// must call.
	start(ctx context.Context, p *guestPair, mode Mode, d time.Duration, ipv6 bool) (flow, error)
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
}

// transferPort is the port of every transfer: each variant's namespaces
// are new, so it never collides.
const transferPort = 5201
