package vxlan

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/cacheline"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/tun"
	"softnet.dev/vnet"
)

// maxMsgs bounds the datagrams one sendmmsg sends.
const maxMsgs = 256

// outerLen is what a queue puts before each inner frame: the UDP header
// (the kernel adds the IP header) and the VXLAN header.
const outerLen = udpLen + HeaderLen

// dest is a remote as sendmmsg addresses it, with the part of the UDP
// checksum's pseudo-header that does not change.
type dest struct {
	sa      unix.RawSockaddrInet6 // or a RawSockaddrInet4 in its first bytes
	namelen uint32
	pseudo  uint32 // the addresses and protocol, folded
}

// txQueue sends one queue's frames. Only its worker touches it.
//
// Each frame's outer UDP and VXLAN headers are written into a header
// slot of the queue, not into the buffer's headroom, and each datagram is
// gathered from its slot and the frame by sendmmsg: a frame flooded to
// several remotes is one buffer, shared read-only with the other ports
// it goes to, whose UDP checksum differs per remote.
type txQueue struct {
	_                      [cacheline.Size]byte
	p                      *Port
	fd                     int
	vni                    uint32
	dstPort                uint16
	srcPortMin, srcPortMax uint16
	dests                  []dest
	all                    []int32 // every remote's index: the flood list

	l3    bool         // a routed port: IP packets, each to its route's remote
	layer packet.Layer // of the packets Transmit gets
	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec // two per message: header slot, frame
	// hdrs are the header slots: UDP and VXLAN headers, and a routed
	// port's inner Ethernet header.
	hdrs  [][outerLen + 14]byte
	owner []int32 // by message: its buffer's index in pend
	nmsg  int
	// pend are the buffers of the queued messages, freed after they were
	// sent: consumed if any of their datagrams left, else dropped with
	// the reason of the last that failed. orig is each one's packet in
	// the burst given to Transmit (segments share their packet's).
	pend       []*buffer.Buf
	pendSent   []bool
	pendReason []drop.Reason
	pendOrig   []int32
	// counted is the last packet of the burst counted as sent.
	counted int32
	sent    int
	segs    []*buffer.Buf
	// rx is the receive queue of the same index, polled by the same
	// worker, which hands the ICMP errors this queue makes to guests.
	rx     *rxQueue
	mtu    int // Port.mtu
	errBuf [tooBigRoom]byte
	ctr    counters
	_      [cacheline.Size]byte
}

var _ port.TxQueue = (*txQueue)(nil)

func newTxQueue(p *Port, fd int, rx *rxQueue) *txQueue {
	cfg := p.cfg
	q := &txQueue{
		p: p, fd: fd, vni: cfg.VNI, dstPort: cfg.Port, rx: rx, mtu: p.mtu,
		l3: cfg.L3, layer: p.info.Layer,
		srcPortMin: cfg.SrcPortMin, srcPortMax: cfg.SrcPortMax,
		msgs:  make([]unix.Mmsghdr, maxMsgs),
		iovs:  make([]unix.Iovec, 2*maxMsgs),
		hdrs:  make([][outerLen + 14]byte, maxMsgs),
		owner: make([]int32, maxMsgs),
		// A packet is at least one message: never more buffers than
		// messages.
		pend:       make([]*buffer.Buf, 0, maxMsgs),
		pendSent:   make([]bool, 0, maxMsgs),
		pendReason: make([]drop.Reason, 0, maxMsgs),
		pendOrig:   make([]int32, 0, maxMsgs),
		segs:       make([]*buffer.Buf, vnet.MaxSegments),
		ctr:        newCounters(),
	}
	local := cfg.Local.Addr()
	for i, r := range p.remotes {
		var d dest
		if r.Is4() {
			sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&d.sa))
			sa.Family, sa.Addr = unix.AF_INET, r.As4()
			d.namelen = unix.SizeofSockaddrInet4
		} else {
			d.sa.Family, d.sa.Addr = unix.AF_INET6, r.As16()
			d.namelen = unix.SizeofSockaddrInet6
		}
		d.pseudo = packet.PseudoHeaderChecksum(unix.IPPROTO_UDP, local, r, 0)
		q.dests = append(q.dests, d)
		q.all = append(q.all, int32(i))
	}
	for i := range q.msgs {
		h := &q.msgs[i].Hdr
		h.Iov = &q.iovs[2*i]
		h.SetIovlen(2)
		q.iovs[2*i].Base = &q.hdrs[i][0]
		q.iovs[2*i].SetLen(q.slotLen())
	}
	return q
}

// Transmit encapsulates every frame of bufs and sends the burst with as
// few sendmmsg calls as its datagrams need (one per maxMsgs). A frame
// to a learned station goes to its remote; the others (broadcast,
// multicast, unknown) to every remote. GSO packets from guests are
// segmented and partial checksums finished first, in software: a guest
// behind the far end must never get a frame whose checksum is wrong.
// It returns the frames sent to at least one remote.
func (q *txQueue) Transmit(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	if q.p.closed.Load() {
		for _, b := range bufs {
			q.ctr.txDrop(drop.DevReady)
			c.Drop(b, drop.DevReady)
		}
		q.ctr.publish()
		return 0, q.p.downError("transmit")
	}
	q.sent, q.counted = 0, -1
	now := clock()
	for i, b := range bufs {
		if b.Flags()&tun.FlagVnetHdr != 0 {
			q.queueMarked(c, b, int32(i), now)
			continue
		}
		q.queue(c, b, int32(i), now)
	}
	q.flush(c)
	q.ctr.publish()
	return q.sent, nil
}

