package ring

import (
	"sync/atomic"

	"softnet.dev/internal/cacheline"
)

// SPSC is a bounded FIFO ring for exactly one producer and one consumer.
//
// Only the producer may call Enqueue, EnqueueBulk and EnqueueBurst; only the
// consumer may call Dequeue, DequeueBulk and DequeueBurst. Either role may
// move to another goroutine only across a happens-before edge (a channel
// send, a mutex, a WaitGroup). Len and Cap may be called from anywhere.
type SPSC[T any] struct {
	_    cacheline.Pad
	buf  []T
	mask uint64

	// The producer's line. head is the next position to write and is
	// published to the consumer; tailCache is the producer's private,
	// possibly stale view of tail, refreshed only when it says "full".
	_         cacheline.Pad
	head      atomic.Uint64
	tailCache uint64

	// The consumer's line, mirroring the producer's.
	_         cacheline.Pad
	tail      atomic.Uint64
	headCache uint64
	_         cacheline.Pad
}

// NewSPSC returns an empty ring holding up to capacity elements. capacity
// must be a power of two between 2 and 1<<30.
func NewSPSC[T any](capacity int) (*SPSC[T], error) {
	if err := checkCapacity(capacity); err != nil {
		return nil, err
	}
	return &SPSC[T]{buf: make([]T, capacity), mask: uint64(capacity - 1)}, nil
}

// Cap returns the number of elements the ring can hold.
func (r *SPSC[T]) Cap() int { return len(r.buf) }

// Len returns the number of elements in the ring. It is exact when neither
// side is running and a snapshot that may already be stale otherwise.
func (r *SPSC[T]) Len() int {
	tail := r.tail.Load()
	return occupancy(r.head.Load(), tail, len(r.buf))
}

// room returns the producer's head and the free slot count. The shared tail
// (the consumer's hot line) is read only when the cached copy cannot satisfy
// want; a stale tail only ever under-reports free space.
func (r *SPSC[T]) room(want uint64) (head, free uint64) {
	head = r.head.Load()
	capacity := r.mask + 1
	free = capacity - (head - r.tailCache)
	if free < want {
		r.tailCache = r.tail.Load()
		free = capacity - (head - r.tailCache)
	}
	return head, free
}

// filled is the consumer's counterpart of room.
func (r *SPSC[T]) filled(want uint64) (tail, avail uint64) {
	tail = r.tail.Load()
	avail = r.headCache - tail
	if avail < want {
		r.headCache = r.head.Load()
		avail = r.headCache - tail
	}
	return tail, avail
}

// Enqueue adds v and reports whether there was room. Producer only.
func (r *SPSC[T]) Enqueue(v T) bool {
	head, free := r.room(1)
	if free == 0 {
		return false
	}
	r.buf[head&r.mask] = v
	r.head.Store(head + 1)
	return true
}

// EnqueueBulk adds all of vs, or none of them if they do not all fit.
// Producer only.
func (r *SPSC[T]) EnqueueBulk(vs []T) bool { return r.enqueue(vs, true) == len(vs) }

// EnqueueBurst adds the longest prefix of vs that fits and returns its
// length. Producer only.
func (r *SPSC[T]) EnqueueBurst(vs []T) int { return r.enqueue(vs, false) }

func (r *SPSC[T]) enqueue(vs []T, all bool) int {
	want := uint64(len(vs))
	head, free := r.room(want)
	n := min(want, free)
	if n == 0 || (all && n < want) {
		return 0
	}
	copyIn(r.buf, head&r.mask, vs[:n])
	r.head.Store(head + n)
	return int(n)
}

// Dequeue removes and returns the oldest element; ok is false if the ring
// was empty. Consumer only.
func (r *SPSC[T]) Dequeue() (v T, ok bool) {
	tail, avail := r.filled(1)
	if avail == 0 {
		return v, false
	}
	slot := &r.buf[tail&r.mask]
	v = *slot
	var zero T
	*slot = zero
	r.tail.Store(tail + 1)
	return v, true
}

// DequeueBulk fills all of out with the oldest elements, or takes nothing if
// fewer than len(out) are available. Consumer only.
func (r *SPSC[T]) DequeueBulk(out []T) bool { return r.dequeue(out, true) == len(out) }

// DequeueBurst fills a prefix of out with as many of the oldest elements as
// are available and returns how many. Consumer only.
func (r *SPSC[T]) DequeueBurst(out []T) int { return r.dequeue(out, false) }

func (r *SPSC[T]) dequeue(out []T, all bool) int {
	want := uint64(len(out))
	tail, avail := r.filled(want)
	n := min(want, avail)
	if n == 0 || (all && n < want) {
		return 0
	}
	copyOut(out[:n], r.buf, tail&r.mask)
	r.tail.Store(tail + n)
	return int(n)
}

// copyIn writes src into buf starting at slot i, wrapping at the end. A batch
// spans at most two contiguous runs, so it moves with two copy calls instead
// of a per-element loop. len(src) must not exceed len(buf).
func copyIn[T any](buf []T, i uint64, src []T) {
	n := copy(buf[i:], src)
	copy(buf, src[n:])
}

// copyOut is copyIn in reverse, and clears the slots it read so the ring
// holds no references on behalf of elements already handed out.
func copyOut[T any](dst, buf []T, i uint64) {
	n := copy(dst, buf[i:])
	m := copy(dst[n:], buf)
	clear(buf[i : int(i)+n])
	clear(buf[:m])
}
