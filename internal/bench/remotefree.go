package bench

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"softnet.dev/buffer"
	"softnet.dev/ring"
)

var remoteFreeExperiment = &Experiment{
	Name:   "remote-free",
	Desc:   "a producer goroutine allocates, a consumer on the other core frees",
	Metric: "mbufs_per_s",
	Unit:   "Mbuf/s",
	Higher: true,
	Variants: []Variant{
		{Name: "shared", Prepare: prepareShared(false)},
		{Name: "shared-bulk", Prepare: prepareShared(true)},
		{Name: "syncpool", Prepare: prepareRemoteSyncPool},
		{Name: "deferred", Prepare: prepareDeferred(true)},
		{Name: "deferred-each", Prepare: prepareDeferred(false)},
	},
	Goals: []Goal{
		{Variant: "deferred", Against: "shared", Bound: 2},
		{Variant: "deferred", Against: "syncpool", Bound: 1.5},
	},
}

const (
	handoffBurst = 32   // buffers per ring operation, the same for every variant
	handoffRing  = 1024 // ring capacity between producer and consumer
)

// handoff moves n buffers from the calling goroutine, which allocates them
// one at a time with get, to a consumer goroutine, which frees each burst
// it dequeues with put, through an SPSC ring. poll runs at the top of each
// producer burst, as a worker's poll loop would. It returns the number of
// buffers moved.
func handoff[T any](ctx context.Context, n int, r *ring.SPSC[T], get func() (T, bool), put func([]T), poll func()) int {
	var target atomic.Int64
	target.Store(int64(n))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var burst [handoffBurst]T
		var w waiter
		for got := int64(0); got < target.Load(); {
			m := r.DequeueBurst(burst[:])
			if m == 0 {
				w.wait()
				continue
			}
			put(burst[:m])
			got += int64(m)
		}
	}()
	var burst [handoffBurst]T
	var w waiter
	sent := 0
	for sent < n {
		if stopped(ctx, sent&^(handoffBurst-1)) {
			break
		}
		if poll != nil {
			poll()
		}
		k := 0
		for ; k < min(handoffBurst, n-sent); k++ {
			v, ok := get()
			if !ok {
				break
			}
			burst[k] = v
		}
		if k == 0 {
			w.wait()
			continue
		}
		for off := 0; off < k; {
			m := r.EnqueueBurst(burst[off:k])
			if m == 0 {
				w.wait()
			}
			off += m
		}
		sent += k
	}
	target.Store(int64(sent))
	wg.Wait()
	return sent
}

// waiter spins on the ring before yielding: with both goroutines on their
// own cores a yield costs more than the wait (the scheduler's locks then
// dominate every variant alike), but it must come eventually so that a
// run with GOMAXPROCS=1 still progresses.
type waiter struct{ spins int }

func (w *waiter) wait() {
	if w.spins++; w.spins >= 256 {
		w.spins = 0
		runtime.Gosched()
	}
}

// lockedDepot is the allocator most hand-written datapaths start with: one
// free list behind one mutex.
type lockedDepot struct {
	mu   sync.Mutex
	free []*[]byte
}

func (d *lockedDepot) get() (*[]byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.free) == 0 {
		return nil, false
	}
	b := d.free[len(d.free)-1]
	d.free = d.free[:len(d.free)-1]
	return b, true
}

func (d *lockedDepot) put(bs ...*[]byte) {
	d.mu.Lock()
	d.free = append(d.free, bs...)
	d.mu.Unlock()
}

// fill and consume stand for the work on the packet: the producer writes
// it (a store, as a device read would), the consumer reads it.
func fill(b []byte)           { b[0] = 1 }
func consume(b []byte) uint64 { return uint64(b[0]) }

// prepareShared frees into one locked depot, per buffer or, with bulk,
// one lock per dequeued burst.
func prepareShared(bulk bool) func() (func(context.Context, int) int, func() error, error) {
	return func() (func(context.Context, int) int, func() error, error) {
		d := &lockedDepot{free: make([]*[]byte, 0, 4*handoffRing)}
		for range 4 * handoffRing {
			b := make([]byte, frameRoom)
			d.free = append(d.free, &b)
		}
		r, err := ring.NewSPSC[*[]byte](handoffRing)
		if err != nil {
			return nil, nil, err
		}
		var sum uint64
		get := func() (*[]byte, bool) {
			b, ok := d.get()
			if ok {
				fill(*b)
			}
			return b, ok
		}
		put := func(bs []*[]byte) {
			for _, b := range bs {
				sum += consume(*b)
			}
			if bulk {
				d.put(bs...)
				return
			}
			for _, b := range bs {
				d.put(b)
			}
		}
		return func(ctx context.Context, n int) int { return handoff(ctx, n, r, get, put, nil) }, noCleanup, nil
	}
}

func prepareRemoteSyncPool() (func(context.Context, int) int, func() error, error) {
	p := newSyncPool()
	r, err := ring.NewSPSC[*[]byte](handoffRing)
	if err != nil {
		return nil, nil, err
	}
	var sum uint64
	get := func() (*[]byte, bool) {
		b := p.Get().(*[]byte)
		fill(*b)
		return b, true
	}
	put := func(bs []*[]byte) {
		for _, b := range bs {
			sum += consume(*b)
			p.Put(b)
		}
	}
	return func(ctx context.Context, n int) int { return handoff(ctx, n, r, get, put, nil) }, noCleanup, nil
}

// prepareDeferred frees through softnet's deferred remote free. With
// bulk, the consumer frees each burst it dequeued with one ConsumeBulk, as
// a worker frees a TX completion batch (one CAS per burst); without, it
// calls Consume per buffer (one CAS each).
func prepareDeferred(bulk bool) func() (func(context.Context, int) int, func() error, error) {
	return func() (func(context.Context, int) int, func() error, error) {
		// Up to a ring and a burst of buffers are in flight between the
		// two goroutines: an inbound bound of 128 (the default, the
		// kernel's skb_defer_max) overflows now and then, the freer keeps
		// those buffers, and they come back through the depot; 512 keeps
		// the deferred path the only one, which is what this measures.
		p, err := buffer.NewPool(buffer.Config{Classes: []buffer.ClassConfig{{Room: frameRoom, Count: 4 * handoffRing}}, DeferMax: 512})
		if err != nil {
			return nil, nil, err
		}
		producer, err := p.NewCache(nil)
		if err != nil {
			return nil, nil, err
		}
		consumer, err := p.NewCache(nil)
		if err != nil {
			return nil, nil, err
		}
		r, err := ring.NewSPSC[*buffer.Buf](handoffRing)
		if err != nil {
			return nil, nil, err
		}
		var sum uint64
		get := func() (*buffer.Buf, bool) {
			b, err := producer.Get(0)
			if err != nil {
				return nil, false
			}
			fill(b.Frame())
			return b, true
		}
		put := func(bs []*buffer.Buf) {
			for _, b := range bs {
				sum += consume(b.Frame())
				if !bulk {
					consumer.Consume(b)
				}
			}
			if bulk {
				consumer.ConsumeBulk(bs)
			}
		}
		poll := func() { producer.Drain() }
		return func(ctx context.Context, n int) int { return handoff(ctx, n, r, get, put, poll) }, p.Close, nil
	}
}
