package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/port"
)

// ErrNoPort is returned for a port index that holds no port.
var ErrNoPort = errors.New("no such port")

// ErrNotAdopted is returned, wrapped, when a worker did not take up a
// change of the ports within the adoption timeout (a program that
// blocks, say). The change is then as good as undone or done, never
// half: an added port is not added, a removed port is removed; but a
// port that a late worker may still use is closed, and its index given
// to another port, only once every worker has let it go (checked at
// later changes and at Close).
var ErrNotAdopted = errors.New("a worker did not take up the change in time")

// defaultAdoptTimeout bounds how long AddPort and RemovePort wait for
// every worker to take up a change: a round, or a wake-up from sleep, is
// microseconds; only a stuck worker takes longer.
const defaultAdoptTimeout = 2 * time.Second

// quarantined is a port that left the ports while a worker may still use
// it: it stays open, and its index reserved, until every worker has
// taken up generation safe or a later one (or none runs).
type quarantined struct {
	ps   *portState
	safe uint64
}

// AddPort adds p while the workers run (or before they start) and
// returns its index, as program verdicts use it: the lowest index no
// port holds or may still hold. setup, if not nil, runs with that index
// before any worker can see p, under the lock that serializes changes,
// so that what programs keep per port (its policy, say) is in place for
// its first packet; an error from it adds nothing. When AddPort returns,
// every running worker polls p's queues. p must not be used by anyone
// else from then on; the engine closes it (RemovePort, Close).
//
// On an error p is not added and is the caller's again, except with
// ErrNotAdopted: then some worker may have taken p up, so the engine
// keeps it, marked down, and closes it once they all let it go; until
// then its index, and what setup put there, are no other port's.
func (e *Engine) AddPort(p port.Port, setup func(index int) error) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return -1, errors.New("engine: closed")
	}
	e.release()
	cur := e.set.Load()
	ps, err := e.checkPort(cur, p)
	if err != nil {
		return -1, err
	}
	ps.index = e.freeIndex(cur)
	if setup != nil {
		if err := setup(ps.index); err != nil {
			return -1, fmt.Errorf("engine: port %s: %w", ps.info.Name, err)
		}
	}
	next := cur.with(ps.index, ps)
	if err := e.publish(next); err != nil {
		// Back to the ports without it, with no wait: the workers that
		// took it up give it up at their next round.
		ps.down.Store(true)
		back := next.with(ps.index, nil)
		e.set.Store(back)
		e.wakeWorkers()
		e.quarantine = append(e.quarantine, quarantined{ps: ps, safe: back.gen})
		return -1, fmt.Errorf("engine: port %s not added: %w", ps.info.Name, err)
	}
	e.release()
	return ps.index, nil
}

// freeIndex is the lowest index that neither a port of set nor a
// quarantined or detached one holds.
func (e *Engine) freeIndex(set *portSet) int {
	for i, p := range set.ports {
		if p == nil && !slices.ContainsFunc(e.quarantine, func(q quarantined) bool { return q.ps.index == i }) &&
			!slices.ContainsFunc(e.detached, func(d *detachedPort) bool { return d.ps.index == i }) {
			return i
		}
	}
	return len(set.ports)
}

// with returns the next generation of s, with p (nil: none) at index.
func (s *portSet) with(index int, p *portState) *portSet {
	next := &portSet{gen: s.gen + 1, ports: slices.Clone(s.ports)}
	if index >= len(next.ports) {
		next.ports = append(next.ports, make([]*portState, index+1-len(next.ports))...)
	}
	next.ports[index] = p
	return next
}

// RemovePort removes the port with the given index while the workers
// run: once every worker has given up its queues (between two of its
// rounds, without a lock on their side), the port is closed, purging
// what it still holds with drop.QueuePurge, so that every buffer it had
// comes home. Packets that programs still send to the index are dropped
// with drop.NoRoute. It is DetachPort and its close in one.
//
// With ErrNotAdopted the port is removed all the same, but closed, and
// its index given to another port, only once every worker has let it
// go.
func (e *Engine) RemovePort(index int) error {
	closePort, err := e.DetachPort(index)
	if err != nil {
		return err
	}
	return closePort()
}

// maxClosers bounds the ports that close at once, each into a cache
// of its own: a cache is a pool's for good.
const maxClosers = 8

// detachedPort is a port that no worker uses any more, waiting for
// DetachPort's caller to close it (closing: under way).
type detachedPort struct {
	ps      *portState
	closing bool
}

