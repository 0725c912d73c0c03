package memport

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/packet"
)

// Two workers, each with its own cache, move a generator's queue into a
// deferred sink's queue, while a monitor reads every Stats: the race
// detector checks the hand-offs, the sink checks every packet.
func TestGeneratorToDeferredSinkConcurrent(t *testing.T) {
	const workers, count = 2, 20000
	pool := newPool(t, buffer.Config{})
	g := mustGen(t, GenConfig{Queues: workers, Flows: 8, Count: count, Bulk: true, IPv6: true, Layer: packet.L2, Sizes: []int{64, 1500, 512}})
	s := mustSink(t, SinkConfig{Queues: workers, Validate: ValidateFull, Completion: CompletionDeferred, Pool: pool, Layer: packet.L2, RingSize: 256})
	caches := make([]*buffer.Cache, workers)
	for i := range caches {
		caches[i] = newCache(t, pool)
	}
	var wg sync.WaitGroup
	var done atomic.Bool
	var monitor sync.WaitGroup
	monitor.Go(func() {
		for !done.Load() {
			_, _, _ = g.Stats(), s.Stats(), pool.Stats()
			time.Sleep(100 * time.Microsecond)
		}
	})
	for w := range workers {
		wg.Go(func() {
			c, rx, tx := caches[w], g.RxQueue(w), s.TxQueue(w)
			bufs := make([]*buffer.Buf, 32)
			for rx.Arm() {
				c.Drain()
				n, err := rx.Receive(c, bufs)
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				if _, err := tx.Transmit(c, bufs[:n]); err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				c.Publish()
			}
		})
	}
	wg.Wait()
	if err := s.CloseInto(nil); err != nil {
		t.Fatal(err)
	}
	done.Store(true)
	monitor.Wait()
	st := s.Stats()
	if st.Packets+st.FullRing != workers*count || st.Bad != 0 || st.Reordered != 0 || st.Lost > st.FullRing {
		t.Errorf("sink %+v", st)
	}
	if gs := g.Stats(); gs.Packets != workers*count {
		t.Errorf("generator %+v", gs)
	}
	if ps := pool.Stats(); ps.RemoteFrees == 0 {
		t.Error("no remote frees")
	}
	leakCheck(t, pool)
}
