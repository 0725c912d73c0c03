// Package linkwatch follows one network device's link through an
// rtnetlink subscription: up or down, MTU, deletion. Ports that depend on
// a device they do not own (a TUN device, the interface an AF_XDP socket
// is bound to) learn of its changes from it without a system call on
// their hot path.
package linkwatch

import (
	"encoding/binary"
	"fmt"
	"os"
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

// Watch is an rtnetlink subscription (RTMGRP_LINK) opened in a device's
// namespace, which it stays bound to. Its goroutine only reads the
// socket and calls the handler.
type Watch struct {
	index int32
	h     Handler
	f     *os.File // the socket, nonblocking, in the runtime's poller
	done  chan struct{}
	// seq numbers the requests for the link's state; until the answer
	// to the latest arrives (waiting), the events queued before it are
	// older than it and are skipped.
	seq     uint32
	waiting bool
}

// New subscribes to link events in the calling thread's namespace; it
// must run there. Subscribing before the device is looked at means no
// change between the look and the subscription is missed: events queue
// up until Start.
func New() (*Watch, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("link events: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_LINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("link events: subscribe: %w", err)
	}
	return &Watch{f: os.NewFile(uintptr(fd), "rtnetlink"), done: make(chan struct{})}, nil
}

// Start follows the link with ifindex index. The first thing it does is
// ask for the link's state, which covers any change between the caller's
// look at the link and the subscription.
func (w *Watch) Start(index int, h Handler) {
	w.index, w.h = int32(index), h
	go w.run()
}

// Stop ends the goroutine and closes the socket. It is safe on a watch
// that was never started, and on none (nil).
func (w *Watch) Stop() {
	if w == nil {
		return
	}
	w.f.Close()
	if w.h != nil {
		<-w.done
	}
}

// recvBuf holds a burst of link messages: a message with every attribute
// (statistics, VF info) is a few KiB.
const recvBuf = 64 << 10

func (w *Watch) run() {
	defer close(w.done)
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.h.Lost(err)
		return
	}
	buf := make([]byte, recvBuf)
	if err := w.request(rc); err != nil {
		w.h.Lost(err)
		return
	}
	for {
		var n int
		var from unix.Sockaddr
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
			return rerr != unix.EAGAIN
		})
		switch {
		case err != nil:
			return // closed by Stop
		case rerr == unix.EINTR:
			continue
		case rerr == unix.ENOBUFS:
			// The socket overflowed and events were lost: ask again.
			if err := w.request(rc); err != nil {
				w.h.Lost(err)
				return
			}
			continue
		case rerr != nil:
			w.h.Lost(rerr)
			return
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue // not from the kernel
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue // a malformed datagram; later ones still count
		}
		for i := range msgs {
			w.handle(&msgs[i])
		}
	}
}

// request asks for the link's current state; the answer arrives as an
// RTM_NEWLINK, or as an error if the link no longer exists.
func (w *Watch) request(rc syscall.RawConn) error {
	w.seq++
	w.waiting = true
	var req [unix.SizeofNlMsghdr + unix.SizeofIfInfomsg]byte
	hdr := (*unix.NlMsghdr)(unsafe.Pointer(&req[0]))
	*hdr = unix.NlMsghdr{Len: uint32(len(req)), Type: unix.RTM_GETLINK, Flags: unix.NLM_F_REQUEST, Seq: w.seq}
	ifi := (*unix.IfInfomsg)(unsafe.Pointer(&req[unix.SizeofNlMsghdr]))
	*ifi = unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: w.index}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.Sendto(int(fd), req[:], 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("ask for link state: %w", serr)
	}
	return nil
}

func (w *Watch) handle(m *syscall.NetlinkMessage) {
	if w.waiting {
		if m.Header.Seq != w.seq {
			return
		}
		w.waiting = false
	}
	switch m.Header.Type {
	case unix.RTM_NEWLINK, unix.RTM_DELLINK:
	case unix.NLMSG_ERROR:
		// Only our request can be answered with an error.
		if len(m.Data) >= 4 && -int32(binary.NativeEndian.Uint32(m.Data)) == int32(unix.ENODEV) {
			w.h.Deleted()
		}
		return
	default:
		return
	}
	if len(m.Data) < unix.SizeofIfInfomsg {
		return
	}
	ifi := (*unix.IfInfomsg)(unsafe.Pointer(&m.Data[0]))
	if ifi.Index != w.index {
		return
	}
	if m.Header.Type == unix.RTM_DELLINK {
		w.h.Deleted()
		return
	}
	w.h.Up(ifi.Flags&unix.IFF_UP != 0)
	attrs, err := syscall.ParseNetlinkRouteAttr(m)
	if err != nil {
		return
	}
	for _, a := range attrs {
		if a.Attr.Type == unix.IFLA_MTU && len(a.Value) >= 4 {
			w.h.MTU(int(binary.NativeEndian.Uint32(a.Value)))
		}
	}
}
