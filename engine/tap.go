package engine

import (
	"errors"
	"fmt"
	"reflect"

	"softnet.dev/buffer"
	"softnet.dev/drop"
)

// A Tap sees every packet a port receives and transmits while it is
// attached (SetTap), on the worker's goroutine: a received burst before
// the programs run, a transmitted one before the port gets it, so a GSO
// packet is seen whole, as tcpdump on the device would show it. Tapped
// must copy what it keeps and must not block: a capture that cannot keep
// up loses its copies, never the packets.
type Tap interface {
	Tapped(worker, port int, tx bool, b *buffer.Buf)
}

// A DropMonitor sees every packet the engine's buffers are dropped with
// (SetDropMonitor), with its reason, on the worker's goroutine before
// the buffer is freed: drops by verdict, by a port's queues (a malformed
// device header, a full ring) and by consumers. port is the port the
// packet arrived on or was going to, or -1 if the drop belongs to no
// port. Dropped must copy what it keeps and must not block.
type DropMonitor interface {
	Dropped(worker, port int, r drop.Reason, b *buffer.Buf)
}

// Boxes for atomic pointers to interfaces.
type (
	tapRef     struct{ Tap }
	monitorRef struct{ DropMonitor }
)

// ErrTapBusy is SetTap's error for a port that has a tap already.
var ErrTapBusy = errors.New("the port has a tap already")

// SetTap attaches t to the port with the given index if the port has no
// tap, and fails with ErrTapBusy if it has one: a tap is never replaced,
// so a capture that looked a port up before its index went to another
// port cannot silence that port's capture. Workers see the tap at their
// next burst; RemovePort takes it off with the port. t must be comparable (a pointer), as ClearTap compares it.
func (e *Engine) SetTap(portIndex int, t Tap) error {
	switch {
	case t == nil:
		return fmt.Errorf("engine: port %d: a nil tap (ClearTap detaches)", portIndex)
	case !reflect.TypeOf(t).Comparable():
		return fmt.Errorf("engine: port %d: a tap of type %T, which ClearTap cannot compare", portIndex, t)
	}
	p := e.set.Load().port(portIndex)
	if p == nil {
		return fmt.Errorf("engine: port %d: %w", portIndex, ErrNoPort)
	}
	if !p.tap.CompareAndSwap(nil, &tapRef{t}) {
		return fmt.Errorf("engine: port %d (%s): %w", portIndex, p.info.Name, ErrTapBusy)
	}
	return nil
}

// ClearTap detaches t from the port with the given index if t is its
// tap, and reports whether it was: a capture that ends clears its own
// tap, never the one of a port that took the index since. A detached
// tap may still be called by a burst in progress: wait for a round
// (Stats changing) before freeing what it uses.
func (e *Engine) ClearTap(portIndex int, t Tap) bool {
	p := e.set.Load().port(portIndex)
	if p == nil {
		return false
	}
	// Only t's own installation comes off: the swap fails if the tap
	// changed since the load, and SetTap's check keeps the comparison
	// from panicking.
	ref := p.tap.Load()
	return ref != nil && ref.Tap == t && p.tap.CompareAndSwap(ref, nil)
}

// SetDropMonitor attaches m, replacing any monitor; nil detaches. With no
// monitor a drop costs one atomic load more than without this feature.
func (e *Engine) SetDropMonitor(m DropMonitor) {
	var ref *monitorRef
	if m != nil {
		ref = &monitorRef{m}
	}
	e.monitor.Store(ref)
}

// dropped is every worker cache's drop hook.
func (w *worker) dropped(b *buffer.Buf, r drop.Reason) {
	if m := w.e.monitor.Load(); m != nil {
		m.Dropped(w.index, w.curPort, r, b)
	}
}

// tapBurst shows a burst to the port's tap, if it has one.
func (w *worker) tapBurst(p *portState, tx bool, bufs []*buffer.Buf) {
	if t := p.tap.Load(); t != nil {
		for _, b := range bufs {
			t.Tapped(w.index, p.index, tx, b)
		}
	}
}
