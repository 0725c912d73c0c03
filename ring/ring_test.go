package ring

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// queue is the method set both ring kinds share, so that single-goroutine
// semantics are written once and checked against each kind.
type queue[T any] interface {
	Enqueue(T) bool
	Dequeue() (T, bool)
	EnqueueBulk([]T) bool
	EnqueueBurst([]T) int
	DequeueBulk([]T) bool
	DequeueBurst([]T) int
	Len() int
	Cap() int
}

var (
	_ queue[int] = (*SPSC[int])(nil)
	_ queue[int] = (*MPSC[int])(nil)
)

type kind struct {
	name string
	make func(capacity int) (queue[int], error)
}

var kinds = []kind{
	{"SPSC", func(n int) (queue[int], error) {
		r, err := NewSPSC[int](n)
		if err != nil {
			return nil, err
		}
		return r, nil
	}},
	{"MPSC", func(n int) (queue[int], error) {
		r, err := NewMPSC[int](n)
		if err != nil {
			return nil, err
		}
		return r, nil
	}},
}

// forEachKind runs f as a subtest against a fresh ring of each kind.
func forEachKind(t *testing.T, capacity int, f func(t *testing.T, q queue[int])) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			q, err := k.make(capacity)
			if err != nil {
				t.Fatal(err)
			}
			f(t, q)
		})
	}
}

func seq(from, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = from + i
	}
	return s
}

// drain dequeues everything one by one.
func drain(q queue[int]) []int {
	var got []int
	for {
		v, ok := q.Dequeue()
		if !ok {
			return got
		}
		got = append(got, v)
	}
}

func TestCapacity(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for _, n := range []int{0, 1, 3, 6, 1000, -1, -8, 1<<30 + 1, 1 << 31} {
				q, err := k.make(n)
				if err == nil {
					t.Errorf("capacity %d: no error", n)
				} else if !strings.Contains(err.Error(), strconv.Itoa(n)) {
					t.Errorf("capacity %d: error %q does not name the capacity", n, err)
				}
				if q != nil {
					t.Errorf("capacity %d: non-nil ring alongside error", n)
				}
			}
			for _, n := range []int{2, 8, 1024} {
				q, err := k.make(n)
				if err != nil {
					t.Fatalf("capacity %d: %v", n, err)
				}
				if q.Cap() != n || q.Len() != 0 {
					t.Errorf("capacity %d: Cap %d Len %d", n, q.Cap(), q.Len())
				}
			}
		})
	}
}

func TestFillAndDrain(t *testing.T) {
	forEachKind(t, 8, func(t *testing.T, q queue[int]) {
		if _, ok := q.Dequeue(); ok {
			t.Fatal("Dequeue on empty ring succeeded")
		}
		for i := range 8 {
			if !q.Enqueue(i) {
				t.Fatalf("Enqueue %d failed below capacity", i)
			}
			if q.Len() != i+1 {
				t.Fatalf("Len %d after %d enqueues", q.Len(), i+1)
			}
		}
		if q.Enqueue(8) {
			t.Fatal("Enqueue on full ring succeeded")
		}
		if q.Len() != 8 {
			t.Fatalf("Len %d after failed enqueue", q.Len())
		}
		if got := drain(q); !slices.Equal(got, seq(0, 8)) {
			t.Fatalf("drained %v", got)
		}
		if q.Len() != 0 {
			t.Fatalf("Len %d after drain", q.Len())
		}
	})
}

