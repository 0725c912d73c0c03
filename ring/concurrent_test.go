package ring

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// Values carry their producer in the high 32 bits and a per-producer
// sequence number in the low 32, so the consumer can check order, loss and
// duplication per producer without any shared bookkeeping.
const tagShift = 32

// maxBatch is odd and prime so batch sizes drift against the ring's
// power-of-two capacity and batches straddle the wrap point at every offset.
const maxBatch = 17

// produce enqueues count tagged values, rotating between single, bulk and
// burst calls with varying batch sizes. It yields when the ring is full and
// gives up if stop is set (the consumer has already failed the test).
func produce(q queue[uint64], tag uint64, count int, stop *atomic.Bool) {
	batch := make([]uint64, maxBatch)
	next := 0
	for step := 0; next < count; step++ {
		k := min(1+step%maxBatch, count-next)
		for i := range batch[:k] {
			batch[i] = tag<<tagShift | uint64(next+i)
		}
		var n int
		switch step % 3 {
		case 0:
			if q.Enqueue(batch[0]) {
				n = 1
			}
		case 1:
			if q.EnqueueBulk(batch[:k]) {
				n = k
			}
		case 2:
			n = q.EnqueueBurst(batch[:k])
		}
		next += n
		if n == 0 {
			if stop.Load() {
				return
			}
			runtime.Gosched()
		}
	}
}

// consume dequeues producers*count values, rotating call kinds the way
// produce does, and checks that each producer's values arrive exactly once
// and in order.
func consume(q queue[uint64], producers, count int) error {
	next := make([]uint64, producers)
	buf := make([]uint64, maxBatch)
	got := 0
	for step := 0; got < producers*count; step++ {
		k := min(1+step%maxBatch, producers*count-got)
		var n int
		switch step % 3 {
		case 0:
			if v, ok := q.Dequeue(); ok {
				buf[0], n = v, 1
			}
		case 1:
			if q.DequeueBulk(buf[:k]) {
				n = k
			}
		case 2:
			n = q.DequeueBurst(buf[:k])
		}
		for _, v := range buf[:n] {
			p, i := v>>tagShift, v&(1<<tagShift-1)
			if p >= uint64(producers) {
				return fmt.Errorf("value %#x has unknown producer %d", v, p)
			}
			if i != next[p] {
				return fmt.Errorf("producer %d: got #%d, want #%d", p, i, next[p])
			}
			next[p]++
		}
		got += n
		if n == 0 {
			runtime.Gosched()
		}
	}
	if v, ok := q.Dequeue(); ok {
		return fmt.Errorf("extra value %#x after all %d were received", v, got)
	}
	if q.Len() != 0 {
		return fmt.Errorf("Len %d after draining", q.Len())
	}
	return nil
}

// runPipeline runs producers goroutines against one consumer on the test
// goroutine. The item count, not a timer, bounds the test.
func runPipeline(t *testing.T, q queue[uint64], producers, count int) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() { produce(q, uint64(p), count, &stop) })
	}
	err := consume(q, producers, count)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentSPSC(t *testing.T) {
	r, err := NewSPSC[uint64](64)
	if err != nil {
		t.Fatal(err)
	}
	runPipeline(t, r, 1, 200_000)
}

func TestConcurrentMPSC(t *testing.T) {
	r, err := NewMPSC[uint64](64)
	if err != nil {
		t.Fatal(err)
	}
	runPipeline(t, r, 4, 50_000)
}
