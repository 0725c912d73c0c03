package vxlan

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/cacheline"
	"softnet.dev/packet"
	"softnet.dev/port"
)

// maxBurst bounds the datagrams one recvmmsg takes: each may be a run
// of up to 64 that UDP_GRO coalesced, and needs room for 64 KiB.
const maxBurst = 32

// minRoom is what a receive buffer must hold: an Ethernet frame of a
// 1500-byte MTU with a VLAN tag, and the VXLAN header before it.
const minRoom = 1500 + 18 + HeaderLen

// spillRoom is the room for one received datagram, the longest UDP
// payload (over IPv6) rounded up: what the buffers do not hold spills
// into its message's part of the queue's spill area, at the offset it
// has in the message.
const spillRoom = 1 << 16

// Receiving in place: when the last burst brought runs that UDP_GRO
// coalesced, of datagrams of at least minInPlace bytes that fit a
// buffer, each message of the next gathers into as many buffers as a
// run of that size needs to fill spillRoom, each given exactly the
// size: a run of the same size lands one datagram per buffer, ready to
// hand over, with no copy. recvBufs bounds the buffers one recvmmsg
// takes in all (a cache's worth); maxGROSegments is the kernel's bound
// on a run (UDP_GRO_CNT_MAX), and so on the buffers of a message.
const (
	minInPlace     = 1024
	recvBufs       = 128
	maxGROSegments = spillRoom / minInPlace
	iovStride      = maxGROSegments + 1 // a message's iovecs: buffers, spill
)

// groCmsgLen is the room of a UDP_GRO control message: a cmsghdr and the
// segment size (an int).
var groCmsgLen = unix.CmsgSpace(4)

// rxQueue receives one queue's datagrams. Only its worker touches it.
//
// Each message of a recvmmsg gathers into buffers of the burst's bulk
// get, each datagram's inner frame where a fresh buffer's data starts,
// and the message's part of the spill area for what they do not hold.
// Normally a message has one buffer, where a datagram that fits lands
// ready to hand over. A datagram that UDP_GRO coalesced from a run of
// one flow's datagrams (the control message gives their size) is split
// again: after a burst with such runs, the messages of the next have a
// buffer per datagram of the runs' size (see minInPlace), where a run of
// that size lands split already; datagrams that landed otherwise are
// copied into buffers of their own. The inner frames of a run, a TCP flow's
// segments, reach the egress port one after another in the burst, so
// that a TAP or TUN port with GRO coalesces them once more for its
// guest.
type rxQueue struct {
	_   [cacheline.Size]byte
	p   *Port
	fd  int
	vni uint32
	// peers are the port's as the queue took them last (sync): the
	// remotes a datagram's source is looked up in.
	peers *peers
	// The class Receive takes buffers of, for the pool it was computed
	// for (a queue is polled through one worker's cache).
	pool  *buffer.Pool
	class buffer.Class
	room  int // of its buffers, from the VXLAN header on
	// bufs are the buffers of the last recvmmsg, perMsg for each message
	// (message i's from i*perMsg), each given inPlace bytes (0: all its
	// room); nil once handed over or freed. runSize is the size of the
	// runs of the messages split since, for the next (0: none to land in
	// place).
	bufs            []*buffer.Buf
	perMsg, inPlace int
	runSize         int
	msgs            []unix.Mmsghdr
	iovs            []unix.Iovec            // iovStride per message
	names           []unix.RawSockaddrInet6 // large enough for either family
	ctl             []byte                  // groCmsgLen per message
	spill           []byte                  // spillRoom per message
	// The messages of the last recvmmsg not split yet (a burst may end
	// in the middle of a coalesced datagram): nrecv received, next the
	// one being split, seg its next datagram, cur what it is.
	nrecv, next, seg int
	cur              split
	learn            pending
	// pending are ICMP errors the queue's transmit side made for guests
	// whose packets were too big, handed over first by the next Receive
	// on the same worker; notify has the worker poll the queue for them.
	pending []*buffer.Buf
	notify  func()
	ctr     counters
	_       [cacheline.Size]byte
}

// split is a received message, as its datagrams are split off.
type split struct {
	remote int
	length int // of the message
	size   int // of each datagram but the last (the message's length if one)
	count  int // datagrams
}

var (
	_ port.RxQueue  = (*rxQueue)(nil)
	_ port.Notifier = (*rxQueue)(nil)
)

