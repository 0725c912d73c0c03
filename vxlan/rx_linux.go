package vxlan

import (
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/cacheline"
	"softnet.dev/packet"
	"softnet.dev/port"
)

// maxBurst bounds the datagrams one Receive takes.
const maxBurst = 256

// minRoom is what a receive buffer must hold: an Ethernet frame of a
// 1500-byte MTU with a VLAN tag, and the VXLAN header before it.
const minRoom = 1500 + 18 + HeaderLen

// rxQueue receives one queue's datagrams. Only its worker touches it.
type rxQueue struct {
	_   [cacheline.Size]byte
	p   *Port
	fd  int
	vni uint32
	// The remotes' addresses as the socket reports sources: 4 bytes each
	// over IPv4, 16 over IPv6.
	remotes4 [][4]byte
	remotes6 [][16]byte
	// The class Receive takes buffers of, for the pool it was computed
	// for (a queue is polled through one worker's cache).
	pool  *buffer.Pool
	class buffer.Class
	// large is the class that holds a whole GSO datagram, taken instead
	// of class for largeHold after a datagram did not fit (hasLarge: the
	// pool has one).
	large      buffer.Class
	hasLarge   bool
	largeUntil int64
	bufs       []*buffer.Buf
	msgs       []unix.Mmsghdr
	iovs       []unix.Iovec
	names      []unix.RawSockaddrInet6 // large enough for either family
	learn      pending
	// pending are ICMP errors the queue's transmit side made for guests
	// whose packets were too big, handed over first by the next Receive
	// on the same worker; notify has the worker poll the queue for them.
	pending []*buffer.Buf
	notify  func()
	ctr     counters
	_       [cacheline.Size]byte
}

var (
	_ port.RxQueue  = (*rxQueue)(nil)
	_ port.Notifier = (*rxQueue)(nil)
)

func newRxQueue(p *Port, fd int) *rxQueue {
	q := &rxQueue{
		p: p, fd: fd, vni: p.cfg.VNI,
		bufs:    make([]*buffer.Buf, maxBurst),
		msgs:    make([]unix.Mmsghdr, maxBurst),
		iovs:    make([]unix.Iovec, maxBurst),
		names:   make([]unix.RawSockaddrInet6, maxBurst),
		pending: make([]*buffer.Buf, 0, maxPendingErrors),
		ctr:     newCounters(),
	}
	for _, r := range p.remotes {
		if r.Is4() {
			q.remotes4 = append(q.remotes4, r.As4())
		} else {
			q.remotes6 = append(q.remotes6, r.As16())
		}
	}
	for i := range q.msgs {
		h := &q.msgs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&q.names[i]))
		h.Iov = &q.iovs[i]
		h.SetIovlen(1)
	}
	return q
}

// syncPool picks the smallest class whose buffers hold minRoom, or the
// largest: a datagram longer than a buffer is dropped as PKT_TOO_BIG.
func (q *rxQueue) syncPool(c *buffer.Cache) {
	p := c.Pool()
	if p == q.pool {
		return
	}
	q.pool = p
	if cl, ok := p.ClassFor(minRoom); ok {
		q.class = cl
	} else {
		q.class = buffer.Class(p.NumClasses() - 1)
	}
	q.large, q.hasLarge = p.ClassFor(maxDatagram)
	q.hasLarge = q.hasLarge && q.large != q.class
}

// maxDatagram is the longest UDP payload over IPv4.
const maxDatagram = 65535 - 20 - udpLen

// largeHold is how long a queue takes large buffers after a datagram
// did not fit: a peer that sends GSO datagrams sends many.
const largeHold = int64(10 * time.Second)

// maxPendingErrors bounds the ICMP errors waiting for the next Receive:
// more in one burst would only repeat themselves.
const maxPendingErrors = 16

// Receive hands over the ICMP errors waiting, then takes buffers for a
// burst in one bulk get, receives up to as many datagrams with one
// recvmmsg, and hands over the inner frames of those that are valid,
// learning their source MACs. Unused buffers go back to the cache.
func (q *rxQueue) Receive(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	if q.p.closed.Load() {
		return 0, q.p.downError("receive")
	}
	k := copy(bufs, q.pending)
	if k > 0 {
		rest := copy(q.pending, q.pending[k:])
		clear(q.pending[rest:])
		q.pending = q.pending[:rest]
	}
	n, err := q.receive(c, bufs[k:])
	return k + n, err
}

