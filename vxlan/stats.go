package vxlan

import (
	"softnet.dev/drop"
	"softnet.dev/internal/counter"
)

// Stats are a port's totals over its queues, as each queue last
// published them (once per burst).
type Stats struct {
	RxPackets uint64 `json:"rx_packets"` // inner frames received and handed to the worker
	RxBytes   uint64 `json:"rx_bytes"`   // their length, without the outer headers
	// TxPackets counts datagrams sent: a frame flooded to three remotes
	// is three. TxBytes counts their inner frames' bytes.
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	// Flooded counts frames sent to every remote: broadcast, multicast
	// and destinations not learned (or aged out).
	Flooded uint64 `json:"flooded"`
	// RxDrops counts the datagrams the receive queues refused, by
	// reason: IP_RPFILTER (not from a remote), VXLAN_INVALID_HDR,
	// VXLAN_VNI_NOT_FOUND, HDR_TRUNC, PKT_TOO_BIG (longer than a
	// buffer), and NOMEM for a burst cut short by an empty pool (the
	// datagrams stay in the socket). TxDrops counts datagrams not sent
	// and frames not encapsulated.
	RxDrops drop.Counts `json:"rx_drops"`
	TxDrops drop.Counts `json:"tx_drops"`
	// Segmented counts the GSO packets from guests split into frames in
	// software, Segments the frames made; SegmentedCopied the packets
	// among them whose segments were copied into buffers of their own
	// (a flood, a packet too big for the overlay, headers too long for
	// a header slot), where the others' payloads are gathered from the
	// guest's buffer by the send; CsumFinished the guests'
	// checksums finished in software, RxCsumFinished those of frames
	// received with only their pseudo-header sum in the checksum field
	// (a peer's checksum offload over a veth underlay).
	Segmented       uint64 `json:"segmented"`
	Segments        uint64 `json:"segments"`
	SegmentedCopied uint64 `json:"segmented_copied"`
	CsumFinished    uint64 `json:"csum_finished"`
	RxCsumFinished  uint64 `json:"rx_csum_finished"`
	// RxGSO counts the TCP GSO datagrams received whole (a peer's
	// segmentation offload over a veth underlay) and handed on as GSO
	// packets, for the egress port to pass whole or segment.
	RxGSO uint64 `json:"rx_gso"`
	// TooBig counts the ICMP errors ("fragmentation needed", "packet
	// too big") sent back toward guests whose packets did not fit the
	// overlay, each dropped as PKT_TOO_BIG.
	TooBig uint64 `json:"too_big_errors"`
	// RxCalls and TxCalls count the system calls the queues made to
	// receive (recvmmsg, including those that found nothing) and to send
	// (sendmmsg): with RxPackets and TxPackets, the system calls per
	// packet.
	RxCalls uint64 `json:"rx_calls"`
	TxCalls uint64 `json:"tx_calls"`
	// TxGSOSends counts the runs of datagrams sent as one with
	// UDP_SEGMENT (each run's datagrams count in TxPackets);
	// RxGROBatches the datagrams the kernel handed over coalesced by
	// UDP_GRO, each split into the datagrams it was made of.
	// RxCopied counts the datagrams copied out into buffers of their
	// own, where the others are handed over where they landed: the
	// first run of a size, a run of another size, a datagram spread
	// over buffers sized for runs.
	TxGSOSends   uint64 `json:"tx_gso_sends"`
	RxGROBatches uint64 `json:"rx_gro_batches"`
	RxCopied     uint64 `json:"rx_copied"`
	// The learned stations: now, learned, moved to another remote, not
	// learned because the table was full, and aged out.
	Stations     int    `json:"stations"`
	Learned      uint64 `json:"learned"`
	Moved        uint64 `json:"moved"`
	LearnFull    uint64 `json:"learn_full"`
	StationsAged uint64 `json:"stations_aged"`
}

// Counter indices of a queue's counters.
const (
	cRxPackets = iota
	cRxBytes
	cTxPackets
	cTxBytes
	cFlooded
	cSegmented
	cSegments
	cSegmentedCopied
	cCsumFinished
	cRxCsumFinished
	cRxGSO
	cTooBig
	cRxCalls
	cTxCalls
	cTxGSOSends
	cRxGROBatches
	cRxCopied
	numOwn // then the drops (counter.Block)
)

// counters are one queue's: written by its worker only, published at
// the end of each burst.
type counters = counter.Block

func newCounters() counters { return counter.NewBlock(numOwn) }

// statsOf sums the published counters of every queue.
func statsOf(qs []*counters) Stats {
	sum := make([]uint64, counter.Len(numOwn))
	for _, q := range qs {
		q.AddTo(sum)
	}
	s := Stats{
		RxPackets: sum[cRxPackets],
		RxBytes:   sum[cRxBytes],
		TxPackets: sum[cTxPackets],
		TxBytes:   sum[cTxBytes],
		Flooded:   sum[cFlooded],
		Segmented: sum[cSegmented],
		Segments:  sum[cSegments],

		SegmentedCopied: sum[cSegmentedCopied],
		CsumFinished:    sum[cCsumFinished],

		RxCsumFinished: sum[cRxCsumFinished],
		TooBig:         sum[cTooBig],
		RxGSO:          sum[cRxGSO],
		RxCalls:        sum[cRxCalls],
		TxCalls:        sum[cTxCalls],
		TxGSOSends:     sum[cTxGSOSends],
		RxGROBatches:   sum[cRxGROBatches],
		RxCopied:       sum[cRxCopied],
	}
	s.RxDrops, s.TxDrops = counter.Drops(sum, numOwn)
	return s
}
