// Package linkwatch follows one network device's link through an
// rtnetlink subscription: up or down, MTU, deletion. Ports that depend on
// a device they do not own (a TUN device, the interface an AF_XDP socket
// is bound to) learn of its changes from it without a system call on
// their hot path. The watches of one namespace share its subscription.
package linkwatch

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Handler hears of the link's changes, on the watch's goroutine. Its
// methods must not block.
type Handler interface {
	// Up reports the link's IFF_UP flag, at start and on every change
	// message (repeats included).
	Up(up bool)
	// MTU reports the link's MTU with every change message.
	MTU(mtu int)
	// Deleted reports that the device is gone (or moved out of the
	// namespace).
	Deleted()
	// Lost reports that the subscription failed: no more events come.
	Lost(err error)
}

// Watch follows one link through the rtnetlink subscription
// (RTMGRP_LINK) of the namespace it was made in. Every watch of a
// namespace shares one subscription, one socket and one goroutine,
// which only reads the socket and calls the handlers: a switch with a
// hundred ports on one namespace's veths has one, not a hundred.
type Watch struct {
	s     *sub
	index int32
	h     Handler
	// seq numbers the watch's latest request for its link's state; until
	// the answer arrives (waiting), the events about the link queued
	// before it are older than it and are skipped.
	seq     uint32
	waiting bool
}

// sub is a namespace's subscription, shared by its watches.
type sub struct {
	ns   nsID
	f    *os.File // the socket, nonblocking, in the runtime's poller
	rc   syscall.RawConn
	done chan struct{}

	// mu guards what follows; the handlers run under it, so that a watch
	// that Stop took off hears nothing more.
	mu      sync.Mutex
	watches map[int32][]*Watch
	refs    int // watches made by New and not stopped
	seq     uint32
	lost    error // the subscription failed: its watches heard Lost
}

// nsID identifies a network namespace: its file's device and inode.
type nsID struct{ dev, ino uint64 }

// subs are the subscriptions, one per namespace that has watches.
var subs = struct {
	sync.Mutex
	m map[nsID]*sub
}{m: map[nsID]*sub{}}

// New returns a watch on the calling thread's namespace; it must run
// there. It joins the namespace's subscription, or opens it. Start asks
// for the link's state, so no change between the caller's look at the
// link and Start is missed.
func New() (*Watch, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return nil, fmt.Errorf("link events: the thread's namespace: %w", err)
	}
	ns := nsID{uint64(st.Dev), st.Ino}
	subs.Lock()
	defer subs.Unlock()
	s := subs.m[ns]
	if s == nil {
		var err error
		if s, err = subscribe(ns); err != nil {
			return nil, err
		}
		subs.m[ns] = s
	}
	s.mu.Lock()
	s.refs++
	s.mu.Unlock()
	return &Watch{s: s}, nil
}

// subscribe opens the namespace's subscription and its goroutine.
func subscribe(ns nsID) (*sub, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("link events: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_LINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("link events: subscribe: %w", err)
	}
	s := &sub{ns: ns, f: os.NewFile(uintptr(fd), "rtnetlink"), done: make(chan struct{}), watches: map[int32][]*Watch{}}
	if s.rc, err = s.f.SyscallConn(); err != nil {
		s.f.Close()
		return nil, fmt.Errorf("link events: %w", err)
	}
	go s.run()
	return s, nil
}

// Subscriptions returns how many namespaces' subscriptions are open.
func Subscriptions() int {
	subs.Lock()
	defer subs.Unlock()
	return len(subs.m)
}

// Start follows the link with ifindex index. The first thing it does is
// ask for the link's state, which covers any change between the caller's
// look at the link and now.
func (w *Watch) Start(index int, h Handler) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	w.index, w.h = int32(index), h
	if s.lost != nil {
		h.Lost(s.lost)
		return
	}
	s.watches[w.index] = append(s.watches[w.index], w)
	if err := s.request(w); err != nil {
		h.Lost(err)
	}
}

// Stop takes the watch off its subscription, which it closes if it was
// the last; no handler of the watch runs once it returns. It is safe on
// a watch that was never started, on one stopped, and on none (nil).
func (w *Watch) Stop() {
	if w == nil || w.s == nil {
		return
	}
	s := w.s
	w.s = nil
	subs.Lock()
	s.mu.Lock()
	ws := s.watches[w.index]
	if i := slices.Index(ws, w); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
		if len(ws) == 0 {
			delete(s.watches, w.index)
		} else {
			s.watches[w.index] = ws
		}
	}
	s.refs--
	last := s.refs == 0
	if last && subs.m[s.ns] == s {
		delete(subs.m, s.ns)
	}
	s.mu.Unlock()
	subs.Unlock()
	if last {
		s.f.Close()
		<-s.done
	}
}

