// Package ring provides bounded, lock-free FIFO rings for handing batches of
// packets (or any values) between goroutines of a userspace datapath.
//
// The semantics follow DPDK's rte_ring; the layout borrows from the Linux
// kernel's ptr_ring. Two kinds are provided:
//
//   - SPSC: one producer goroutine, one consumer goroutine. Each side caches
//     the other side's index and reads the shared one only when its cache
//     says the ring is full (producer) or empty (consumer), so in steady
//     state each side mostly touches only its own cache line.
//   - MPSC: any number of producers, one consumer. A producer reserves slots
//     with one compare-and-swap on the shared head, then writes and publishes
//     each slot through a per-slot sequence number, so producers never wait
//     for each other. The consumer takes slots in order and stops at the
//     first one not yet published.
//
// # Capacity
//
// Capacity is a power of two between 2 and 1<<30, fixed at construction; all
// of it is usable (a ring of capacity 8 holds 8 elements). Indices are
// free-running uint64 counters masked by capacity-1.
//
// # Bulk and burst
//
// Every single-element operation has two batch forms:
//
//   - Bulk (EnqueueBulk, DequeueBulk) is all-or-nothing: it moves the whole
//     slice or, if that is not possible right now, nothing, and the ring is
//     left unchanged. Use it when a batch must stay together.
//   - Burst (EnqueueBurst, DequeueBurst) moves as many as possible, from the
//     start of the slice, and returns the count, which may be 0. Use it to
//     drain or fill opportunistically.
//
// A batch reads and writes the shared indices once per call rather than once
// per element, so batching amortises the cross-core cache traffic that
// dominates the cost of a single operation.
//
// # Who may call what
//
// Enqueue* methods belong to the producer side and Dequeue* methods to the
// consumer side. On SPSC at most one goroutine at a time may act as each
// side; on MPSC any number of goroutines may enqueue concurrently but at
// most one may dequeue. Len and Cap are safe from any goroutine; Len is only
// a snapshot while others are operating on the ring. None of the methods
// block: a full or empty ring is reported by the return value, and waiting
// (spinning, yielding, parking) is the caller's policy.
//
// # Costs
//
// No operation allocates. Every element handoff is an atomic store by the
// writer paired with an atomic load by the reader, so the rings are clean
// under the race detector. Dequeue zeroes the slots it empties so the ring
// never keeps a dequeued element's pointers alive. The producer index, the
// consumer index and the read-only ring descriptor each sit on their own
// padded cache lines, which costs a few hundred bytes per ring.
package ring
