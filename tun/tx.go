//go:build linux

package tun

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/cacheline"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/vnet"
)

// Segment scratch space: enough for any USO packet (the kernel's
// UDP_MAX_SEGMENTS) and TSO at common MSS values, preallocated; a packet
// with more segments grows it once, up to maxSegments.
const (
	initSegments = 128
	maxSegments  = 1024
)

// txQueue writes to one queue's file. Only its worker touches it.
type txQueue struct {
	_        [cacheline.Size]byte
	dev      *Device
	fd       int
	layer    packet.Layer
	vnet     bool
	offloads port.Offloads
	hdr      hdrMode // of packets without a header of their own
	maxFrame int
	zero     [vnet.HeaderLen]byte // the header of packets that need nothing
	iov      [2]unix.Iovec        // zero header + data, for writev
	segs     []*buffer.Buf
	ctr      counters
	_        [cacheline.Size]byte
}

var _ port.TxQueue = (*txQueue)(nil)

func (q *txQueue) init(d *Device, fd int) {
	q.dev, q.fd, q.layer, q.vnet = d, fd, d.info.Layer, d.vnet
	q.offloads, q.maxFrame = d.info.Offloads, d.info.MaxFrame
	q.hdr = hdrNone
	if d.vnet {
		q.hdr = hdrZero
	}
	q.iov[0].Base = &q.zero[0]
	q.iov[0].SetLen(len(q.zero))
	q.segs = make([]*buffer.Buf, initSegments)
	q.ctr = newCounters()
}

// Transmit writes every packet of bufs and frees it into c, or drops it
// with a reason. If the device is gone it drops the rest of the burst
// with drop.DevReady and returns an error matching port.ErrDown.
func (q *txQueue) Transmit(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	sent := 0
	var err error
	if q.dev.closed.Load() {
		err = errClosed
	}
	for _, b := range bufs {
		if err != nil {
			q.ctr.txDrop(drop.DevReady)
			c.Drop(b, drop.DevReady)
			continue
		}
		var ok bool
		ok, err = q.send(c, b)
		if ok {
			sent++
		}
	}
	q.ctr.publish()
	if err != nil {
		return sent, fmt.Errorf("tun %s: write: %w: %w", q.dev.info.Name, port.ErrDown, err)
	}
	return sent, nil
}

// send transmits one packet and frees it. It reports whether it was sent,
// and returns an error only if the device is gone.
func (q *txQueue) send(c *buffer.Cache, b *buffer.Buf) (bool, error) {
	if b.Mark()&MarkVnet != 0 {
		return q.sendMarked(c, b)
	}
	return q.done(c, b, q.write(b.Bytes(), q.hdr))
}

// sendMarked transmits a packet whose vnet header sits right before its
// data: whole if this device takes the offloads it asks for, else
// segmented or checksummed here.
func (q *txQueue) sendMarked(c *buffer.Cache, b *buffer.Buf) (bool, error) {
	head := b.Headroom()
	if head < vnet.HeaderLen {
		return q.done(c, b, failed(drop.DevHdr))
	}
	frame := b.Frame()
	h, _ := vnet.Decode(frame[head-vnet.HeaderLen : head])
	if need := q.needs(h, b.Bytes()); q.vnet && q.offloads&need == need {
		// Zero copy: the header and the data are contiguous already.
		res := q.write(frame[head-vnet.HeaderLen:head+b.Len()], hdrInline)
		if res.ok() && h.IsGSO() {
			q.ctr.n[cGSOOut]++
		}
		return q.done(c, b, res)
	}
	switch {
	case h.IsGSO():
		return q.segment(c, b, h)
	case h.NeedsCsum():
		return q.finishChecksum(c, b, h)
	}
	// A header that asks for nothing: the packet is an ordinary one.
	return q.done(c, b, q.write(b.Bytes(), q.hdr))
}

// unsupported stands for an offload no device has (UFO): a packet that
// needs it never passes whole.
const unsupported = ^port.Offloads(0)

// needs returns the offloads a device must accept to take the packet
// whole.
func (q *txQueue) needs(h vnet.Header, pkt []byte) port.Offloads {
	var o port.Offloads
	if h.NeedsCsum() {
		o |= port.OffloadCsum
	}
	switch h.GSOType &^ vnet.GSOECN {
	case vnet.GSONone:
		return o
	case vnet.GSOTCPv4:
		o |= port.OffloadTSO4
	case vnet.GSOTCPv6:
		o |= port.OffloadTSO6
	case vnet.GSOUDPL4:
		if ipVersion(pkt, q.layer) == 6 {
			o |= port.OffloadUSO6
		} else {
			o |= port.OffloadUSO4
		}
	default:
		return unsupported
	}
	if h.GSOType&vnet.GSOECN != 0 {
		o |= port.OffloadTSOECN
	}
	return o
}

// ipVersion returns the IP version of a packet starting at layer, or 0.
func ipVersion(pkt []byte, layer packet.Layer) int {
	if layer == packet.L3 {
		if len(pkt) == 0 {
			return 0
		}
		return int(pkt[0] >> 4)
	}
	off := 12
	for range 2 { // at most one 802.1Q tag, as packet.Parse
		if len(pkt) < off+2 {
			return 0
		}
		switch uint16(pkt[off])<<8 | uint16(pkt[off+1]) {
		case packet.EtherTypeIPv4:
			return 4
		case packet.EtherTypeIPv6:
			return 6
		case packet.EtherTypeVLAN:
			off += packet.VLANTagLen
			continue
		}
		return 0
	}
	return 0
}

