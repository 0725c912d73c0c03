package endpoint

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"softnet.dev/internal/cacheline"
)

// Endpoint is an application's end of a bound flow. Its methods are safe
// for concurrent use; they serialize on a mutex of the application side,
// which a worker takes only once per endpoint, to retire it after Close.
type Endpoint struct {
	t     *Table
	id    int
	flow  Flow
	lanes []*lane // by worker
	home  *lane   // the lane sends go through

	// Read by the workers at every delivery, written rarely.
	closing   atomic.Bool   // set by Close; workers then take everything back
	reclaimed atomic.Int32  // lanes whose buffers the workers took back
	waiting   atomic.Bool   // the application sleeps in Wait
	notify    chan struct{} // capacity 1: wakes Wait
	done      chan struct{} // closed by Close
	wantSend  atomic.Bool   // the home worker keeps fill stocked

	// The application writes what follows at every call: keep it off the
	// lines the workers read, or each call costs them a cache miss.
	_        [cacheline.Size]byte
	mu       sync.Mutex // the application side
	closed   bool
	held     []uint32 // by buffer id: the generation held, sendGen, or 0
	lends    []lend   // receive's scratch
	next     int      // lane to receive from first, for fairness
	received uint64
	released uint64
	badRel   uint64
	rd       reader // ReadFrom's state
	dbg      *debugSites
	_        [cacheline.Size]byte
}

func newEndpoint(t *Table, id int, f Flow, opt Options) (*Endpoint, error) {
	e := &Endpoint{
		t: t, id: id, flow: f,
		held:   make([]uint32, t.capacity),
		lends:  make([]lend, 64),
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	quota := max(1, (opt.Quota+len(t.workers)-1)/len(t.workers))
	for w, ws := range t.workers {
		l, err := newLane(e, ws, opt.RingSize, quota, w == id%len(t.workers))
		if err != nil {
			return nil, err
		}
		e.lanes = append(e.lanes, l)
		if l.send != nil {
			e.home = l
		}
	}
	if t.cfg.Debug {
		e.dbg = newDebugSites(t.capacity)
	}
	e.rd.init()
	return e, nil
}

// Flow returns what the endpoint is bound to.
func (e *Endpoint) Flow() Flow { return e.flow }

func (e *Endpoint) errorf(format string, args ...any) error {
	return fmt.Errorf("endpoint %s: "+format, append([]any{e.flow}, args...)...)
}

// Receive fills a prefix of out with lent views and returns how many; 0
// if none is waiting (it does not block: see Wait). Each view must be
// released once.
func (e *Endpoint) Receive(out []View) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return 0, e.errorf("receive: %w", ErrClosed)
	}
	return e.receive(out), nil
}

func (e *Endpoint) receive(out []View) int {
	n := 0
	for i := range e.lanes {
		w := (e.next + i) % len(e.lanes)
		l := e.lanes[w]
		for n < len(out) {
			k := l.rx.DequeueBurst(e.lends[:min(len(out)-n, len(e.lends))])
			for j := range e.lends[:k] {
				x := &e.lends[j]
				e.held[x.id] = x.gen
				x.setView(&out[n], l.ws.frames[x.id], e.flow.Raw, w)
				n++
			}
			if k < len(e.lends) {
				break // the ring is empty, or out is full
			}
		}
	}
	if e.next++; e.next == len(e.lanes) {
		e.next = 0
	}
	e.received += uint64(n)
	return n
}

// Release returns views to the workers that lent them. A view not held by
// the endpoint (released already, another endpoint's, or the zero View)
// is skipped and reported in the error, which wraps ErrNotLent; the
// others are still released.
func (e *Endpoint) Release(views ...View) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return e.errorf("release: %w", ErrClosed)
	}
	return e.release(views)
}

