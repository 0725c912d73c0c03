package engine

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// poller is a worker's sleep: an epoll set of its RX queues' descriptors
// plus an eventfd that kicks and Stop write to.
type poller struct {
	epfd, efd int
	events    [16]unix.EpollEvent
	fds       [16]int32      // readyFDs' result
	kick      [1]unix.PollFd // the eventfd alone, for waitKick
}

func newPoller() (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	p := &poller{epfd: epfd, efd: efd}
	p.kick[0] = unix.PollFd{Fd: int32(efd), Events: unix.POLLIN}
	if err := p.add(efd); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// add makes fd's readability end wait.
func (p *poller) add(fd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl add fd %d: %w", fd, err)
	}
	return nil
}

// wait blocks until a descriptor is readable or the eventfd is written,
// and returns the queues' descriptors that are readable.
func (p *poller) wait() ([]int32, error) {
	for {
		n, err := unix.EpollWait(p.epfd, p.events[:], -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("epoll_wait: %w", err)
		}
		var buf [8]byte
		_, _ = unix.Read(p.efd, buf[:]) // reset; EAGAIN if the wakeup was a queue
		return p.readyFDs(n), nil
	}
}

// ready returns the queues' descriptors that are readable now, without
// waiting. A kick found on the way is reset: the worker is awake.
func (p *poller) ready() []int32 {
	n, err := unix.EpollWait(p.epfd, p.events[:], 0)
	if err != nil {
		return nil // EINTR: the next round looks again
	}
	return p.readyFDs(n)
}

// readyFDs gathers the descriptors of the first n events, less the
// eventfd, into fds.
func (p *poller) readyFDs(n int) []int32 {
	fds := p.fds[:0]
	for _, ev := range p.events[:n] {
		if int(ev.Fd) == p.efd {
			var buf [8]byte
			_, _ = unix.Read(p.efd, buf[:])
			continue
		}
		fds = append(fds, ev.Fd)
	}
	return fds
}

// waitKick blocks until the eventfd is written or the timeout passes,
// ignoring the queues.
func (p *poller) waitKick(timeout time.Duration) error {
	ts := unix.NsecToTimespec(timeout.Nanoseconds())
	if _, err := unix.Ppoll(p.kick[:], &ts, nil); err != nil && !errors.Is(err, unix.EINTR) {
		return fmt.Errorf("ppoll: %w", err)
	}
	var buf [8]byte
	_, _ = unix.Read(p.efd, buf[:]) // reset; EAGAIN after a timeout
	return nil
}

// wake makes wait return; safe from any goroutine.
func (p *poller) wake() {
	one := [8]byte{1}
	_, _ = unix.Write(p.efd, one[:])
}

func (p *poller) remove(fd int) {
	_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
}

func (p *poller) close() {
	if p.epfd < 0 {
		return
	}
	unix.Close(p.efd)
	unix.Close(p.epfd)
	p.efd, p.epfd = -1, -1
}

func setAffinity(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}
