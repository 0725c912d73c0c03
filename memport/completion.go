package memport

import (
	"runtime"
	"softnet.dev/internal/cacheline"
	"sync/atomic"

	"softnet.dev/buffer"
	"softnet.dev/ring"
)

const (
	completionBurst = 64
	// idleYields is how many empty polls a completion goroutine yields
	// through before it parks: enough to ride out the gap between two
	// bursts of a busy worker without a wakeup, few enough that an idle
	// sink costs nothing.
	idleYields = 64
	// publishEvery is how many busy rounds pass between publishes of the
	// completion cache's counters; it also publishes before parking.
	publishEvery = 64
)

// completer is the TX completion of one Deferred sink queue: a goroutine
// that takes bursts from an SPSC ring, validates them and frees them into
// a cache of its own. When the ring stays empty it parks on a channel; a
// transmitter sends on it only when the goroutine announced it was
// parking, so a busy sink pays one atomic load per burst, not a channel
// operation.
type completer struct {
	ring  *ring.SPSC[*buffer.Buf]
	cache *buffer.Cache

	_        cacheline.Pad
	sleeping atomic.Bool
	stopping atomic.Bool
	wake     chan struct{} // capacity 1: a pending wakeup is never lost
	_        cacheline.Pad
}

func newCompleter(r *ring.SPSC[*buffer.Buf], c *buffer.Cache) *completer {
	return &completer{ring: r, cache: c, wake: make(chan struct{}, 1)}
}

// kick wakes the goroutine if it is parked or about to park. The sleeping
// flag is stored before the goroutine's last look at the ring and loaded
// here after the enqueue, so one of the two sees the other.
func (d *completer) kick() {
	if d.sleeping.Load() && d.sleeping.CompareAndSwap(true, false) {
		d.signal()
	}
}

func (d *completer) signal() {
	select {
	case d.wake <- struct{}{}:
	default: // a wakeup is already pending
	}
}

// stop asks the goroutine to free what is queued and return. The
// transmitters must have stopped: whatever they enqueued is then visible
// to the goroutine once it sees stopping.
func (d *completer) stop() {
	d.stopping.Store(true)
	d.signal()
}

// run is the goroutine's loop.
func (d *completer) run(q *sinkQueue) {
	var burst [completionBurst]*buffer.Buf
	idle, rounds := 0, 0
	for {
		if n := d.ring.DequeueBurst(burst[:]); n > 0 {
			q.account(burst[:n])
			d.cache.ConsumeBulk(burst[:n])
			clear(burst[:n])
			idle = 0
			if rounds++; rounds == publishEvery {
				d.cache.Publish()
				rounds = 0
			}
			continue
		}
		if d.stopping.Load() {
			// Stopping was stored after the last enqueue, and the
			// ring was empty after it was seen: nothing more comes.
			if d.ring.Len() == 0 {
				d.cache.Publish()
				return
			}
			continue
		}
		if idle++; idle < idleYields {
			runtime.Gosched()
			continue
		}
		d.cache.Publish()
		d.sleeping.Store(true)
		if d.ring.Len() == 0 && !d.stopping.Load() {
			<-d.wake
		}
		d.sleeping.Store(false)
		idle = 0
	}
}