// recvBuf holds a burst of link messages: a message with every attribute
// (statistics, VF info) is a few KiB.
const recvBuf = 64 << 10

func (s *sub) run() {
	defer close(s.done)
	buf := make([]byte, recvBuf)
	for {
		var n int
		var from unix.Sockaddr
		var rerr error
		err := s.rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
			return rerr != unix.EAGAIN
		})
		switch {
		case err != nil:
			return // closed by the last Stop
		case rerr == unix.EINTR:
			continue
		case rerr == unix.ENOBUFS:
			// The socket overflowed and events were lost: every watch
			// asks again.
			s.mu.Lock()
			for _, ws := range s.watches {
				for _, w := range ws {
					if err := s.request(w); err != nil && s.lost == nil {
						s.fail(err)
					}
				}
			}
			s.mu.Unlock()
			if s.lost != nil {
				return
			}
			continue
		case rerr != nil:
			s.mu.Lock()
			s.fail(rerr)
			s.mu.Unlock()
		}
		if s.lost != nil {
			return
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue // not from the kernel
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue // a malformed datagram; later ones still count
		}
		s.mu.Lock()
		for i := range msgs {
			s.handle(&msgs[i])
		}
		s.mu.Unlock()
	}
}

// fail tells every watch the subscription is lost, and leaves the
// namespace to a new one; s.mu is held.
func (s *sub) fail(err error) {
	if s.lost != nil {
		return
	}
	s.lost = err
	for _, ws := range s.watches {
		for _, w := range ws {
			w.h.Lost(err)
		}
	}
	// New, which holds subs first, must not wait for s.mu here.
	go func() {
		subs.Lock()
		if subs.m[s.ns] == s {
			delete(subs.m, s.ns)
		}
		subs.Unlock()
	}()
}

// request asks for w's link's current state; the answer arrives as an
// RTM_NEWLINK, or as an error if the link no longer exists. s.mu is held.
func (s *sub) request(w *Watch) error {
	s.seq++
	if s.seq == 0 {
		s.seq++ // 0 is the kernel's events'
	}
	w.seq, w.waiting = s.seq, true
	var req [unix.SizeofNlMsghdr + unix.SizeofIfInfomsg]byte
	hdr := (*unix.NlMsghdr)(unsafe.Pointer(&req[0]))
	*hdr = unix.NlMsghdr{Len: uint32(len(req)), Type: unix.RTM_GETLINK, Flags: unix.NLM_F_REQUEST, Seq: w.seq}
	ifi := (*unix.IfInfomsg)(unsafe.Pointer(&req[unix.SizeofNlMsghdr]))
	*ifi = unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: w.index}
	var serr error
	if err := s.rc.Control(func(fd uintptr) {
		serr = unix.Sendto(int(fd), req[:], 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("ask for link state: %w", serr)
	}
	return nil
}

// handle gives a message to the watches of its link; s.mu is held.
func (s *sub) handle(m *syscall.NetlinkMessage) {
	switch m.Header.Type {
	case unix.RTM_NEWLINK, unix.RTM_DELLINK:
	case unix.NLMSG_ERROR:
		// Only a request is answered with an error: the watch that made
		// it learns its link is gone.
		for _, ws := range s.watches {
			for _, w := range ws {
				if w.waiting && w.seq == m.Header.Seq {
					w.waiting = false
					if len(m.Data) >= 4 && -int32(binary.NativeEndian.Uint32(m.Data)) == int32(unix.ENODEV) {
						w.h.Deleted()
					}
				}
			}
		}
		return
	default:
		return
	}
	if len(m.Data) < unix.SizeofIfInfomsg {
		return
	}
	ifi := (*unix.IfInfomsg)(unsafe.Pointer(&m.Data[0]))
	ws := s.watches[ifi.Index]
	if len(ws) == 0 {
		return
	}
	var attrs []syscall.NetlinkRouteAttr
	if m.Header.Type == unix.RTM_NEWLINK {
		attrs, _ = syscall.ParseNetlinkRouteAttr(m)
	}
	for _, w := range ws {
		if w.waiting {
			if m.Header.Seq != w.seq {
				continue
			}
			w.waiting = false
		}
		if m.Header.Type == unix.RTM_DELLINK {
			w.h.Deleted()
			continue
		}
		w.h.Up(ifi.Flags&unix.IFF_UP != 0)
		for _, a := range attrs {
			if a.Attr.Type == unix.IFLA_MTU && len(a.Value) >= 4 {
				w.h.MTU(int(binary.NativeEndian.Uint32(a.Value)))
			}
		}
	}
}