func (e *Endpoint) release(views []View) error {
	var first error
	bad := 0
	for i := range views {
		v := &views[i]
		if !e.holds(v) || int(v.worker) >= len(e.lanes) {
			bad++
			if first == nil {
				first = e.misuse(v)
			}
			continue
		}
		id := v.id
		e.held[id] = 0
		if e.dbg != nil {
			e.dbg.released(id, v.gen)
			poisonView(v)
		}
		l := e.lanes[v.worker]
		l.appStage = append(l.appStage, token{id: id, gen: v.gen})
	}
	e.released += uint64(len(views) - bad)
	e.badRel += uint64(bad)
	e.flushReleases()
	if bad > 1 {
		return fmt.Errorf("%w (and %d more)", first, bad-1)
	}
	return first
}

// flushReleases moves staged releases into the refill rings and wakes
// the workers that sleep.
func (e *Endpoint) flushReleases() {
	for _, l := range e.lanes {
		if len(l.appStage) == 0 {
			continue
		}
		n := l.refill.EnqueueBurst(l.appStage)
		// A refill ring holds every view its lane may have lent, so this
		// only keeps tokens back if a worker is far behind; they go at the
		// next call.
		rest := copy(l.appStage, l.appStage[n:])
		clear(l.appStage[rest:])
		l.appStage = l.appStage[:rest]
		l.ws.kick()
	}
}

// holds reports whether v is a view the endpoint holds; e.mu is held.
func (e *Endpoint) holds(v *View) bool {
	return v.gen != 0 && int(v.id) < len(e.held) && e.held[v.id] == v.gen
}

// misuse builds the error for a bad release.
func (e *Endpoint) misuse(v *View) error {
	if v.gen == 0 {
		return e.errorf("release of a view that was never received: %w", ErrNotLent)
	}
	id := v.id
	if e.dbg != nil && int(id) < len(e.held) {
		if msg, ok := e.dbg.doubleRelease(id, v.gen); ok {
			return e.errorf("buffer %d: %s: %w", id, msg, ErrNotLent)
		}
	}
	return e.errorf("buffer %d: double release, or not lent to this endpoint: %w", id, ErrNotLent)
}

// Check reports whether v is still lent to the endpoint: an error
// wrapping ErrNotLent means its slices must no longer be read (use after
// release).
func (e *Endpoint) Check(v View) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return e.errorf("check: %w", ErrClosed)
	}
	if !e.holds(&v) {
		return e.misuse(&v)
	}
	return nil
}

// Wait blocks until a view is waiting to be received, the endpoint is
// closed (ErrClosed) or ctx is done.
func (e *Endpoint) Wait(ctx context.Context) error {
	for {
		if e.closing.Load() {
			return e.errorf("wait: %w", ErrClosed)
		}
		if e.pending() {
			return nil
		}
		// Announce the sleep, then look again: a worker that enqueued
		// before seeing waiting is caught by the second look.
		e.waiting.Store(true)
		if e.pending() {
			e.waiting.Store(false)
			return nil
		}
		select {
		case <-e.notify:
		case <-e.done:
		case <-ctx.Done():
			e.waiting.Store(false)
			return ctx.Err()
		}
		e.waiting.Store(false)
	}
}

func (e *Endpoint) pending() bool {
	for _, l := range e.lanes {
		if l.rx.Len() > 0 {
			return true
		}
	}
	return false
}

// wake is the worker's side of Wait.
func (e *Endpoint) wake() {
	if e.waiting.Load() {
		select {
		case e.notify <- struct{}{}:
		default:
		}
	}
}

// Close unbinds the endpoint and gives back every buffer it holds: views
// not yet released (which must not be read any more), views not yet
// received, and send buffers. The workers free them at their next poll.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.shut()
	e.t.unbind(e)
	for _, l := range e.lanes {
		l.ws.kick()
	}
	return nil
}

// shut ends the application side; e.mu is held. From here on only the
// workers (or the table's Close) touch the rings.
func (e *Endpoint) shut() {
	e.flushReleases()
	e.closed = true
	e.closing.Store(true)
	close(e.done)
}