func TestBulkAllOrNothing(t *testing.T) {
	forEachKind(t, 8, func(t *testing.T, q queue[int]) {
		if !q.EnqueueBulk(nil) || !q.DequeueBulk(nil) {
			t.Fatal("empty bulk must succeed trivially")
		}
		if q.EnqueueBulk(seq(100, 9)) {
			t.Fatal("bulk larger than capacity succeeded")
		}
		if q.Len() != 0 {
			t.Fatalf("Len %d after failed bulk on empty ring", q.Len())
		}
		if !q.EnqueueBulk(seq(0, 5)) {
			t.Fatal("bulk of 5 into empty ring failed")
		}
		if q.EnqueueBulk(seq(200, 4)) {
			t.Fatal("bulk of 4 into 3 free slots succeeded")
		}
		if q.Len() != 5 {
			t.Fatalf("Len %d after failed bulk, want 5", q.Len())
		}
		if !q.EnqueueBulk(seq(5, 3)) {
			t.Fatal("bulk of 3 into 3 free slots failed")
		}

		out := seq(-9, 9)
		if q.DequeueBulk(out) {
			t.Fatal("bulk dequeue of 9 from 8 succeeded")
		}
		if q.Len() != 8 {
			t.Fatalf("Len %d after failed bulk dequeue, want 8", q.Len())
		}
		if !slices.Equal(out, seq(-9, 9)) {
			t.Fatalf("failed bulk dequeue wrote into out: %v", out)
		}
		out = make([]int, 3)
		if !q.DequeueBulk(out) || !slices.Equal(out, seq(0, 3)) {
			t.Fatalf("bulk dequeue of 3: %v", out)
		}
		if got := drain(q); !slices.Equal(got, seq(3, 5)) {
			t.Fatalf("after bulk dequeue, drained %v", got)
		}
		if q.DequeueBulk(make([]int, 1)) {
			t.Fatal("bulk dequeue from empty ring succeeded")
		}
	})
}

func TestBurstPartial(t *testing.T) {
	forEachKind(t, 8, func(t *testing.T, q queue[int]) {
		if n := q.DequeueBurst(make([]int, 4)); n != 0 {
			t.Fatalf("burst from empty ring took %d", n)
		}
		for i := range 3 {
			q.Enqueue(i)
		}
		if n := q.EnqueueBurst(seq(3, 10)); n != 5 {
			t.Fatalf("burst of 10 into 5 free slots enqueued %d", n)
		}
		if n := q.EnqueueBurst(seq(50, 2)); n != 0 {
			t.Fatalf("burst into full ring enqueued %d", n)
		}
		if q.Len() != 8 {
			t.Fatalf("Len %d, want 8", q.Len())
		}
		out := make([]int, 6)
		if n := q.DequeueBurst(out); n != 6 || !slices.Equal(out, seq(0, 6)) {
			t.Fatalf("burst dequeue: n=%d %v", n, out)
		}
		out = seq(-6, 6)
		if n := q.DequeueBurst(out); n != 2 || !slices.Equal(out, []int{6, 7, -4, -3, -2, -1}) {
			t.Fatalf("short burst dequeue: n=%d %v", n, out)
		}
		if q.Len() != 0 {
			t.Fatalf("Len %d after draining", q.Len())
		}
	})
}

// TestWrapAround pushes odd-sized batches through a small ring so that the
// indices wrap many times and batches straddle the end of the buffer in every
// possible alignment, checking each value against a model.
func TestWrapAround(t *testing.T) {
	sizes := []int{3, 5, 7, 1, 5, 3, 7}
	forEachKind(t, 8, func(t *testing.T, q queue[int]) {
		in, out := 0, 0 // next value to enqueue / expected next to dequeue
		buf := make([]int, 8)
		for round := range 3000 {
			k := sizes[round%len(sizes)]
			free := 8 - (in - out)
			switch round % 3 {
			case 0:
				for range k {
					if q.Enqueue(in) != (in-out < 8) {
						t.Fatalf("round %d: Enqueue disagrees with model (len %d)", round, in-out)
					}
					if in-out < 8 {
						in++
					}
				}
			case 1:
				ok := q.EnqueueBulk(seq(in, k))
				if ok != (k <= free) {
					t.Fatalf("round %d: EnqueueBulk(%d) = %v with %d free", round, k, ok, free)
				}
				if ok {
					in += k
				}
			case 2:
				n := q.EnqueueBurst(seq(in, k))
				if n != min(k, free) {
					t.Fatalf("round %d: EnqueueBurst(%d) = %d with %d free", round, k, n, free)
				}
				in += n
			}
			if q.Len() != in-out {
				t.Fatalf("round %d: Len %d, model %d", round, q.Len(), in-out)
			}

			// Dequeue a different odd amount, rotating methods on a
			// different cycle than the enqueue side.
			m := sizes[(round+2)%len(sizes)]
			avail := in - out
			var got []int
			switch round % 4 {
			case 0, 3:
				n := q.DequeueBurst(buf[:m])
				if n != min(m, avail) {
					t.Fatalf("round %d: DequeueBurst(%d) = %d with %d available", round, m, n, avail)
				}
				got = buf[:n]
			case 1:
				ok := q.DequeueBulk(buf[:m])
				if ok != (m <= avail) {
					t.Fatalf("round %d: DequeueBulk(%d) = %v with %d available", round, m, ok, avail)
				}
				if ok {
					got = buf[:m]
				}
			case 2:
				for range min(m, avail) {
					v, ok := q.Dequeue()
					if !ok {
						t.Fatalf("round %d: Dequeue failed with %d available", round, avail)
					}
					got = append(got, v)
				}
			}
			for _, v := range got {
				if v != out {
					t.Fatalf("round %d: dequeued %d, want %d", round, v, out)
				}
				out++
			}
		}
		if out < 3000 {
			t.Fatalf("only %d values went through; the test exercised too little", out)
		}
		if got := drain(q); !slices.Equal(got, seq(out, in-out)) {
			t.Fatalf("final drain %v, want %v", got, seq(out, in-out))
		}
	})
}

