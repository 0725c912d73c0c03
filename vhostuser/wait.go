//go:build linux

package vhostuser

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// An idle worker sleeps on each RX queue's FD, an epoll set of the
// queue's own that holds, all edge-triggered:
//   - wakeFD, which the control plane writes when the ring changes
//     (starts, stops, gets a new kick);
//   - the ring's kick eventfd, while the ring runs: the front-end's, so
//     it is never read (it may block, eventfd.go), and not watched while
//     the ring does not run, so that a guest that kicks a ring that is
//     stopped, disabled or given up costs the worker nothing;
//   - pollFD, a timerfd that Arm sets while a running ring has no kick
//     descriptor (VHOST_USER_VRING_NOFD, polling mode).
//
// Arm takes the edges from the set (epoll_wait with no timeout) before
// it looks at the ring, so the set is readable again only for what comes
// after: with level-triggered kicks that only a read resets, a kick on a
// ring that does not run would leave the set readable for good and the
// worker spinning.

// Polling mode. The virtio and vhost-user specs leave a ring without a
// kick descriptor to the device to poll. A worker busy-polls its rings
// while packets come (the engine's BusyPoll); once it goes to sleep, a
// ring in polling mode wakes it after pollMin, and after twice as long
// each time it finds the ring still empty, up to pollMax: a guest that
// sends now and then waits at most pollMax for its packet to be seen,
// and an idle one costs its worker 1/pollMax wakeups a second.
const (
	pollMin = 100 * time.Microsecond
	pollMax = 4 * time.Millisecond
)

// waiter is an RX queue's sleep: its epoll set and what it watches.
type waiter struct {
	epfd   int
	wakeFD int
	pollFD int
	events [4]unix.EpollEvent // room for all three, so one epoll_wait takes every edge
	// The polling mode's interval, and where the ring stood when it
	// was last set (a ring that moved since goes back to pollMin).
	pollEvery time.Duration
	polledAt  uint16
	timer     unix.ItimerSpec
}

func (w *waiter) open() error {
	w.epfd, w.wakeFD, w.pollFD = -1, -1, -1
	var err error
	if w.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("epoll_create1: %w", err)
	}
	if w.wakeFD, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		w.close()
		return fmt.Errorf("eventfd: %w", err)
	}
	if w.pollFD, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC); err != nil {
		w.close()
		return fmt.Errorf("timerfd_create: %w", err)
	}
	if err := errors.Join(w.watch(w.wakeFD), w.watch(w.pollFD)); err != nil {
		w.close()
		return err
	}
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

func (w *waiter) close() {
	for _, fd := range []int{w.epfd, w.wakeFD, w.pollFD} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// takeEdges empties the epoll set's ready list, and reports whether the
// polling timer was among what it held.
func (w *waiter) takeEdges() (polled bool) {
	n, _ := unix.EpollWait(w.epfd, w.events[:], 0) // EINTR: the set stays readable, and the worker comes back
	for _, ev := range w.events[:max(n, 0)] {
		polled = polled || int(ev.Fd) == w.pollFD
	}
	return polled
}

// pollLater sets the polling timer for a ring whose next available
// entry is next.
func (w *waiter) pollLater(next uint16) {
	if next != w.polledAt || w.pollEvery == 0 {
		w.pollEvery = pollMin
	} else {
		w.pollEvery = min(2*w.pollEvery, pollMax)
	}
	w.polledAt = next
	w.timer.Value = unix.NsecToTimespec(int64(w.pollEvery))
	_ = unix.TimerfdSettime(w.pollFD, 0, &w.timer, nil)
}

// FD is the queue's epoll set: readable when the guest kicked the ring,
// the ring changed or a ring in polling mode is due, since Arm.
func (q *rxQueue) FD() int { return q.epfd }

// Arm asks the guest to kick the ring, and reports whether entries are
// pending already. The order matters: the set's edges are taken first
// and the ring read last, so that an entry the guest adds at any point
// either is seen here or comes with a kick. A ring without a watched
// kick descriptor sets the polling timer instead.
func (q *rxQueue) Arm() bool {
	if q.takeEdges() {
		q.ctr.N[cPolls]++
		q.ctr.Publish()
	}
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
		q.pollLater(r.lastAvail)
	}
	return n != 0
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
