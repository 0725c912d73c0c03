package tun

import (
	"softnet.dev/drop"
	"softnet.dev/internal/counter"
)

// Stats are a device's totals over its queues. Each queue counts in plain
// integers and publishes them once per burst; Stats sums what was
// published, so it may trail the queues by the burst in progress.
type Stats struct {
	RxPackets uint64 `json:"rx_packets"` // packets received and handed to the worker
	RxBytes   uint64 `json:"rx_bytes"`   // their data, without vnet headers
	TxPackets uint64 `json:"tx_packets"` // packets written to the device; each segment counts
	TxBytes   uint64 `json:"tx_bytes"`   // their data, without vnet headers

	// RxDrops counts packets the receive queues discarded (an invalid
	// vnet header, a truncated read) and, as NOMEM, bursts cut short by
	// an empty pool, whose packet stays queued in the kernel. TxDrops
	// counts packets given to Transmit that were not sent, one per packet
	// given (a GSO packet whose segments were not all written is one).
	RxDrops drop.Counts `json:"rx_drops"`
	TxDrops drop.Counts `json:"tx_drops"`

	GSOIn  uint64 `json:"gso_in"`  // GSO packets received whole, marked FlagVnetHdr
	GSOOut uint64 `json:"gso_out"` // GSO packets written whole, for the kernel to segment
	// Segmented counts the GSO packets segmented in software, on
	// transmit and by Queue.Read; Segments the segments written or
	// handed over; CsumFinished the checksums finished in software.
	Segmented    uint64 `json:"segmented"`
	Segments     uint64 `json:"segments"`
	CsumFinished uint64 `json:"csum_finished"`

	// Coalesced counts the GSO packets GRO built and wrote (each also
	// counts once in TxPackets); CoalescedSegs the packets they carried.
	Coalesced     uint64 `json:"coalesced"`
	CoalescedSegs uint64 `json:"coalesced_segs"`
}

// Counter indices of a queue's counters.
const (
	cRxPackets = iota
	cRxBytes
	cTxPackets
	cTxBytes
	cGSOIn
	cGSOOut
	cSegmented
	cSegments
	cCsumFinished
	cCoalesced
	cCoalescedSegs
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
		RxPackets:     sum[cRxPackets],
		RxBytes:       sum[cRxBytes],
		TxPackets:     sum[cTxPackets],
		TxBytes:       sum[cTxBytes],
		GSOIn:         sum[cGSOIn],
		GSOOut:        sum[cGSOOut],
		Segmented:     sum[cSegmented],
		Segments:      sum[cSegments],
		CsumFinished:  sum[cCsumFinished],
		Coalesced:     sum[cCoalesced],
		CoalescedSegs: sum[cCoalescedSegs],
	}
	s.RxDrops, s.TxDrops = counter.Drops(sum, numOwn)
	return s
}
