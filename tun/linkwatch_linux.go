package tun

import (
	"errors"
	"log/slog"
	"sync/atomic"
)

// errGone is what queues of a deleted device report, with port.ErrDown.
var errGone = errors.New("device deleted")

// linkStatus is what the queues know of the device's link, kept current
// by its link watch (internal/linkwatch): atomics, read once per burst,
// so that a device that is down costs no system call per packet.
type linkStatus struct {
	down     atomic.Bool  // IFF_UP is clear: writes would fail with EIO
	gone     atomic.Bool  // deleted (or moved out of the namespace)
	maxFrame atomic.Int32 // the largest frame the device gives and takes now
}

// linkEvents stores a device's link events into its linkStatus, on the
// watch's goroutine.
type linkEvents struct {
	dev *Device
	l2  int // link header bytes a frame adds to the MTU
	log *slog.Logger
}

func (e *linkEvents) Up(up bool) {
	if e.dev.link.down.Swap(!up) == !up {
		return
	}
	if up {
		e.log.Info("port link up: forwarding resumes", "port", e.dev.info.Name)
	} else {
		e.log.Warn("port link down: packets toward it are dropped as DEV_READY until it comes up", "port", e.dev.info.Name)
	}
}

// MTU follows the MTU of a device without a vnet header, whose frames
// are bounded by it; with one, the kernel hands over 64 KiB whatever the
// MTU, and MaxFrame says so from the start.
func (e *linkEvents) MTU(mtu int) {
	if e.dev.vnet || mtu < 1 {
		return
	}
	frame := int32(mtu + e.l2)
	if old := e.dev.link.maxFrame.Swap(frame); old != frame {
		e.log.Info("port MTU changed", "port", e.dev.info.Name, "mtu", mtu, "max_frame", frame)
	}
}

func (e *linkEvents) Deleted() {
	if !e.dev.link.gone.Swap(true) {
		e.log.Warn("port device deleted", "port", e.dev.info.Name)
	}
}

// Lost gives up following the link. The queues go back to learning the
// link's state from their writes, one failed write per burst while it is
// down, rather than trust a state that will no longer change.
func (e *linkEvents) Lost(err error) {
	e.dev.link.down.Store(false)
	e.log.Error("port link events lost: link state and MTU changes are no longer followed", "port", e.dev.info.Name, "err", err)
}
