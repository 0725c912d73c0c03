// Package txthread moves a port's transmit work onto a goroutine of its
// own per queue, as vhost-net's TX thread does for a guest: the worker
// only enqueues a burst, and the TX goroutine, with a buffer cache of its
// own, hands it to the device and frees the buffers. Those frees are
// deferred remote frees back to the workers that allocated the buffers —
// which is what softnet lab's "+defer" step measures on real devices.
package txthread

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/cacheline"
	"softnet.dev/port"
	"softnet.dev/ring"
)

const (
	// Per queue, between a worker and the TX goroutine. Small: every
	// queued buffer is one the worker's RX cannot use, and a pool's 64 KiB
	// class holds only a few hundred.
	ringSize  = 256
	burst     = 64
	idleSpins = 64 // empty polls before the TX goroutine parks
)

// Port wraps another port; its TxQueues enqueue, everything else passes
// through.
type Port struct {
	port.Port
	queues []*txQueue
	once   sync.Once
}

type txQueue struct {
	_      [cacheline.Size]byte
	inner  port.TxQueue
	ring   *ring.SPSC[*buffer.Buf]
	cache  *buffer.Cache
	wake   chan struct{}
	parked atomic.Bool
	stop   atomic.Bool
	err    atomic.Pointer[error] // the inner queue's failure, reported on the next Transmit
	done   chan struct{}
	_      [cacheline.Size]byte
}

// Wrap starts one TX goroutine per transmit queue of p, each with a cache
// from pool. A port without transmit queues is returned as it is.
func Wrap(p port.Port, pool *buffer.Pool) (port.Port, error) {
	if p.TxQueue(0) == nil {
		return p, nil
	}
	w := &Port{Port: p}
	for i := range p.Info().Queues {
		c, err := pool.NewCache(nil)
		if err != nil {
			w.stopAll()
			return nil, fmt.Errorf("txthread %s: queue %d: %w", p.Info().Name, i, err)
		}
		r, err := ring.NewSPSC[*buffer.Buf](ringSize)
		if err != nil {
			c.Close()
			w.stopAll()
			return nil, err
		}
		q := &txQueue{inner: p.TxQueue(i), ring: r, cache: c, wake: make(chan struct{}, 1), done: make(chan struct{})}
		w.queues = append(w.queues, q)
		go q.run()
	}
	return w, nil
}

// TxQueue returns the enqueueing side of queue i.
func (w *Port) TxQueue(i int) port.TxQueue {
	if i < 0 || i >= len(w.queues) {
		return nil
	}
	return w.queues[i]
}

// CloseInto stops the TX goroutines once they have sent what is queued, then
// closes the wrapped port.
func (w *Port) CloseInto(c *buffer.Cache) error {
	w.stopAll()
	return w.Port.CloseInto(c)
}

func (w *Port) stopAll() {
	w.once.Do(func() {
		for _, q := range w.queues {
			q.stop.Store(true)
			q.signal()
			<-q.done
			q.cache.Close()
		}
	})
}

// Transmit enqueues the burst for the TX goroutine; what does not fit is
// dropped with drop.FullRing. An error the device returned since the last
// call is reported now, so the engine marks the port down.
func (q *txQueue) Transmit(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	if q.stop.Load() {
		c.DropBulk(bufs, drop.DevReady)
		return 0, port.ErrDown
	}
	n := q.ring.EnqueueBurst(bufs)
	if n < len(bufs) {
		c.DropBulk(bufs[n:], drop.FullRing)
	}
	if n > 0 && q.parked.Load() {
		q.signal()
	}
	if e := q.err.Load(); e != nil {
		return n, *e
	}
	return n, nil
}

func (q *txQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *txQueue) run() {
	defer close(q.done)
	out := make([]*buffer.Buf, burst)
	idle := 0
	for {
		q.cache.Drain()
		if n := q.ring.DequeueBurst(out); n > 0 {
			if _, err := q.inner.Transmit(q.cache, out[:n]); err != nil && q.err.Load() == nil {
				// A variable of its own, so that only this path allocates.
				failed := fmt.Errorf("tx thread: %w", err)
				q.err.Store(&failed)
			}
			idle = 0
			continue
		}
		if q.stop.Load() {
			return // the ring is empty: everything enqueued was sent
		}
		if idle++; idle < idleSpins {
			runtime.Gosched()
			continue
		}
		// Park; a Transmit that sees parked wakes us. Re-check the ring
		// after announcing it, or a burst enqueued in between would wait.
		q.parked.Store(true)
		if q.ring.Len() == 0 && !q.stop.Load() {
			q.cache.Publish()
			<-q.wake
		}
		q.parked.Store(false)
		idle = 0
	}
}