// DetachPort takes the port with the given index out of the workers'
// ports, as RemovePort does, and returns the function that closes it.
// Closing is the slow part (a TUN device's removal waits for the
// kernel to unregister it) and runs outside the lock that serializes
// changes, so other changes, and other closes, go on meanwhile; a
// caller that holds a lock of its own across DetachPort can release it
// before calling closePort. Until closePort returns, the port's index
// is no other port's. closePort is to be called once; a port it was not
// called for is closed by Close.
//
// With ErrNotAdopted the port is detached all the same, and closePort,
// returned too, does nothing: the engine closes the port once every
// worker has let it go.
func (e *Engine) DetachPort(index int) (closePort func() error, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("engine: closed")
	}
	e.release()
	cur := e.set.Load()
	p := cur.port(index)
	if p == nil {
		return nil, fmt.Errorf("engine: port %d: %w", index, ErrNoPort)
	}
	next := cur.with(index, nil)
	if err := e.publish(next); err != nil {
		// A worker may still use the port: closing it now could free
		// what the worker reads.
		p.down.Store(true)
		e.quarantine = append(e.quarantine, quarantined{ps: p, safe: next.gen})
		return func() error { return nil }, fmt.Errorf("engine: port %s removed, its closing deferred: %w", p.info.Name, err)
	}
	p.tap.Store(nil)
	d := &detachedPort{ps: p}
	e.detached = append(e.detached, d)
	return func() error { return e.closeDetached(d) }, nil
}

// closeDetached closes d outside mu, into a closer's cache, and then
// gives up its index. Close closes d itself if no one started to.
func (e *Engine) closeDetached(d *detachedPort) error {
	e.mu.Lock()
	if e.closed || d.closing || !slices.Contains(e.detached, d) {
		// Close closes it, or did.
		e.mu.Unlock()
		return nil
	}
	d.closing = true
	e.closers.Add(1)
	e.mu.Unlock()
	defer e.closers.Done()

	c := e.closerCache()
	err := d.ps.port.CloseInto(c)
	e.closerCaches <- c

	e.mu.Lock()
	e.detached = slices.DeleteFunc(e.detached, func(o *detachedPort) bool { return o == d })
	e.mu.Unlock()
	if err != nil {
		return fmt.Errorf("engine: close port %s: %w", d.ps.info.Name, err)
	}
	return nil
}

// closerCache returns a cache for a close to use alone: an idle one, a
// new one while fewer than maxClosers exist, else the first to come
// back.
func (e *Engine) closerCache() *buffer.Cache {
	select {
	case c := <-e.closerCaches:
		return c
	default:
	}
	for n := e.closerMade.Load(); n < maxClosers; n = e.closerMade.Load() {
		if !e.closerMade.CompareAndSwap(n, n+1) {
			continue
		}
		if c, err := e.cfg.Pool.NewCache(nil); err == nil {
			return c
		}
		break // the pool has no cache to spare: share those made
	}
	return <-e.closerCaches
}

// release closes the quarantined ports that no worker can use any more,
// which frees their indexes. e.mu is held.
func (e *Engine) release() {
	// A closer's cache, as for a detached port: ctl may be in use by one
	// outside mu. Closers give their caches back before they take mu.
	var c *buffer.Cache
	keep := e.quarantine[:0]
	for _, q := range e.quarantine {
		if e.running && !e.adopted(q.safe) {
			keep = append(keep, q)
			continue
		}
		q.ps.tap.Store(nil)
		if c == nil {
			c = e.closerCache()
		}
		if err := q.ps.port.CloseInto(c); err != nil {
			e.cfg.Log.Error("close port", "port", q.ps.info.Name, "err", err)
		}
	}
	if c != nil {
		e.closerCaches <- c
	}
	clear(e.quarantine[len(keep):])
	e.quarantine = keep
}

// adopted reports whether every worker has taken up generation gen or a
// later one.
func (e *Engine) adopted(gen uint64) bool {
	for _, w := range e.workers {
		if w.adopted.Load() < gen {
			return false
		}
	}
	return true
}

func (e *Engine) wakeWorkers() {
	for _, w := range e.workers {
		w.wake()
	}
}

// publish makes next the workers' ports and, if they run, waits until
// each has taken it up. e.mu is held, so they keep running meanwhile.
func (e *Engine) publish(next *portSet) error {
	e.set.Store(next)
	if !e.running {
		return nil // each worker adopts the set when it starts
	}
	e.wakeWorkers()
	// Each worker signals once it took up a generation: the wait is a
	// wake-up from sleep or the end of a round, not a polling interval.
	timeout := time.NewTimer(e.adoptTimeout)
	defer timeout.Stop()
	expired := false
	for _, w := range e.workers {
		for w.adopted.Load() < next.gen {
			if expired {
				return fmt.Errorf("worker %d, within %v: %w", w.index, e.adoptTimeout, ErrNotAdopted)
			}
			select {
			case <-e.adoptedSignal:
			case <-timeout.C:
				expired = true // one more look: the worker may just have caught up
			}
		}
	}
	return nil
}
