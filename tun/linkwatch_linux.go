package tun

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// errGone is what queues of a deleted device report, with port.ErrDown.
var errGone = errors.New("device deleted")

// linkStatus is what the queues know of the device's link, kept current
// by its linkWatch: atomics, read once per burst, so that a device that is
// down costs no system call per packet.
type linkStatus struct {
	down     atomic.Bool  // IFF_UP is clear: writes would fail with EIO
	gone     atomic.Bool  // deleted (or moved out of the namespace)
	maxFrame atomic.Int32 // the largest frame the device gives and takes now
}

// linkWatch follows one device's link through an rtnetlink subscription
// (RTMGRP_LINK) opened in the device's namespace, which it stays bound
// to: up or down, MTU, deletion. Its goroutine only reads the socket and
// stores into the device's linkStatus.
type linkWatch struct {
	dev   *Device
	index int32
	l2    int      // link header bytes a frame adds to the MTU
	f     *os.File // the socket, nonblocking, in the runtime's poller
	log   *slog.Logger
	done  chan struct{}
	// seq numbers the requests for the link's state; until the answer
	// to the latest arrives (waiting), the events queued before it are
	// older than it and are skipped.
	seq     uint32
	waiting bool
}

// newLinkWatch subscribes to link events in the calling thread's
// namespace; it must run there. Events queue up until start.
func newLinkWatch() (*linkWatch, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("link events: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_LINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("link events: subscribe: %w", err)
	}
	return &linkWatch{f: os.NewFile(uintptr(fd), "rtnetlink"), done: make(chan struct{})}, nil
}

// start follows the link of dev, ifindex index. The first thing it does
// is ask for the link's state, which covers any change between Open's
// look at the link and the subscription.
func (w *linkWatch) start(dev *Device, index, l2 int, log *slog.Logger) {
	w.dev, w.index, w.l2, w.log = dev, int32(index), l2, log
	go w.run()
}

// stop ends the goroutine and closes the socket. It is safe on a watch
// that was never started, and on none (nil): a device without a watch
// learns that its link is down from its writes.
func (w *linkWatch) stop() {
	if w == nil {
		return
	}
	w.f.Close()
	if w.dev != nil {
		<-w.done
	}
}

// recvBuf holds a burst of link messages: a message with every attribute
// (statistics, VF info) is a few KiB.
const recvBuf = 64 << 10

func (w *linkWatch) run() {
	defer close(w.done)
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.failed(err)
		return
	}
	buf := make([]byte, recvBuf)
	if err := w.request(rc); err != nil {
		w.failed(err)
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
			return // closed by stop
		case rerr == unix.EINTR:
			continue
		case rerr == unix.ENOBUFS:
			// The socket overflowed and events were lost: ask again.
			if err := w.request(rc); err != nil {
				w.failed(err)
				return
			}
			continue
		case rerr != nil:
			w.failed(rerr)
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
func (w *linkWatch) request(rc syscall.RawConn) error {
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

func (w *linkWatch) handle(m *syscall.NetlinkMessage) {
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
			w.deleted()
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
		w.deleted()
		return
	}
	w.setUp(ifi.Flags&unix.IFF_UP != 0)
	attrs, err := syscall.ParseNetlinkRouteAttr(m)
	if err != nil {
		return
	}
	for _, a := range attrs {
		if a.Attr.Type == unix.IFLA_MTU && len(a.Value) >= 4 {
			w.setMTU(int(binary.NativeEndian.Uint32(a.Value)))
		}
	}
}

func (w *linkWatch) setUp(up bool) {
	if w.dev.link.down.Swap(!up) == !up {
		return
	}
	if up {
		w.log.Info("port link up: forwarding resumes", "port", w.dev.info.Name)
	} else {
		w.log.Warn("port link down: packets toward it are dropped as DEV_READY until it comes up", "port", w.dev.info.Name)
	}
}

// setMTU follows the MTU of a device without a vnet header, whose frames
// are bounded by it; with one, the kernel hands over 64 KiB whatever the
// MTU, and MaxFrame says so from the start.
func (w *linkWatch) setMTU(mtu int) {
	if w.dev.vnet || mtu < 1 {
		return
	}
	frame := int32(mtu + w.l2)
	if old := w.dev.link.maxFrame.Swap(frame); old != frame {
		w.log.Info("port MTU changed", "port", w.dev.info.Name, "mtu", mtu, "max_frame", frame)
	}
}

func (w *linkWatch) deleted() {
	if !w.dev.link.gone.Swap(true) {
		w.log.Warn("port device deleted", "port", w.dev.info.Name)
	}
}

// failed gives up following the link. The queues go back to learning the
// link's state from their writes, one failed write per burst while it is
// down, rather than trust a state that will no longer change.
func (w *linkWatch) failed(err error) {
	w.dev.link.down.Store(false)
	w.log.Error("port link events lost: link state and MTU changes are no longer followed", "port", w.dev.info.Name, "err", err)
}