// segment splits a GSO packet in software and writes the segments. The
// packet counts as sent only if every segment was written.
func (q *txQueue) segment(c *buffer.Cache, b *buffer.Buf, h vnet.Header) (bool, error) {
	pkt := b.Bytes()
	n := vnet.SegmentCount(h, pkt, q.layer)
	if n < 1 || n > maxSegments {
		return q.done(c, b, failed(drop.GsoSeg))
	}
	if n > len(q.segs) {
		q.segs = make([]*buffer.Buf, n)
	}
	segs := q.segs[:n]
	got, reason := vnet.Segment(c, h, pkt, q.layer, segs)
	if got == 0 {
		return q.done(c, b, failed(reason))
	}
	q.ctr.n[cSegmented]++
	res := result{}
	for i, s := range segs[:got] {
		if res.ok() {
			if res = q.write(s.Bytes(), q.hdr); res.ok() {
				q.ctr.n[cSegments]++
			}
		}
		// The segments are this queue's own copies: they are freed as
		// consumed whatever happened, and a loss is counted once, on the
		// packet they came from.
		c.Consume(s)
		segs[i] = nil
	}
	return q.done(c, b, res)
}

// finishChecksum completes the checksum of a packet that left it to the
// device, then writes it. A shared buffer is copied first: its other
// holders may be reading it.
func (q *txQueue) finishChecksum(c *buffer.Cache, b *buffer.Buf, h vnet.Header) (bool, error) {
	pkt := b.Bytes()
	var cp *buffer.Buf
	if b.Refs() > 1 {
		class, ok := c.Pool().ClassFor(len(pkt))
		if !ok {
			return q.done(c, b, failed(drop.PktTooBig))
		}
		var err error
		if cp, err = c.Get(class); err != nil {
			return q.done(c, b, failed(drop.NoMem))
		}
		cp.SetData(cp.Headroom(), len(pkt))
		copy(cp.Bytes(), pkt)
		pkt = cp.Bytes()
	}
	res := failed(drop.DevHdr) // offsets outside the packet
	if vnet.FinishChecksum(h, pkt) {
		q.ctr.n[cCsumFinished]++
		res = q.write(pkt, q.hdr)
	}
	if cp != nil {
		c.Consume(cp)
	}
	return q.done(c, b, res)
}

// result is the outcome of a write: the zero value is success.
type result struct {
	reason drop.Reason
	failed bool
	down   unix.Errno // set if the device is gone or down
}

func (r result) ok() bool { return !r.failed }

func failed(r drop.Reason) result { return result{reason: r, failed: true} }

// done frees b as sent or dropped, as res says, and returns Transmit's
// view: sent, and an error if the device is down.
func (q *txQueue) done(c *buffer.Cache, b *buffer.Buf, res result) (bool, error) {
	if res.ok() {
		c.Consume(b)
		return true, nil
	}
	q.ctr.txDrop(res.reason)
	c.Drop(b, res.reason)
	if res.down != 0 {
		return false, res.down
	}
	return false, nil
}

// What precedes the data in a write.
type hdrMode uint8

const (
	hdrNone   hdrMode = iota // nothing: the device has no vnet header
	hdrZero                  // a zero vnet header, from the queue
	hdrInline                // the data starts with its own vnet header
)

// write writes one packet in one system call.
func (q *txQueue) write(p []byte, mode hdrMode) result {
	n := len(p)
	if mode == hdrInline {
		n -= vnet.HeaderLen
	}
	switch {
	case n > q.maxFrame:
		return failed(drop.PktTooBig)
	case n <= 0:
		return failed(drop.PktTooSmall)
	}
	for {
		var errno unix.Errno
		if mode == hdrZero {
			q.iov[1].Base = &p[0]
			q.iov[1].SetLen(len(p))
			_, _, errno = unix.Syscall(unix.SYS_WRITEV, uintptr(q.fd), uintptr(unsafe.Pointer(&q.iov[0])), uintptr(len(q.iov)))
			q.iov[1].Base = nil
		} else {
			_, _, errno = unix.Syscall(unix.SYS_WRITE, uintptr(q.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		}
		switch errno {
		case 0:
			q.ctr.n[cTxPackets]++
			q.ctr.n[cTxBytes] += uint64(n)
			return result{}
		case unix.EINTR:
			continue
		case unix.EAGAIN, unix.ENOBUFS:
			return failed(drop.FullRing)
		case unix.EIO, unix.EBADFD, unix.ENODEV, unix.ENXIO, unix.EBADF:
			// EIO: the device is down; EBADFD: it was deleted.
			return result{reason: drop.DevReady, failed: true, down: errno}
		case unix.EINVAL:
			// The kernel refused the vnet header, or a frame too short.
			return failed(drop.DevHdr)
		case unix.EMSGSIZE:
			return failed(drop.PktTooBig)
		default:
			return failed(drop.NotSpecified)
		}
	}
}
