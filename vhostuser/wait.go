//go:build linux

package vhostuser

import (
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// An idle worker sleeps on each RX queue's FD, an epoll set of the
// queue's own that holds, both edge-triggered:
//   - wakeFD, which the control plane writes when the ring changes
//     (starts, stops, gets a new kick), and the polling timer when a ring
//     without a kick has entries;
//   - the ring's kick eventfd, while the ring runs: the front-end's, so
//     it is never read (it may block, eventfd.go), and not watched while
//     the ring does not run, so that a guest that kicks a ring that is
//     stopped, disabled or given up costs the worker nothing.
//
// Arm takes the edges from the set (epoll_wait with no timeout) before
// it looks at the ring, so the set is readable again only for what comes
// after: with level-triggered kicks that only a read resets, a kick on a
// ring that does not run would leave the set readable for good and the
// worker spinning.

// Polling mode. The virtio and vhost-user specs leave a ring without a
// kick descriptor (VHOST_USER_VRING_NOFD, or a kick that cannot be
// watched) to the device to poll. A worker busy-polls its rings while
// packets come (the engine's BusyPoll); when it goes to sleep, Arm
// starts the queue's polling timer, whose callback looks at the ring's
// available index, under the ring's lock, and wakes the worker only if
// the guest published entries. Otherwise it looks again after twice as
// long, from pollMin up to pollMax; Arm starts again from pollMin only
// once the ring moved, so that a worker woken often by other queues
// does not keep an idle ring's timer short. A guest that sends now and
// then waits at most pollMax for its packet to be seen, and an idle one
// costs a timer callback every pollMax, not a worker's wakeup (which
// polls every queue of every port the worker serves). pollMax is long
// because a wakeup costs the process far more than the look at the ring:
// the Go runtime hands threads over, and on a virtual machine, where the
// tests run, arming and taking a timer exits to the hypervisor. At 100
// ms, an idle ring in polling mode keeps the switch well within the 1%
// of a CPU that TestHostileFrontendProcess allows it.
const (
	pollMin = 100 * time.Microsecond
	pollMax = 100 * time.Millisecond
)

// waiter is an RX queue's sleep: its epoll set, and the polling timer.
type waiter struct {
	epfd   int
	wakeFD int
	events [4]unix.EpollEvent // more than the set holds: one epoll_wait takes every edge
	poll   *time.Timer
	polls  atomic.Uint64 // the worker's wakeups the timer made (Stats.Polls)
	// Under the ring's lock, which Arm and the timer's callback hold:
	// the timer is set (pollSet) to pollEvery, from when the ring's next
	// entry was polledAt; closed: the queue is closing, its descriptors
	// with it.
	pollSet   bool
	pollEvery time.Duration
	polledAt  uint16
	closed    bool
}

func (w *waiter) open(poll func()) error {
	w.epfd, w.wakeFD = -1, -1
	var err error
	if w.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("epoll_create1: %w", err)
	}
	if w.wakeFD, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		w.closeFDs()
		return fmt.Errorf("eventfd: %w", err)
	}
	if err := w.watch(w.wakeFD); err != nil {
		w.closeFDs()
		return err
	}
	w.poll = time.AfterFunc(time.Hour, poll)
	w.poll.Stop()
	return nil
}

func (w *waiter) watch(fd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(fd)}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl add %d: %w", fd, err)
	}
	return nil
}

func (w *waiter) unwatch(fd int) { _ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil) }

func (w *waiter) closeFDs() {
	if w.epfd >= 0 {
		unix.Close(w.epfd)
	}
	if w.wakeFD >= 0 {
		unix.Close(w.wakeFD)
	}
}

// takeEdges empties the epoll set's ready list. (EINTR leaves it: the
// set stays readable, and the worker comes back.)
func (w *waiter) takeEdges() { _, _ = unix.EpollWait(w.epfd, w.events[:], 0) }

// close stops the polling timer and closes the queue's descriptors; a
// callback that runs meanwhile finds the queue closed.
func (q *rxQueue) close() {
	q.v.mu.Lock()
	q.closed = true
	q.v.mu.Unlock()
	q.poll.Stop()
	q.closeFDs()
}

// FD is the queue's epoll set: readable when the guest kicked the ring,
// the ring changed or a ring without a kick has entries, since Arm.
func (q *rxQueue) FD() int { return q.epfd }

// Arm asks the guest to kick the ring, and reports whether entries are
// pending already. The order matters: the set's edges are taken first
// and the ring read last, so that an entry the guest adds at any point
// either is seen here or comes with a kick. A ring without a watched
// kick descriptor sets the polling timer instead.
func (q *rxQueue) Arm() bool {
	q.takeEdges()
	if !q.v.mu.TryLock() {
		return true // the control plane is changing the ring: look again
	}
	defer q.v.mu.Unlock()
	r := q.v.run
	if r == nil || r.broken {
		return false // the control plane writes wakeFD when it starts
	}
	var n uint16
	if guarded(func() {
		r.setNoNotify(false)
		n, _ = r.pending()
	}) {
		q.breakRing(r, RefusedRingFault)
		return false
	}
	if !q.v.kickWatched {
		q.pollLater(r)
	}
	return n != 0
}

// pollLater starts the polling timer of a running ring without a kick,
// with the ring's lock held: again from pollMin if the ring moved since
// it was last set, else only if it is not set.
func (q *rxQueue) pollLater(r *split) {
	switch {
	case r.lastAvail != q.polledAt || q.pollEvery == 0:
		q.polledAt, q.pollEvery = r.lastAvail, pollMin
	case q.pollSet:
		return
	}
	q.pollSet = true
	q.poll.Reset(q.pollEvery)
}

// Disarm tells the guest not to kick: the worker polls.
func (q *rxQueue) Disarm() {
	if !q.v.mu.TryLock() {
		return // Receive sets it
	}
	defer q.v.mu.Unlock()
	if r := q.v.run; r != nil && !r.broken {
		if guarded(func() { r.setNoNotify(true) }) {
			q.breakRing(r, RefusedRingFault)
		}
	}
}

// pollRing is the polling timer's callback: it wakes the worker if the
// guest published entries on a ring that has no kick (a fault in guest
// memory too: the worker gives the ring up), and else looks again later.
// It stops once the ring runs with a kick, or not at all: Arm sets it
// again.
func (q *rxQueue) pollRing() {
	q.v.mu.Lock()
	defer q.v.mu.Unlock()
	q.pollSet = false
	r := q.v.run
	if q.closed || r == nil || r.broken || q.v.kickWatched {
		return
	}
	var pending bool
	if guarded(func() { pending = r.availIdx() != r.lastAvail }) || pending {
		q.polls.Add(1)
		signalFD(q.wakeFD)
		return
	}
	q.pollEvery = min(2*q.pollEvery, pollMax)
	q.pollSet = true
	q.poll.Reset(q.pollEvery)
}