func newRxQueue(p *Port, fd int) *rxQueue {
	q := &rxQueue{
		p: p, fd: fd, vni: p.cfg.VNI,
		bufs:    make([]*buffer.Buf, max(recvBufs, maxBurst)),
		msgs:    make([]unix.Mmsghdr, maxBurst),
		iovs:    make([]unix.Iovec, iovStride*maxBurst),
		names:   make([]unix.RawSockaddrInet6, maxBurst),
		ctl:     make([]byte, maxBurst*groCmsgLen),
		spill:   make([]byte, maxBurst*spillRoom),
		perMsg:  1,
		pending: make([]*buffer.Buf, 0, maxPendingErrors),
		ctr:     newCounters(),
	}
	q.sync()
	for i := range q.msgs {
		h := &q.msgs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&q.names[i]))
		h.Iov = &q.iovs[i*iovStride]
		h.Control = &q.ctl[i*groCmsgLen]
	}
	return q
}

// sync takes the port's peers as they are now, between two bursts: the
// messages received and not split yet name remotes of the last set.
func (q *rxQueue) sync() { q.peers = q.p.peers.Load() }

// syncPool picks the smallest class whose buffers hold minRoom, or the
// largest.
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
	q.room = p.Room(q.class) + HeaderLen
	q.runSize = 0
}

// maxPendingErrors bounds the ICMP errors waiting for the next Receive:
// more in one burst would only repeat themselves.
const maxPendingErrors = 16

// Receive hands over the ICMP errors waiting, then the inner frames of
// the datagrams received and not handed over yet, if any, else takes
// buffers for a burst in one bulk get, receives up to as many messages
// with one recvmmsg, and hands over the inner frames of the datagrams
// that are valid, learning their source MACs. Unused buffers go back to
// the cache.
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
	if len(bufs) == 0 {
		return 0, nil
	}
	now := clock()
	if q.next >= q.nrecv {
		q.sync()
		if err := q.recv(c, min(len(bufs), maxBurst)); err != nil {
			return 0, err
		}
	}
	out := q.splitAll(c, bufs, now)
	q.peers.fdb.commit(&q.learn, now)
	q.ctr.Publish()
	return out, nil
}

// recv receives up to n messages into buffers of one bulk get and the
// spill area, and starts splitting them.
func (q *rxQueue) recv(c *buffer.Cache, n int) error {
	q.nrecv, q.next, q.seg = 0, 0, 0
	perMsg, inPlace := 1, 0
	if size := q.runSize; size > 0 {
		perMsg, inPlace = (spillRoom+size-1)/size, size
		n = min(n, recvBufs/perMsg)
	}
	got := q.bufs[:n*perMsg]
	if c.GetBulk(got, q.class) != nil {
		// Too few for the burst: one message at a time, or none.
		b, err := c.Get(q.class)
		if err != nil {
			// The datagrams stay in the socket, which drops for us if it
			// overflows meanwhile.
			q.ctr.RxDrop(drop.NoMem)
			q.ctr.Publish()
			return nil
		}
		n, perMsg, inPlace = 1, 1, 0
		got = q.bufs[:1]
		got[0] = b
	}
	q.perMsg, q.inPlace = perMsg, inPlace
	for i := range n {
		iov := q.iovs[i*iovStride:][:perMsg+1]
		at := 0 // where the next iovec starts in the message
		for t, b := range got[i*perMsg:][:perMsg] {
			// The VXLAN header goes into the end of the headroom, so that
			// the inner frame starts where a fresh buffer's data does.
			off := b.Headroom() - HeaderLen
			frame := b.Frame()
			room := len(frame) - off
			if inPlace > 0 {
				room = inPlace
			}
			iov[t].Base = &frame[off]
			iov[t].SetLen(room)
			at += room
		}
		h := &q.msgs[i].Hdr
		if at < spillRoom {
			iov[perMsg].Base = &q.spill[i*spillRoom+at]
			iov[perMsg].SetLen(spillRoom - at)
			h.SetIovlen(perMsg + 1)
		} else {
			h.SetIovlen(perMsg)
		}
		h.Namelen = unix.SizeofSockaddrInet6
		h.SetControllen(groCmsgLen)
		h.Flags = 0
	}
	m, err := recvmmsg(q.fd, q.msgs[:n])
	q.ctr.N[cRxCalls]++
	if err != nil {
		c.ConsumeBulk(got) // unused, not lost packets
		clear(got)
		if err == unix.EAGAIN {
			return nil
		}
		q.ctr.Publish()
		return fmt.Errorf("vxlan %s: recvmmsg: %w: %w", q.p.cfg.Name, port.ErrDown, err)
	}
	if m < n {
		c.ConsumeBulk(got[m*perMsg:])
		clear(got[m*perMsg:])
	}
	// The runs of these messages set the size for the next burst
	// (start). A receive that found nothing keeps the last one: a worker
	// polls its queue again right after a burst, before the next run
	// comes, and forgetting the size there had each run land spread over
	// plain buffers, every datagram copied out.
	q.runSize = 0
	q.nrecv = m
	return nil
}

