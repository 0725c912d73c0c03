package ring

import (
	"runtime"
	"sync"
	"testing"
)

// benchPipeline moves b.N elements from producers goroutines to a consumer
// on the benchmark goroutine in batches of batch (1 = single-element calls),
// so ns/op is the cost of one element's trip through the ring under real
// cross-core traffic.
func benchPipeline(b *testing.B, q queue[int], producers, batch int) {
	b.ReportAllocs()
	var wg sync.WaitGroup
	for p := range producers {
		share := b.N / producers
		if p == 0 {
			share += b.N % producers
		}
		wg.Go(func() {
			vs := make([]int, batch)
			for sent := 0; sent < share; {
				k := min(batch, share-sent)
				var ok bool
				if k == 1 {
					ok = q.Enqueue(sent)
				} else {
					ok = q.EnqueueBulk(vs[:k])
				}
				if ok {
					sent += k
				} else {
					runtime.Gosched()
				}
			}
		})
	}
	out := make([]int, batch)
	for got := 0; got < b.N; {
		var n int
		if batch == 1 {
			if _, ok := q.Dequeue(); ok {
				n = 1
			}
		} else {
			n = q.DequeueBurst(out)
		}
		got += n
		if n == 0 {
			runtime.Gosched()
		}
	}
	wg.Wait()
}

func BenchmarkSPSC(b *testing.B) {
	for _, bc := range []struct {
		name  string
		batch int
	}{{"single", 1}, {"bulk32", 32}} {
		b.Run(bc.name, func(b *testing.B) {
			r, _ := NewSPSC[int](1024)
			benchPipeline(b, r, 1, bc.batch)
		})
	}
}

func BenchmarkMPSC(b *testing.B) {
	for _, bc := range []struct {
		name      string
		producers int
		batch     int
	}{
		{"single/1producer", 1, 1},
		{"single/4producers", 4, 1},
		{"bulk32/1producer", 1, 32},
		{"bulk32/4producers", 4, 32},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r, _ := NewMPSC[int](1024)
			benchPipeline(b, r, bc.producers, bc.batch)
		})
	}
}

// BenchmarkUncontended measures the bare instruction cost of a round trip on
// one goroutine, with no cache-line transfers between cores. Unlike the
// pipeline benchmarks, one op here is a whole batch (32 elements for bulk32).
func BenchmarkUncontended(b *testing.B) {
	s, _ := NewSPSC[int](1024)
	m, _ := NewMPSC[int](1024)
	in, out := make([]int, 32), make([]int, 32)
	for _, bc := range []struct {
		name string
		q    queue[int]
	}{{"SPSC", s}, {"MPSC", m}} {
		b.Run(bc.name+"/single", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.q.Enqueue(1)
				bc.q.Dequeue()
			}
		})
		b.Run(bc.name+"/bulk32", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.q.EnqueueBulk(in)
				bc.q.DequeueBulk(out)
			}
		})
	}
}