// The zeroing tests look inside the rings: whether a dequeued pointer is
// still referenced by the buffer cannot be observed through the API.

func TestSPSCDequeueZeroesSlots(t *testing.T) {
	r, _ := NewSPSC[*int](4)
	ps := []*int{new(int), new(int), new(int), new(int)}
	checkNil := func(how string) {
		t.Helper()
		for i, p := range r.buf {
			if p != nil {
				t.Fatalf("after %s: slot %d still holds a pointer", how, i)
			}
		}
	}
	for round := range 3 { // several rounds so batches also wrap
		r.Enqueue(ps[0])
		if v, _ := r.Dequeue(); v != ps[0] {
			t.Fatal("Dequeue returned the wrong pointer")
		}
		checkNil("Dequeue")
		r.EnqueueBulk(ps[:3])
		if !r.DequeueBulk(make([]*int, 3)) {
			t.Fatalf("round %d: DequeueBulk failed", round)
		}
		checkNil("DequeueBulk")
		r.EnqueueBulk(ps)
		if r.DequeueBurst(make([]*int, 8)) != 4 {
			t.Fatalf("round %d: DequeueBurst short", round)
		}
		checkNil("DequeueBurst")
	}
}

func TestMPSCDequeueZeroesSlots(t *testing.T) {
	r, _ := NewMPSC[*int](4)
	ps := []*int{new(int), new(int), new(int), new(int)}
	checkNil := func(how string) {
		t.Helper()
		for i := range r.slots {
			if r.slots[i].val != nil {
				t.Fatalf("after %s: slot %d still holds a pointer", how, i)
			}
		}
	}
	for round := range 3 {
		r.Enqueue(ps[0])
		if v, _ := r.Dequeue(); v != ps[0] {
			t.Fatal("Dequeue returned the wrong pointer")
		}
		checkNil("Dequeue")
		r.EnqueueBulk(ps[:3])
		if !r.DequeueBulk(make([]*int, 3)) {
			t.Fatalf("round %d: DequeueBulk failed", round)
		}
		checkNil("DequeueBulk")
		r.EnqueueBulk(ps)
		if r.DequeueBurst(make([]*int, 8)) != 4 {
			t.Fatalf("round %d: DequeueBurst short", round)
		}
		checkNil("DequeueBurst")
	}
}

// TestMPSCStopsAtUnpublished reserves slots the way a producer does but
// publishes them out of order, standing in for a producer that was preempted
// between its CAS and its publish.
func TestMPSCStopsAtUnpublished(t *testing.T) {
	r, _ := NewMPSC[int](8)
	r.Enqueue(1)
	pos, n := r.reserve(2, true)
	if n != 2 {
		t.Fatalf("reserve: got %d slots", n)
	}
	r.Enqueue(4) // reserved after the stalled pair
	r.publish(pos+1, 3)

	if v, ok := r.Dequeue(); !ok || v != 1 {
		t.Fatalf("Dequeue = %d, %v; want 1", v, ok)
	}
	if _, ok := r.Dequeue(); ok {
		t.Fatal("Dequeue passed an unpublished slot")
	}
	out := make([]int, 3)
	if n := r.DequeueBurst(out); n != 0 {
		t.Fatalf("DequeueBurst took %d past an unpublished slot", n)
	}
	if r.Len() != 4-1 {
		t.Fatalf("Len %d, want 3 (reserved slots count)", r.Len())
	}

	r.publish(pos, 2)
	if !r.DequeueBulk(out) || !slices.Equal(out, []int{2, 3, 4}) {
		t.Fatalf("after publishing: %v", out)
	}
}