// splitAll hands over into bufs the inner frames of the messages
// received and not split yet, until they or bufs run out, and returns
// how many it handed over.
func (q *rxQueue) splitAll(c *buffer.Cache, bufs []*buffer.Buf, now int64) int {
	out := 0
	for q.next < q.nrecv && out < len(bufs) {
		i := q.next
		if q.seg == 0 && !q.start(c, i) {
			q.next++
			continue
		}
		for q.seg < q.cur.count && out < len(bufs) {
			b, reason := q.datagram(c, i, q.seg)
			q.seg++
			if b != nil {
				var ok bool
				if ok, reason = q.accept(b, now); ok {
					bufs[out] = b
					out++
					q.ctr.N[cRxPackets]++
					q.ctr.N[cRxBytes] += uint64(b.Len())
					continue
				}
				c.Drop(b, reason)
			}
			q.ctr.RxDrop(reason)
		}
		if q.seg == q.cur.count {
			q.freeMessage(c, i, drop.NotSpecified) // what was in them was copied out
			q.next, q.seg = i+1, 0
		}
	}
	return out
}

// start looks at message i before its datagrams are split off: it
// drops a message that was cut short or is not from a remote, counting
// each datagram in it, and reports false; else it notes in cur how the
// message splits and reports true.
func (q *rxQueue) start(c *buffer.Cache, i int) bool {
	msg := &q.msgs[i]
	length := int(msg.Len)
	size, count := splitting(q.ctl[i*groCmsgLen:][:min(int(msg.Hdr.Controllen), groCmsgLen)], length)
	var reason drop.Reason
	switch {
	case msg.Hdr.Flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		// Longer than buffer and spill together: the kernel cut it, and
		// how it splits is lost with its end (or with its control
		// message, which has room for UDP_GRO's only).
		count, reason = 1, drop.PktTooBig
	case length == 0:
		count, reason = 1, drop.HdrTrunc
	default:
		if remote := q.remote(&q.names[i], msg.Hdr.Namelen); remote >= 0 {
			q.cur = split{remote: remote, length: length, size: size, count: count}
			if count > 1 {
				q.ctr.N[cRxGROBatches]++
				if size >= minInPlace && size <= q.room {
					q.runSize = size
				}
			}
			return true
		}
		reason = drop.IPRPFilter
	}
	for range count {
		q.ctr.RxDrop(reason)
	}
	q.freeMessage(c, i, reason)
	return false
}

// freeMessage frees the buffers of message i not handed over: the
// first dropped with reason, if there is one, the others consumed (a
// message is one drop, however many buffers it was given).
func (q *rxQueue) freeMessage(c *buffer.Cache, i int, reason drop.Reason) {
	for t, b := range q.bufs[i*q.perMsg:][:q.perMsg] {
		if b == nil {
			continue
		}
		if reason != drop.NotSpecified {
			c.Drop(b, reason)
			reason = drop.NotSpecified
		} else {
			c.Consume(b)
		}
		q.bufs[i*q.perMsg+t] = nil
	}
}

// datagram returns datagram j of message i in a buffer of its own, the
// VXLAN header at the end of its headroom, or nil and why not. A
// datagram that is all its buffer's iovec holds, from its start, is
// handed over where it landed: a message's only datagram, or one of a
// run of the size the buffers were given. The others are copied, from
// wherever they landed (buffers that share pieces of two datagrams stay
// with the queue until the message is split).
func (q *rxQueue) datagram(c *buffer.Cache, i, j int) (*buffer.Buf, drop.Reason) {
	from, to := segment(q.cur.length, q.cur.size, j)
	inPlace := j == 0 && q.cur.count == 1 || q.inPlace > 0 && q.cur.size == q.inPlace && j < q.perMsg
	if iov := &q.iovs[i*iovStride+j]; inPlace && to-from <= int(iov.Len) {
		b := q.bufs[i*q.perMsg+j]
		q.bufs[i*q.perMsg+j] = nil
		q.setLen(b, to-from)
		return b, drop.NotSpecified
	}
	if to-from < HeaderLen+minInnerLen {
		return nil, drop.HdrTrunc
	}
	class, ok := c.Pool().ClassFor(to - from - HeaderLen)
	if !ok {
		return nil, drop.PktTooBig
	}
	b, err := c.Get(class)
	if err != nil {
		return nil, drop.NoMem
	}
	q.ctr.N[cRxCopied]++
	q.gather(i, from, to, b.Frame()[b.Headroom()-HeaderLen:])
	q.setLen(b, to-from)
	return b, drop.NotSpecified
}

