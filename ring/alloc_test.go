package ring

import "testing"

func TestZeroAllocs(t *testing.T) {
	forEachKind(t, 64, func(t *testing.T, q queue[int]) {
		in, out := seq(0, 32), make([]int, 32)
		ops := []struct {
			name string
			f    func()
		}{
			{"single", func() {
				q.Enqueue(1)
				q.Dequeue()
			}},
			{"bulk", func() {
				q.EnqueueBulk(in)
				q.DequeueBulk(out)
			}},
			{"burst", func() {
				q.EnqueueBurst(in)
				q.DequeueBurst(out)
			}},
			{"full and empty", func() {
				q.EnqueueBulk(in)
				q.EnqueueBulk(in)
				q.Enqueue(1) // fails: full
				q.EnqueueBurst(in)
				q.DequeueBurst(out)
				q.DequeueBurst(out)
				q.Dequeue() // fails: empty
				q.DequeueBulk(out)
			}},
		}
		for _, op := range ops {
			if a := testing.AllocsPerRun(1000, op.f); a != 0 {
				t.Errorf("%s: %v allocations per run", op.name, a)
			}
		}
		if q.Len() != 0 {
			t.Fatalf("ops left %d elements behind", q.Len())
		}
	})
}

// TestZeroAllocsPointers repeats the check with a pointer element type,
// where an escaping value or a boxed copy would show up as an allocation.
func TestZeroAllocsPointers(t *testing.T) {
	s, _ := NewSPSC[*int](8)
	m, _ := NewMPSC[*int](8)
	p := new(int)
	batch := []*int{p, p, p, p}
	out := make([]*int, 4)
	a := testing.AllocsPerRun(1000, func() {
		s.Enqueue(p)
		s.Dequeue()
		s.EnqueueBulk(batch)
		s.DequeueBurst(out)
		m.Enqueue(p)
		m.Dequeue()
		m.EnqueueBurst(batch)
		m.DequeueBulk(out)
	})
	if a != 0 {
		t.Errorf("%v allocations per run", a)
	}
}
