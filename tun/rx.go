//go:build linux

package tun

import (
	"fmt"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/cacheline"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/vnet"
)

// maxBurst bounds the buffers a queue takes ahead of reading.
const maxBurst = 256

// rxQueue reads one queue's file. Only its worker touches it.
type rxQueue struct {
	_     [cacheline.Size]byte
	dev   *Device
	fd    int
	layer packet.Layer
	vnet  bool
	// The class Receive takes buffers of, for the pool it was computed
	// for: a queue is polled through one worker's cache, whose pool does
	// not change, but checking costs one compare.
	pool     *buffer.Pool
	maxFrame int32 // the device's max frame the class was picked for
	class    buffer.Class
	bulk     bool
	spare    []*buffer.Buf // the burst's buffers, unless Config.Knobs.SingleGets
	// starved says the last Receive stopped for want of a buffer, for
	// Queue.Receive, which must not wait for a file that is readable.
	starved bool
	// uring says the queue reads through io_uring: as a member (m) of
	// its worker's ring once attached, or of a ring of its own.
	uring   bool
	m       *rxMember
	ringErr error  // why the queue could not join a ring
	notify  func() // port.Notifier
	ctr     counters
	_       [cacheline.Size]byte
}

var _ port.RxQueue = (*rxQueue)(nil)

func (q *rxQueue) init(d *Device, fd int) {
	q.dev, q.fd, q.layer, q.vnet = d, fd, d.info.Layer, d.vnet
	q.bulk = d.bulk
	if q.bulk {
		q.spare = cacheline.Make[*buffer.Buf](0, maxBurst)
	}
	q.ctr = newCounters()
}

// setPool picks the smallest class that holds the largest packet the
// device can hand over now (the header goes into the headroom). If no
// class does, the largest is used and longer packets are dropped as
// PktTooBig.
func (q *rxQueue) setPool(p *buffer.Pool, maxFrame int32) {
	q.pool, q.maxFrame = p, maxFrame
	if c, ok := p.ClassFor(int(maxFrame)); ok {
		q.class = c
	} else {
		q.class = buffer.Class(p.NumClasses() - 1)
	}
}

// Receive reads up to len(bufs) packets, without blocking.
func (q *rxQueue) Receive(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	switch {
	case q.dev.closed.Load():
		return 0, q.downError(errClosed)
	case q.dev.link.gone.Load():
		return 0, q.downError(errGone)
	}
	// A link that is down is read all the same: nothing arrives, and a
	// file that epoll reports readable must be read or the worker spins.
	q.syncPool(c)
	if q.uring {
		return q.receiveUring(c, bufs)
	}
	n := 0
	var err error
	q.starved = false
	spare := q.spare[:0] // taken in bulk, not used yet
	for n < len(bufs) {
		var b *buffer.Buf
		if k := len(spare); k > 0 {
			b, spare = spare[k-1], spare[:k-1]
		} else {
			var gerr error
			if b, gerr = c.Get(q.class); gerr != nil {
				// The packet stays queued in the kernel, which drops for
				// us if its queue overflows meanwhile.
				q.ctr.RxDrop(drop.NoMem)
				q.starved = true
				break
			}
		}
		// With a vnet header, read it into the end of the headroom, so
		// that it lands right before the data and can stay there.
		off := b.Headroom()
		if q.vnet {
			off -= vnet.HeaderLen
		}
		dst := b.Frame()[off:]
		m, rerr := unix.Read(q.fd, dst)
		if rerr != nil {
			c.Consume(b) // unused, not a lost packet
			if rerr == unix.EINTR {
				continue
			}
			if rerr != unix.EAGAIN {
				err = q.downError(rerr)
			}
			break
		}
		if ok, reason := q.accept(b, off, m, len(dst)); !ok {
			q.ctr.RxDrop(reason)
			c.Drop(b, reason)
			continue
		}
		bufs[n] = b
		n++
		q.ctr.N[cRxPackets]++
		q.ctr.N[cRxBytes] += uint64(b.Len())
		// TUN cannot tell how many packets wait; once one was there,
		// take buffers for the rest of the burst in one bulk get.
		if k := min(len(bufs), maxBurst) - 1; q.bulk && n == 1 && k > 0 && c.GetBulk(q.spare[:k], q.class) == nil {
			spare = q.spare[:k]
		}
	}
	if len(spare) > 0 {
		c.ConsumeBulk(spare) // unused, not lost packets
	}
	q.ctr.Publish()
	return n, err
}

// accept sets b's data window to the m bytes read at off, of room
// bytes, and validates and marks a packet with a vnet header.
func (q *rxQueue) accept(b *buffer.Buf, off, m, room int) (bool, drop.Reason) {
	h, ok, reason := checkRead(b.Frame()[off:off+min(m, room)], m, room, q.vnet, q.layer)
	if !ok {
		return false, reason
	}
	hl := 0
	if q.vnet {
		hl = vnet.HeaderLen
	}
	if !b.SetData(off+hl, m-hl) {
		return false, drop.DevHdr
	}
	if h.IsGSO() || h.NeedsCsum() {
		b.SetFlags(FlagVnetHdr)
		if h.IsGSO() {
			q.ctr.N[cGSOIn]++
		}
	}
	return true, drop.NotSpecified
}

// checkRead validates what a read returned: m bytes, into a buffer of
// room bytes whose first min(m, room) are p, starting with the vnet
// header if the device has one. It returns the header (zero without
// one).
func checkRead(p []byte, m, room int, vnetHdr bool, layer packet.Layer) (vnet.Header, bool, drop.Reason) {
	switch {
	case m > room:
		// The kernel copies what fits and reports the whole length.
		return vnet.Header{}, false, drop.PktTooBig
	case !vnetHdr && m == 0:
		return vnet.Header{}, false, drop.PktTooSmall
	case !vnetHdr:
		return vnet.Header{}, true, drop.NotSpecified
	case m < vnet.HeaderLen:
		return vnet.Header{}, false, drop.DevHdr
	case m == vnet.HeaderLen:
		return vnet.Header{}, false, drop.PktTooSmall
	}
	h, _ := vnet.Decode(p)
	if ok, reason := vnet.Check(h, p[vnet.HeaderLen:], layer); !ok {
		return h, false, reason
	}
	return h, true, drop.NotSpecified
}

func (q *rxQueue) downError(err error) error {
	return fmt.Errorf("tun %s: read: %w: %w", q.dev.info.Name, port.ErrDown, err)
}

// FD returns the queue's file: level-triggered readable while packets
// wait; on the io_uring path, the eventfd its ring signals, which the
// ring's other queues share, or -1 before the queue is on a ring.
func (q *rxQueue) FD() int {
	switch {
	case !q.uring:
		return q.fd
	case q.m != nil:
		return q.m.ring.efd
	}
	return -1
}

// Arm reports no pending packets on the system-call path: epoll on the
// file is level-triggered, so a packet that is already queued wakes the
// worker at once.
func (q *rxQueue) Arm() bool {
	if q.uring {
		return q.armUring()
	}
	return false
}

// Disarm does nothing: there is nothing to arm.
func (q *rxQueue) Disarm() {}
