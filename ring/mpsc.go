package ring

import (
	"sync/atomic"

	"softnet.dev/internal/cacheline"
)

// slot keeps each value next to its publication flag so the consumer's
// readiness check and its read of the value touch the same cache line.
type slot[T any] struct {
	// seq is pos+1 once the value for position pos has been written. Any
	// older value (a previous lap's pos+1, or the initial 0) means "not yet".
	seq atomic.Uint64
	val T
}

// MPSC is a bounded FIFO ring for any number of producers and exactly one
// consumer.
//
// Producers reserve slots with a single compare-and-swap on the shared head
// and then fill and publish them independently, so a slow producer never
// makes another producer wait. It does make the consumer wait: the consumer
// takes elements strictly in reservation order and stops at the first slot
// whose producer has reserved but not yet published it.
//
// Enqueue, EnqueueBulk and EnqueueBurst may be called from any goroutine.
// Only the consumer may call Dequeue, DequeueBulk and DequeueBurst, and the
// consumer role may move between goroutines only across a happens-before
// edge. Len and Cap may be called from anywhere.
type MPSC[T any] struct {
	_     cacheline.Pad
	slots []slot[T]
	mask  uint64

	// head is the next position to reserve, advanced by producers' CAS.
	_    cacheline.Pad
	head atomic.Uint64

	// tail is the next position to read. Only the consumer stores it, and
	// only after clearing the slots below it, so a producer that has seen
	// tail may reuse every slot below tail+capacity.
	_    cacheline.Pad
	tail atomic.Uint64
	_    cacheline.Pad
}

// NewMPSC returns an empty ring holding up to capacity elements. capacity
// must be a power of two between 2 and 1<<30.
func NewMPSC[T any](capacity int) (*MPSC[T], error) {
	if err := checkCapacity(capacity); err != nil {
		return nil, err
	}
	return &MPSC[T]{slots: make([]slot[T], capacity), mask: uint64(capacity - 1)}, nil
}

// Cap returns the number of elements the ring can hold.
func (r *MPSC[T]) Cap() int { return len(r.slots) }

// Len returns the number of elements in the ring, counting slots reserved by
// producers that have not finished publishing. It is exact when nobody is
// running and a snapshot that may already be stale otherwise.
func (r *MPSC[T]) Len() int {
	tail := r.tail.Load()
	return occupancy(r.head.Load(), tail, len(r.slots))
}

// reserve claims up to want consecutive positions (exactly want if all) and
// returns the first one and how many were claimed.
func (r *MPSC[T]) reserve(want uint64, all bool) (pos, n uint64) {
	capacity := r.mask + 1
	for {
		// tail first: it never passes head, so head-tail cannot underflow.
		tail := r.tail.Load()
		head := r.head.Load()
		used := head - tail
		if used > capacity {
			// The consumer drained and producers refilled between the two
			// loads; this tail is too old to reason with.
			continue
		}
		n = min(want, capacity-used)
		if n == 0 || (all && n < want) {
			return 0, 0
		}
		if r.head.CompareAndSwap(head, head+n) {
			return head, n
		}
	}
}

// publish fills a reserved position and hands it to the consumer.
func (r *MPSC[T]) publish(pos uint64, v T) {
	s := &r.slots[pos&r.mask]
	s.val = v
	s.seq.Store(pos + 1)
}

// Enqueue adds v and reports whether there was room.
func (r *MPSC[T]) Enqueue(v T) bool {
	pos, n := r.reserve(1, true)
	if n == 0 {
		return false
	}
	r.publish(pos, v)
	return true
}

// EnqueueBulk adds all of vs, or none of them if they do not all fit. The
// elements of one call are contiguous in the ring: no other producer's
// elements are interleaved with them.
func (r *MPSC[T]) EnqueueBulk(vs []T) bool { return r.enqueue(vs, true) == len(vs) }

// EnqueueBurst adds the longest prefix of vs that fits, contiguously, and
// returns its length.
func (r *MPSC[T]) EnqueueBurst(vs []T) int { return r.enqueue(vs, false) }

func (r *MPSC[T]) enqueue(vs []T, all bool) int {
	pos, n := r.reserve(uint64(len(vs)), all)
	for i, v := range vs[:n] {
		r.publish(pos+uint64(i), v)
	}
	return int(n)
}

// ready reports whether position pos has been published. Consumer only.
func (r *MPSC[T]) ready(pos uint64) bool {
	return r.slots[pos&r.mask].seq.Load() == pos+1
}

// take moves the published value at pos out of its slot. Consumer only.
func (r *MPSC[T]) take(pos uint64) T {
	s := &r.slots[pos&r.mask]
	v := s.val
	var zero T
	s.val = zero
	return v
}

// Dequeue removes and returns the oldest element; ok is false if the ring
// was empty or its oldest slot is still being written. Consumer only.
func (r *MPSC[T]) Dequeue() (v T, ok bool) {
	tail := r.tail.Load()
	if !r.ready(tail) {
		return v, false
	}
	v = r.take(tail)
	r.tail.Store(tail + 1)
	return v, true
}

// DequeueBulk fills all of out with the oldest elements, or takes nothing if
// fewer than len(out) are published. Consumer only.
func (r *MPSC[T]) DequeueBulk(out []T) bool { return r.dequeue(out, true) == len(out) }

// DequeueBurst fills a prefix of out with as many of the oldest published
// elements as are available and returns how many. Consumer only.
func (r *MPSC[T]) DequeueBurst(out []T) int { return r.dequeue(out, false) }

func (r *MPSC[T]) dequeue(out []T, all bool) int {
	tail := r.tail.Load()
	// Count first so a failed bulk leaves every slot untouched. The count
	// cannot run past capacity: the slot one lap ahead still carries this
	// lap's sequence, which is never the one being asked for.
	n := 0
	for n < len(out) && r.ready(tail+uint64(n)) {
		n++
	}
	if n == 0 || (all && n < len(out)) {
		return 0
	}
	for i := range out[:n] {
		out[i] = r.take(tail + uint64(i))
	}
	r.tail.Store(tail + uint64(n))
	return n
}
