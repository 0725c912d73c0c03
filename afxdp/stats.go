package afxdp

import (
	"softnet.dev/drop"
	"softnet.dev/internal/counter"
)

// Stats are a port's totals: what its queues counted, as each last
// published them (once per burst), and what the kernel counted for it.
type Stats struct {
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxPackets uint64 `json:"tx_packets"` // frames put on the transmit rings
	TxBytes   uint64 `json:"tx_bytes"`
	// RxDrops counts received frames lost, by reason, wherever they were
	// lost: in the port (PKT_TOO_SMALL for a runt, PKT_TOO_BIG for a
	// frame longer than any buffer, DEV_HDR for a descriptor the kernel
	// should not have written), in the XDP program (XDP: a frame on a
	// queue without a socket), and in the kernel's socket code (NOMEM:
	// the fill ring was empty; FULL_RING: the receive ring was full;
	// PKT_TOO_BIG: longer than a UMEM frame without multi-buffer).
	// TxDrops counts frames not put on a transmit ring.
	RxDrops drop.Counts `json:"rx_drops"`
	TxDrops drop.Counts `json:"tx_drops"`
	// XDPPass counts the frames the program handed to the kernel's stack
	// (PassUnclaimed): not lost, but not the port's.
	XDPPass uint64 `json:"xdp_pass"`
	// RxCsumFinished counts received frames whose checksum held only the
	// pseudo-header sum and was finished in software; Segmented,
	// Segments and CsumFinished the GSO packets split and the checksums
	// finished before transmission (no AF_XDP frame carries offloads).
	RxCsumFinished uint64 `json:"rx_csum_finished"`
	Segmented      uint64 `json:"segmented"`
	Segments       uint64 `json:"segments"`
	CsumFinished   uint64 `json:"csum_finished"`
	// RxMultiBuf counts frames that arrived in pieces (multi-buffer XDP)
	// and were joined into one buffer; TxMultiBuf frames sent in pieces.
	RxMultiBuf uint64 `json:"rx_multi_buf"`
	TxMultiBuf uint64 `json:"tx_multi_buf"`
	// TxCopied counts frames copied into a UMEM frame before they were
	// sent: buffers of another class (or, rarely, one already in
	// flight); the others leave from the buffer they are in.
	TxCopied uint64 `json:"tx_copied"`
	// RxCalls and TxCalls count the system calls the queues made: fill
	// ring wakeups (a zero-copy driver's, only when the kernel sets
	// XDP_RING_NEED_WAKEUP) and transmit kicks. With RxPackets and
	// TxPackets, the system calls per packet.
	RxCalls uint64 `json:"rx_calls"`
	TxCalls uint64 `json:"tx_calls"`
	// FillTarget is the sum of the queues' fill targets, Lent the frames
	// they lend the kernel now (fill and receive rings, frames in
	// flight), both as last published.
	FillTarget uint64 `json:"fill_target"`
	Lent       uint64 `json:"lent"`
	// FillShort counts refills cut short by an empty pool.
	FillShort uint64 `json:"fill_short"`
}

// Counter indices of a queue's counters.
const (
	cRxPackets = iota
	cRxBytes
	cTxPackets
	cTxBytes
	cRxCsumFinished
	cSegmented
	cSegments
	cCsumFinished
	cRxMultiBuf
	cTxMultiBuf
	cTxCopied
	cRxCalls
	cTxCalls
	cFillTarget
	cLent
	cFillShort
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
		RxPackets:      sum[cRxPackets],
		RxBytes:        sum[cRxBytes],
		TxPackets:      sum[cTxPackets],
		TxBytes:        sum[cTxBytes],
		RxCsumFinished: sum[cRxCsumFinished],
		Segmented:      sum[cSegmented],
		Segments:       sum[cSegments],
		CsumFinished:   sum[cCsumFinished],
		RxMultiBuf:     sum[cRxMultiBuf],
		TxMultiBuf:     sum[cTxMultiBuf],
		TxCopied:       sum[cTxCopied],
		RxCalls:        sum[cRxCalls],
		TxCalls:        sum[cTxCalls],
		FillTarget:     sum[cFillTarget],
		Lent:           sum[cLent],
		FillShort:      sum[cFillShort],
	}
	s.RxDrops, s.TxDrops = counter.Drops(sum, numOwn)
	return s
}
