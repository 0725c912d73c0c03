// Package ring provides bounded, lock-free FIFO rings for handing batches
// of packets (or any values) between goroutines, with the semantics of
// DPDK's rte_ring: SPSC for one producer and one consumer, MPSC for any
// number of producers and one consumer.
//
//	r, err := ring.NewSPSC[*buffer.Buf](1024) // a power of two
//	if err != nil {
//		return err
//	}
//	sent := r.EnqueueBurst(bufs)   // as many as fit, from the start
//	ok := r.EnqueueBulk(bufs)      // all or nothing
//	got := r.DequeueBurst(out)     // on the consumer's goroutine
//
// A batch touches the shared indices once per call, which amortises the
// cross-core traffic that dominates a single operation. Nothing blocks or
// allocates: a full or empty ring is reported by the return value, and
// waiting is the caller's policy.
//
// Design: docs/design.md, "Lock-free rings".
package ring