// queueMarked queues a packet whose virtio-net header sits right
// before its data: segmented if it is a GSO packet, with its checksum
// finished if it asks for that.
func (q *txQueue) queueMarked(c *buffer.Cache, b *buffer.Buf, orig int32, now int64) {
	head := b.Headroom()
	if head < vnet.HeaderLen {
		q.drop(c, b, drop.DevHdr)
		return
	}
	h, _ := vnet.Decode(b.Frame()[head-vnet.HeaderLen : head])
	switch {
	case h.IsGSO():
		n, reason := vnet.Segment(c, h, b.Bytes(), q.layer, q.segs)
		if n == 0 {
			q.drop(c, b, reason)
			return
		}
		c.Consume(b) // its data lives on in the segments
		q.ctr.N[cSegmented]++
		q.ctr.N[cSegments] += uint64(n)
		for _, s := range q.segs[:n] {
			q.queue(c, s, orig, now)
		}
		clear(q.segs[:n])
	case h.NeedsCsum():
		if b.Refs() > 1 {
			// Its other holders may be reading it: finish a copy.
			cp, reason := copyOf(c, b)
			c.Consume(b)
			if cp == nil {
				q.ctr.txDrop(reason)
				return
			}
			b = cp
		}
		if !vnet.FinishChecksum(h, b.Bytes()) {
			q.drop(c, b, drop.DevHdr)
			return
		}
		q.ctr.N[cCsumFinished]++
		q.queue(c, b, orig, now)
	default:
		q.queue(c, b, orig, now)
	}
}

// copyOf returns a copy of b's data in a buffer of its own, or nil and
// why not.
func copyOf(c *buffer.Cache, b *buffer.Buf) (*buffer.Buf, drop.Reason) {
	class, ok := c.Pool().ClassFor(b.Len())
	if !ok {
		return nil, drop.PktTooBig
	}
	cp, err := c.Get(class)
	if err != nil {
		return nil, drop.NoMem
	}
	d, _ := cp.Append(b.Len())
	copy(d, b.Bytes())
	return cp, drop.NotSpecified
}

func (q *txQueue) drop(c *buffer.Cache, b *buffer.Buf, reason drop.Reason) {
	q.ctr.txDrop(reason)
	c.Drop(b, reason)
}

// slotLen is the length of the queue's header slots.
func (q *txQueue) slotLen() int {
	if q.l3 {
		return outerLen + 14
	}
	return outerLen
}

// queue queues a finished frame's datagrams, one per remote it goes to.
func (q *txQueue) queue(c *buffer.Cache, b *buffer.Buf, orig int32, now int64) {
	if q.l3 {
		q.queueRouted(c, b, orig)
		return
	}
	f := b.Bytes()
	switch {
	case len(f) < minInnerLen:
		q.drop(c, b, drop.PktTooSmall)
		return
	case len(f) > MaxFrame:
		q.drop(c, b, drop.PktTooBig)
		return
	case q.mtu > 0 && len(f) > q.mtu+14 && q.tooBig(c, f):
		q.drop(c, b, drop.PktTooBig)
		return
	}
	var one [1]int32
	to := one[:]
	r, ok := 0, false
	if f[0]&1 == 0 {
		r, ok = q.p.fdb.lookup([6]byte(f[0:6]), now)
	}
	if ok {
		one[0] = int32(r)
	} else {
		to = q.all
		q.ctr.N[cFlooded]++
	}
	pi := q.hold(c, b, orig, len(to))
	// The frame's part of the UDP checksum, summed once for every
	// remote: it starts at an even offset of the datagram (after the 16
	// bytes of outer headers), so it adds in as it is.
	inner := uint32(^packet.Checksum(f, 0))
	sport := sourcePort(flowHash(f), q.srcPortMin, q.srcPortMax)
	for _, r := range to {
		q.message(pi, r, f, sport, inner)
	}
}

