//go:build linux

package vhostuser

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/internal/uring"
)

// Calls notify the guest: one is an 8-byte write of one to the ring's
// call eventfd, which the front-end owns. takeCall makes the eventfd
// non-blocking, but O_NONBLOCK belongs to the open file description,
// which the front-end shares: it can clear the flag again and keep the
// counter saturated, and a write(2) would then block the worker, and
// every port it serves, until the front-end reads. Linux has no write
// of an eventfd that cannot block (pwritev2 refuses RWF_NOWAIT on one),
// so each ring writes through an io_uring of its own instead: the
// kernel tries the write without blocking and otherwise waits for room
// itself (by polling the eventfd, or on an io-wq thread), and the
// worker never waits for the completion. It reaps completions at its
// next call, without a system call.
//
// One write at most is in flight per ring: while it waits, the counter
// is saturated (or the front-end made the eventfd blocking), so the
// guest has a notification pending, and the calls meanwhile are not
// made (counted as failed). A write still in flight when the front-end
// replaces its eventfd or goes away is cancelled then; closing the ring,
// when the port closes, cancels whatever is left, and the kernel
// interrupts an io-wq thread that waits in the write.
//
// The ring belongs to the virtqueue, not to a worker: every use of it,
// the workers' calls and the control plane's cancellation, is under
// the vring's mu, which a burst holds anyway, so it takes no lock of its
// own and works from any thread (it is not single-issuer). A worker's
// ring shared by every port it serves would also need the control plane
// to reach it, and would let one front-end's stuck writes fill a ring
// that other ports' calls need.

// calls is a ring's call eventfd and the io_uring its writes go
// through, under the vring's mu.
type calls struct {
	fd   int         // the front-end's call eventfd; -1: the guest is not notified
	ring *uring.Ring // nil: plain writes, io_uring being unavailable
	// writing: a write is in flight; stale: to an eventfd that was
	// replaced since; cancelling: its cancellation is in flight.
	writing, stale, cancelling bool
}

// User data of a call ring's requests.
const (
	callWrite uint64 = iota + 1
	callCancel
)

// callEntries is a call ring's submission queue size. A write and its
// cancellation are all a ring ever has in flight: with completions
// seen and not yet given back, the completion queue (twice as large)
// never overflows.
const callEntries = 4

// newCallRing sets up a ring's io_uring: a variable, so that a test can
// have io_uring refused.
var newCallRing = func() (*uring.Ring, error) {
	p, err := uring.Supported()
	if err != nil {
		return nil, err
	}
	if !p.Has(uring.OpWrite) || !p.Has(uring.OpAsyncCancel) {
		return nil, fmt.Errorf("%w: kernel lacks IORING_OP_WRITE (Linux 5.6) or IORING_OP_ASYNC_CANCEL (5.5)", uring.ErrUnavailable)
	}
	return uring.New(uring.Options{Entries: callEntries})
}

// plainCallsLogged: the fallback to plain writes is logged once per
// process.
var plainCallsLogged = new(sync.Once)

// openCalls sets up the call rings of the port's vrings. Without
// io_uring (or with one older than the setup flags package uring asks
// for, Linux 5.18: EINVAL) every call is a plain write, which a
// front-end can block as above: logged once.
func (p *Port) openCalls() error {
	for _, v := range p.rings {
		r, err := newCallRing()
		if errors.Is(err, uring.ErrUnavailable) || errors.Is(err, unix.EINVAL) {
			plainCallsLogged.Do(func() {
				p.log.Warn("vhost-user calls are plain writes: a front-end that makes its call eventfd blocking and saturates it can block a worker", "err", err)
			})
			p.closeCalls()
			return nil
		}
		if err != nil {
			p.closeCalls()
			return fmt.Errorf("call ring %d: %w", v.index, err)
		}
		v.calls.ring = r
	}
	return nil
}

// closeCalls closes the call eventfds and rings, once no front-end is
// served: closing a ring cancels what it still has in flight.
func (p *Port) closeCalls() {
	for _, v := range p.rings {
		v.mu.Lock()
		v.calls.set(-1)
		if v.calls.ring != nil {
			_ = v.calls.ring.Close()
			v.calls.ring = nil
		}
		v.mu.Unlock()
	}
}

// set replaces the call eventfd with fd (-1: none), closing the old
// one; a write to the old one still in flight is cancelled.
func (c *calls) set(fd int) {
	if c.fd >= 0 {
		unix.Close(c.fd) // a write in flight holds the file itself
	}
	c.fd = fd
	if c.writing {
		c.stale = true
		c.cancelStale()
	}
}

// cancelStale cancels the write in flight, to a replaced eventfd,
// unless its cancellation is in flight already.
func (c *calls) cancelStale() {
	if c.cancelling {
		return
	}
	c.ring.GetSQE().PrepCancel(callWrite, 0, callCancel) // the queue is empty between calls
	c.cancelling = c.submit()
}

// call notifies the guest, and counts the call in ctr: made, or failed.
// A call to an eventfd that has not taken the previous one yet is not
// made, and costs no system call.
func (c *calls) call(ctr *counters) {
	if c.ring == nil {
		if _, err := unix.Write(c.fd, eight[:]); err == nil {
			ctr.N[cCalls]++
		} else {
			ctr.N[cCallsFailed]++
		}
		return
	}
	c.reap(ctr)
	if c.writing {
		ctr.N[cCallsFailed]++
		if c.stale {
			// The control plane's cancellation can miss the write while
			// the kernel moves it from its poll to a retry: try again.
			c.cancelStale()
		}
		return
	}
	c.ring.GetSQE().PrepWrite(c.fd, false, unsafe.Pointer(&eight[0]), len(eight), callWrite)
	if c.writing = c.submit(); !c.writing {
		ctr.N[cCallsFailed]++
		return
	}
	c.reap(ctr)
}

// submit submits the request prepared, without waiting, and reports
// whether the kernel took it. One it did not take (io_uring_enter
// failed as a whole: the kernel could not allocate the request) is
// dropped, not left for a later submission that would find its
// eventfd's number closed, or reused.
func (c *calls) submit() bool {
	_, _ = c.ring.Submit()
	if c.ring.Prepared() == 0 {
		return true
	}
	c.ring.Unprepare()
	return false
}

// reap settles the completions that are ready, without waiting: a
// write that the eventfd took counts as a call, one that failed or was
// cancelled as a failed call.
func (c *calls) reap(ctr *counters) {
	n := c.ring.Ready()
	for i := range n {
		e := c.ring.CQE(i)
		switch e.UserData {
		case callWrite:
			c.writing, c.stale = false, false
			if e.Res == int32(len(eight)) {
				ctr.N[cCalls]++
			} else {
				ctr.N[cCallsFailed]++
			}
		case callCancel:
			c.cancelling = false
		}
	}
	c.ring.Seen(n)
}