// gather copies bytes [from, to) of message i, from the iovecs it was
// received into, to dst.
func (q *rxQueue) gather(i, from, to int, dst []byte) {
	at := 0 // where the iovec starts in the message
	for _, iov := range q.iovs[i*iovStride:][:q.msgs[i].Hdr.Iovlen] {
		n := int(iov.Len)
		if lo, hi := max(from, at), min(to, at+n); lo < hi {
			copy(dst[lo-from:], unsafe.Slice(iov.Base, n)[lo-at:hi-at])
		}
		if at += n; at >= to {
			return
		}
	}
}

// setLen sets a fresh buffer's data window to the n bytes of a datagram
// received or copied to the end of its headroom: the VXLAN header and
// the inner frame. accept moves its start past the headers.
func (q *rxQueue) setLen(b *buffer.Buf, n int) {
	b.SetData(b.Headroom()-HeaderLen, n)
}

// segment returns where datagram j of a coalesced one of length bytes,
// split into datagrams of size bytes (the last may be shorter), starts
// and ends.
func segment(length, size, j int) (from, to int) {
	from = j * size
	return from, min(from+size, length)
}

// splitting returns how a message of length bytes received with the
// control data ctl splits: into count datagrams of size bytes, the last
// possibly shorter (none if length is 0).
func splitting(ctl []byte, length int) (size, count int) {
	size = groSize(ctl)
	if size <= 0 || size >= length {
		size = max(length, 1)
	}
	return size, (length + size - 1) / size
}

// groSize returns the segment size of the UDP_GRO control message in
// ctl, the control data of a message received, or 0 if it has none. It
// copies each cmsghdr out rather than point into ctl, which may be any
// byte slice, aligned or not.
func groSize(ctl []byte) int {
	hdr := unix.CmsgLen(0)
	for len(ctl) >= hdr {
		var h unix.Cmsghdr
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&h)), unsafe.Sizeof(h)), ctl)
		n := int(min(uint64(h.Len), uint64(len(ctl)+1)))
		if n < hdr || n > len(ctl) {
			return 0
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && n >= unix.CmsgLen(4) {
			return int(int32(binary.NativeEndian.Uint32(ctl[hdr:])))
		}
		next := unix.CmsgSpace(n - hdr)
		if next >= len(ctl) {
			return 0
		}
		ctl = ctl[next:]
	}
	return 0
}

// accept validates a datagram in b, whose data window holds it from its
// VXLAN header on, and sets b's data window to its inner frame.
func (q *rxQueue) accept(b *buffer.Buf, now int64) (bool, drop.Reason) {
	off := b.Headroom()
	length := b.Len()
	frame := b.Frame()
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
		q.peers.fdb.see(&q.learn, [6]byte(inner[6:12]), q.cur.remote, now)
	}
	return true, drop.NotSpecified
}

// purge frees the buffers of messages received and not split yet, on
// Close.
func (q *rxQueue) purge(c *buffer.Cache) {
	for i := q.next; i < q.nrecv; i++ {
		if c != nil {
			q.freeMessage(c, i, drop.QueuePurge)
		}
		clear(q.bufs[i*q.perMsg:][:q.perMsg])
	}
	q.nrecv, q.next, q.seg = 0, 0, 0
}

// remote returns the index in the port's remotes of a datagram's
// source, or -1.
func (q *rxQueue) remote(sa *unix.RawSockaddrInet6, namelen uint32) int {
	var a netip.Addr
	switch {
	case sa.Family == unix.AF_INET && namelen >= unix.SizeofSockaddrInet4:
		a = netip.AddrFrom4((*unix.RawSockaddrInet4)(unsafe.Pointer(sa)).Addr)
	case sa.Family == unix.AF_INET6 && namelen >= unix.SizeofSockaddrInet6:
		a = netip.AddrFrom16(sa.Addr)
	default:
		return -1
	}
	return q.peers.index(a)
}

// FD returns the socket: level-triggered readable while datagrams wait.
func (q *rxQueue) FD() int { return q.fd }

// Arm reports whether datagrams received wait to be handed over; those
// still in the socket wake the worker at once, as epoll on it is
// level-triggered.
func (q *rxQueue) Arm() bool { return q.next < q.nrecv }

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