// receive is Receive's part that reads the socket.
func (q *rxQueue) receive(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	q.syncPool(c)
	n := min(len(bufs), maxBurst)
	if n == 0 {
		return 0, nil
	}
	now := clock()
	class := q.class
	if q.hasLarge && now < q.largeUntil {
		class = q.large
	}
	got := q.bufs[:n]
	if c.GetBulk(got, class) != nil {
		// Too few for the burst: one datagram at a time, or none.
		b, err := c.Get(class)
		if err != nil {
			// The datagrams stay in the socket, which drops for us if it
			// overflows meanwhile.
			q.ctr.rxDrop(drop.NoMem)
			q.ctr.publish()
			return 0, nil
		}
		got = q.bufs[:1]
		got[0] = b
	}
	for i, b := range got {
		// The VXLAN header goes into the end of the headroom, so that the
		// inner frame starts where a fresh buffer's data does.
		off := b.Headroom() - HeaderLen
		frame := b.Frame()
		q.iovs[i].Base = &frame[off]
		q.iovs[i].SetLen(len(frame) - off)
		q.msgs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		q.msgs[i].Hdr.Flags = 0
	}
	m, err := recvmmsg(q.fd, q.msgs[:len(got)])
	q.ctr.N[cRxCalls]++
	if err != nil {
		c.ConsumeBulk(got) // unused, not lost packets
		clear(got)
		q.ctr.publish()
		if err == unix.EAGAIN {
			return 0, nil
		}
		return 0, fmt.Errorf("vxlan %s: recvmmsg: %w: %w", q.p.cfg.Name, port.ErrDown, err)
	}
	out := 0
	for i, b := range got[:m] {
		ok, reason := q.accept(b, i, now)
		if !ok {
			q.ctr.rxDrop(reason)
			c.Drop(b, reason)
			continue
		}
		bufs[out] = b
		out++
		q.ctr.N[cRxPackets]++
		q.ctr.N[cRxBytes] += uint64(b.Len())
	}
	if m < len(got) {
		c.ConsumeBulk(got[m:])
	}
	clear(got)
	q.p.fdb.commit(&q.learn, now)
	q.ctr.publish()
	return out, nil
}

// accept validates datagram i, received into b, and sets b's data window
// to its inner frame.
func (q *rxQueue) accept(b *buffer.Buf, i int, now int64) (bool, drop.Reason) {
	msg := &q.msgs[i]
	if msg.Hdr.Flags&unix.MSG_TRUNC != 0 {
		// Likely a GSO datagram from a peer's offload over a veth: this
		// one is lost, those that follow will fit.
		if q.hasLarge {
			q.largeUntil = now + largeHold
		}
		return false, drop.PktTooBig
	}
	remote := q.remote(&q.names[i], msg.Hdr.Namelen)
	if remote < 0 {
		return false, drop.IPRPFilter
	}
	off := b.Headroom() - HeaderLen
	length := int(msg.Len)
	frame := b.Frame()
	if length > len(frame)-off {
		return false, drop.PktTooBig
	}
	inner, ok, reason := Decode(frame[off:off+length], q.vni)
	if !ok {
		return false, reason
	}
	start := off + HeaderLen
	if q.p.cfg.L3 {
		// A routed port hands over the IP packet of a frame to its VTEP.
		switch et := binary.BigEndian.Uint16(inner[12:14]); {
		case [6]byte(inner[0:6]) != q.p.cfg.VTEPMAC:
			return false, drop.OtherHost
		case et != packet.EtherTypeIPv4 && et != packet.EtherTypeIPv6:
			return false, drop.UnhandledProto
		}
		start += 14
	}
	if !b.SetData(start, off+length-start) {
		return false, drop.PktTooBig
	}
	switch {
	case b.Len() > maxPlain && markGSO(b, q.p.info.Layer):
		q.ctr.N[cRxGSO]++
	case finishPartial(inner):
		q.ctr.N[cRxCsumFinished]++
	}
	if !q.p.cfg.L3 {
		q.p.fdb.see(&q.learn, [6]byte(inner[6:12]), remote, now)
	}
	return true, drop.NotSpecified
}

// remote returns the index in the port's remotes of a datagram's
// source, or -1.
func (q *rxQueue) remote(sa *unix.RawSockaddrInet6, namelen uint32) int {
	switch {
	case sa.Family == unix.AF_INET && namelen >= unix.SizeofSockaddrInet4:
		a := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa)).Addr
		for i, r := range q.remotes4 {
			if r == a {
				return i
			}
		}
	case sa.Family == unix.AF_INET6 && namelen >= unix.SizeofSockaddrInet6:
		for i, r := range q.remotes6 {
			if r == sa.Addr {
				return i
			}
		}
	}
	return -1
}

// FD returns the socket: level-triggered readable while datagrams wait.
func (q *rxQueue) FD() int { return q.fd }

// Arm reports no pending datagrams: epoll on the socket is
// level-triggered, so one already queued wakes the worker at once.
func (q *rxQueue) Arm() bool { return false }

// Disarm does nothing: there is nothing to arm.
func (q *rxQueue) Disarm() {}

// SetNotify is port.Notifier, so that the worker polls the queue only
// while its socket is readable or it found datagrams, or when the
// queue's transmit side left it an ICMP error to hand over.
func (q *rxQueue) SetNotify(notify func()) { q.notify = notify }

// deliver queues an ICMP error the transmit side made, for the next
// Receive, or reports false if too many wait already.
func (q *rxQueue) deliver(b *buffer.Buf) bool {
	if len(q.pending) == cap(q.pending) {
		return false
	}
	q.pending = append(q.pending, b)
	if q.notify != nil {
		q.notify()
	}
	return true
}