// queueRouted queues an IP packet of a routed port to the remote its
// route says, in a frame from the port's VTEP MAC to the remote's.
func (q *txQueue) queueRouted(c *buffer.Cache, b *buffer.Buf, orig int32) {
	pkt := b.Bytes()
	var dst netip.Addr
	et := packet.EtherTypeIPv4
	switch {
	case len(pkt) >= packet.IPv4HeaderLen && pkt[0]>>4 == 4:
		dst = netip.AddrFrom4([4]byte(pkt[16:20]))
	case len(pkt) >= packet.IPv6HeaderLen && pkt[0]>>4 == 6:
		dst, et = netip.AddrFrom16([16]byte(pkt[24:40])), packet.EtherTypeIPv6
	default:
		q.drop(c, b, drop.PktTooSmall)
		return
	}
	if len(pkt) > MaxFrame-14 || q.mtu > 0 && len(pkt) > q.mtu && q.tooBig(c, pkt) {
		q.drop(c, b, drop.PktTooBig)
		return
	}
	rt := q.p.route(dst)
	if rt == nil {
		q.drop(c, b, drop.NoRoute)
		return
	}
	pi := q.hold(c, b, orig, 1)
	i := q.nmsg
	packet.PutEthernet(q.hdrs[i][outerLen:], rt.mac, q.p.cfg.VTEPMAC, et)
	sport := sourcePort(ipFlowHash(fnvBasis, et, pkt), q.srcPortMin, q.srcPortMax)
	q.message(pi, rt.remote, pkt, sport, uint32(^packet.Checksum(pkt, 0)))
}

// hold keeps b among the buffers of the queued messages, after sending
// those queued if n more would not fit, and returns its index.
func (q *txQueue) hold(c *buffer.Cache, b *buffer.Buf, orig int32, n int) int32 {
	if q.nmsg+n > maxMsgs {
		q.flush(c)
	}
	q.pend = append(q.pend, b)
	q.pendSent = append(q.pendSent, false)
	q.pendReason = append(q.pendReason, drop.NotSpecified)
	q.pendOrig = append(q.pendOrig, orig)
	return int32(len(q.pend) - 1)
}

// message queues the datagram of data f (a frame, or a routed port's
// IP packet whose Ethernet header is in the next slot already) to
// remote r; inner is f's part of the UDP checksum.
func (q *txQueue) message(pi, r int32, f []byte, sport uint16, inner uint32) {
	i := q.nmsg
	q.nmsg++
	slot := q.slotLen()
	length := slot + len(f)
	d := &q.dests[r]
	putOuter(q.hdrs[i][:slot], sport, q.dstPort, q.vni, length, d.pseudo+uint32(length)+inner)
	m := &q.msgs[i].Hdr
	m.Name = (*byte)(unsafe.Pointer(&d.sa))
	m.Namelen = d.namelen
	q.iovs[2*i+1].Base = &f[0]
	q.iovs[2*i+1].SetLen(len(f))
	q.owner[i] = pi
}

// tooBig reports whether frame f must be dropped for not fitting the
// overlay, and if so, sends its sender the ICMP error that says so,
// through the receive queue of this worker.
func (q *txQueue) tooBig(c *buffer.Cache, f []byte) bool {
	mustDrop, n := tooBig(q.errBuf[:], f, q.mtu, q.layer)
	if n == 0 {
		return mustDrop
	}
	class, ok := c.Pool().ClassFor(n)
	if !ok {
		return mustDrop
	}
	b, err := c.Get(class)
	if err != nil {
		return mustDrop
	}
	d, _ := b.Append(n)
	copy(d, q.errBuf[:n])
	if !q.rx.deliver(b) {
		c.Consume(b) // not lost: too many errors of this burst wait already
		return mustDrop
	}
	q.ctr.N[cTooBig]++
	return mustDrop
}

// flush sends the queued datagrams and frees their buffers.
func (q *txQueue) flush(c *buffer.Cache) {
	for done := 0; done < q.nmsg; {
		n, err := sendmmsg(q.fd, q.msgs[done:q.nmsg])
		q.ctr.N[cTxCalls]++
		if err == nil && n == 0 {
			err = unix.ENOBUFS // sent nothing, said nothing: do not spin
		}
		if err != nil {
			// The datagram at done failed: count it, go on after it.
			reason := sendReason(err)
			q.ctr.txDrop(reason)
			q.pendReason[q.owner[done]] = reason
			done++
			continue
		}
		for i := done; i < done+n; i++ {
			q.pendSent[q.owner[i]] = true
			q.ctr.N[cTxPackets]++
			q.ctr.N[cTxBytes] += uint64(q.iovs[2*i+1].Len)
		}
		done += n
	}
	for i, b := range q.pend {
		if q.pendSent[i] {
			c.Consume(b)
			if o := q.pendOrig[i]; o != q.counted {
				q.counted = o
				q.sent++
			}
		} else {
			c.Drop(b, q.pendReason[i])
		}
	}
	for i := range q.nmsg {
		q.iovs[2*i+1].Base = nil // the buffers are gone
		q.msgs[i].Hdr.Name = nil
	}
	clear(q.pend)
	q.pend, q.pendSent, q.pendReason, q.pendOrig = q.pend[:0], q.pendSent[:0], q.pendReason[:0], q.pendOrig[:0]
	q.nmsg = 0
}

// sendReason is the drop reason of a datagram the socket refused.
func sendReason(err error) drop.Reason {
	switch err {
	case unix.EAGAIN, unix.ENOBUFS:
		return drop.FullRing
	case unix.EMSGSIZE:
		return drop.PktTooBig
	case unix.ENETUNREACH, unix.EHOSTUNREACH, unix.ENETDOWN:
		return drop.NoRoute
	}
	return drop.NotSpecified
}
