package vxlan

import (
	"encoding/binary"
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

// maxMsgs bounds the datagrams one flush sends.
const maxMsgs = 256

// outerLen is what a queue puts before each inner frame: the VXLAN
// header (the kernel adds the UDP and IP headers).
const outerLen = HeaderLen

// Bounds of one UDP_SEGMENT send: the kernel's GRO takes at most 64
// segments (UDP_GRO_CNT_MAX), and the datagram before segmentation must
// fit one IP packet's length field with its UDP and IP headers (40
// bytes for IPv6's, which leaves room for IPv4's 20).
const (
	maxGSOSegments = 64
	maxGSOPayload  = 65535 - udpLen - 40
)

// splitRoom is the room for the headers of one segment of a guest's GSO
// packet (vnet.Split) in a header slot, after the VXLAN header and a
// routed port's Ethernet header: an Ethernet header with a VLAN tag, and
// IPv4 and TCP headers with the longest options, or IPv6 with up to 80
// bytes of extension headers. A packet with longer headers is segmented
// into buffers of its own instead (vnet.Resolve).
const splitRoom = 18 + 60 + 60

// slotRoom is the room of a header slot.
const slotRoom = outerLen + 14 + splitRoom

// gsoCmsgLen is the room of a UDP_SEGMENT control message: a cmsghdr and
// the segment size (a uint16), aligned.
var gsoCmsgLen = unix.CmsgSpace(2)

// txQueue sends one queue's frames. Only its worker touches it.
//
// Each frame's VXLAN header (and a routed port's inner Ethernet header)
// is written into a header slot of the queue, not into the buffer's
// headroom, and each datagram is gathered from its slot and the frame by
// the kernel without a copy: a frame flooded to several remotes is one
// buffer, shared read-only with the other ports it goes to.
//
// A flush sends the queued datagrams through the sending socket of each
// one's flow (its source port), one sendmmsg per socket in use, in the
// order they were queued: a flow's datagrams stay in order. Consecutive
// datagrams of one socket to one remote whose lengths are equal (the
// last may be shorter) are one entry of that sendmmsg, with UDP_SEGMENT:
// the segments software GSO made of a guest's TSO packet, or a burst of
// one flow's equal packets, cost the kernel one datagram's way through
// its stack.
type txQueue struct {
	_       [cacheline.Size]byte
	p       *Port
	vni     uint32
	senders []sender
	// peers are the port's as the queue took them last (sync), with
	// their remotes as sendmmsg addresses them.
	peers *peers
	dests []dest
	all   []int32 // every remote's index: the flood list

	l3    bool         // a routed port: IP packets, each to its route's remote
	layer packet.Layer // of the packets Transmit gets
	// gso: datagrams may be sent with UDP_SEGMENT, which the kernel
	// takes and has not refused on this queue.
	gso bool
	// The queued datagrams, by index: header slot and frame (iovs, two
	// each; a segment of a GSO packet has its headers in the slot and
	// its payload, a piece of the packet's buffer, as its frame),
	// remote, and whether it fits the underlay's MTU whole, as a
	// segment of a UDP_SEGMENT send must; bySock lists them by sending
	// socket, in order (next).
	iovs   []unix.Iovec
	hdrs   [][slotRoom]byte
	dest   []int32
	fits   []bool
	owner  []int32 // by message: its buffer's index in pend
	nmsg   int
	bySock [maxSenders]sockList
	// The entries of one socket's sendmmsg: each one datagram or a
	// UDP_SEGMENT run, whose datagrams are order[entFirst[e]:][:entN[e]].
	out      []unix.Mmsghdr
	outIovs  []unix.Iovec
	ctl      []byte // gsoCmsgLen per entry
	order    []int32
	entFirst []int32
	entN     []int32
	next     []int32 // by message: the next of its socket, or -1
	single   [1]unix.Mmsghdr
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
	// The headers and payloads of the segments of the GSO packet being
	// queued (splitGSO).
	splitHdrs [][]byte
	splitPay  [][]byte
	// rx is the receive queue of the same index, polled by the same
	// worker, which hands the ICMP errors this queue makes to guests.
	rx     *rxQueue
	mtu    int // peers.mtu
	errBuf [tooBigRoom]byte
	ctr    counters
	_      [cacheline.Size]byte
}

// dest is a remote as sendmmsg addresses it.
type dest struct {
	sa      unix.RawSockaddrInet6 // or a RawSockaddrInet4 in its first bytes
	namelen uint32
}

// sockList is the first and last queued message of a sending socket.
type sockList struct{ first, last int32 }

var _ port.TxQueue = (*txQueue)(nil)

func newTxQueue(p *Port, rx *rxQueue) *txQueue {
	cfg := p.cfg
	q := &txQueue{
		p: p, vni: cfg.VNI, senders: p.senders, rx: rx,
		l3: cfg.L3, layer: p.info.Layer, gso: p.gso,
		iovs:     make([]unix.Iovec, 2*maxMsgs),
		hdrs:     make([][slotRoom]byte, maxMsgs),
		dest:     make([]int32, maxMsgs),
		fits:     make([]bool, maxMsgs),
		owner:    make([]int32, maxMsgs),
		out:      make([]unix.Mmsghdr, maxMsgs),
		outIovs:  make([]unix.Iovec, 2*maxMsgs),
		ctl:      make([]byte, maxMsgs*gsoCmsgLen),
		order:    make([]int32, 0, maxMsgs),
		entFirst: make([]int32, maxMsgs),
		entN:     make([]int32, maxMsgs),
		next:     make([]int32, maxMsgs),
		// A packet is at least one message: never more buffers than
		// messages.
		pend:       make([]*buffer.Buf, 0, maxMsgs),
		pendSent:   make([]bool, 0, maxMsgs),
		pendReason: make([]drop.Reason, 0, maxMsgs),
		pendOrig:   make([]int32, 0, maxMsgs),
		segs:       make([]*buffer.Buf, vnet.MaxSegments),
		splitHdrs:  make([][]byte, vnet.MaxSegments),
		splitPay:   make([][]byte, vnet.MaxSegments),
		ctr:        newCounters(),
	}
	splitArea := make([]byte, vnet.MaxSegments*splitRoom)
	for i := range q.splitHdrs {
		q.splitHdrs[i] = splitArea[i*splitRoom:][:splitRoom:splitRoom]
	}
	for i := range q.bySock {
		q.bySock[i] = sockList{-1, -1}
	}
	q.sync()
	for i := range maxMsgs {
		PutHeader(q.hdrs[i][:HeaderLen], q.vni) // the same for every datagram
		q.iovs[2*i].Base = &q.hdrs[i][0]
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&q.ctl[i*gsoCmsgLen]))
		cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		cm.SetLen(unix.CmsgLen(2))
	}
	return q
}

// sync takes the port's peers if they changed, between two bursts.
func (q *txQueue) sync() {
	pe := q.p.peers.Load()
	if pe == q.peers {
		return
	}
	q.peers, q.mtu = pe, pe.mtu
	q.dests, q.all = q.dests[:0], q.all[:0]
	for i, r := range pe.remotes {
		var d dest
		if r.Is4() {
			sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&d.sa))
			sa.Family, sa.Addr, sa.Port = unix.AF_INET, r.As4(), htons(q.p.cfg.Port)
			d.namelen = unix.SizeofSockaddrInet4
		} else {
			d.sa.Family, d.sa.Addr, d.sa.Port = unix.AF_INET6, r.As16(), htons(q.p.cfg.Port)
			d.namelen = unix.SizeofSockaddrInet6
		}
		q.dests = append(q.dests, d)
		q.all = append(q.all, int32(i))
	}
}

// htons returns port in network byte order, as a sockaddr holds it.
func htons(port uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], port)
	return *(*uint16)(unsafe.Pointer(&b[0]))
}

// Transmit encapsulates every frame of bufs and sends the burst with as
// few sendmmsg calls as its datagrams need (one per sending socket its
// flows use, per maxMsgs datagrams). A frame
// to a learned station goes to its remote; the others (broadcast,
// multicast, unknown) to every remote. GSO packets from guests are
// segmented and partial checksums finished first, in software: a guest
// behind the far end must never get a frame whose checksum is wrong.
// It returns the frames sent to at least one remote.
func (q *txQueue) Transmit(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	if q.p.closed.Load() {
		for _, b := range bufs {
			q.ctr.TxDrop(drop.DevReady)
			c.Drop(b, drop.DevReady)
		}
		q.ctr.Publish()
		return 0, q.p.downError("transmit")
	}
	q.sync()
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
	q.ctr.Publish()
	return q.sent, nil
}

// queueMarked queues a packet whose virtio-net header sits right
// before its data: segmented if it is a GSO packet, with its checksum
// finished if it asks for that. A GSO packet to one remote is split
// without copying its payload (splitGSO); the others go through
// vnet.Resolve, which copies each segment into a buffer of its own.
func (q *txQueue) queueMarked(c *buffer.Cache, b *buffer.Buf, orig int32, now int64) {
	if q.splitGSO(c, b, orig, now) {
		return
	}
	n, how, reason := vnet.Resolve(c, b, q.layer, q.segs)
	if n == 0 {
		q.drop(c, b, reason)
		return
	}
	switch how {
	case vnet.Segmented:
		q.ctr.N[cSegmented]++
		q.ctr.N[cSegmentedCopied]++
		q.ctr.N[cSegments] += uint64(n)
	case vnet.Finished:
		q.ctr.N[cCsumFinished]++
	}
	for _, s := range q.segs[:n] {
		q.queue(c, s, orig, now)
	}
	clear(q.segs[:n])
}

// splitGSO queues the segments of a GSO packet to one remote (a learned
// station, or a routed port's route) as vnet.Split describes them: each
// segment's headers in its datagram's header slot, its payload gathered
// by the kernel from b, which is held until the flush and only read (it
// may be shared with other ports). It reports false, having done
// nothing, for a packet that is not one, a packet to flood, without a
// route, whose segments would not fit the overlay (Resolve's path sends
// the guest the ICMP error) or whose headers do not fit a slot.
func (q *txQueue) splitGSO(c *buffer.Cache, b *buffer.Buf, orig int32, now int64) bool {
	head := b.Headroom()
	if head < vnet.HeaderLen {
		return false
	}
	h, _ := vnet.Decode(b.Frame()[head-vnet.HeaderLen : head])
	if !h.IsGSO() {
		return false
	}
	f := b.Bytes()
	var (
		r    int32
		sock int32
		rt   *route
		et   uint16
		base = outerLen
	)
	if q.l3 {
		var dst netip.Addr
		switch {
		case len(f) >= packet.IPv4HeaderLen && f[0]>>4 == 4:
			dst, et = netip.AddrFrom4([4]byte(f[16:20])), packet.EtherTypeIPv4
		case len(f) >= packet.IPv6HeaderLen && f[0]>>4 == 6:
			dst, et = netip.AddrFrom16([16]byte(f[24:40])), packet.EtherTypeIPv6
		default:
			return false
		}
		if rt = q.peers.route(dst); rt == nil {
			return false
		}
		r, base = rt.remote, outerLen+14
		sock = int32(senderOf(ipFlowHash(fnvBasis, et, f), len(q.senders)))
	} else {
		if len(f) < minInnerLen || f[0]&1 != 0 {
			return false
		}
		rr, ok := q.peers.fdb.lookup([6]byte(f[0:6]), now)
		if !ok {
			return false
		}
		r = int32(rr)
		sock = int32(senderOf(flowHash(f), len(q.senders)))
	}
	n, hdrLen, _ := vnet.Split(h, f, q.layer, q.splitHdrs, q.splitPay)
	if n == 0 {
		return false // Resolve says why, and drops it
	}
	// The first segment is the longest.
	first := hdrLen + len(q.splitPay[0])
	limit := MaxFrame
	if q.l3 {
		limit = MaxFrame - 14
	}
	if first > limit || q.mtu > 0 && !q.l3 && first > q.mtu+14 || q.mtu > 0 && q.l3 && first > q.mtu {
		clear(q.splitPay[:n])
		return false
	}
	q.ctr.N[cSegmented]++
	q.ctr.N[cSegments] += uint64(n)
	pi := q.hold(c, b, orig, n)
	for k, p := range q.splitPay[:n] {
		i := q.nmsg
		slot := q.hdrs[i][:]
		if q.l3 {
			packet.PutEthernet(slot[outerLen:], rt.mac, q.p.cfg.VTEPMAC, et)
		}
		copy(slot[base:], q.splitHdrs[k][:hdrLen])
		q.message(pi, r, base+hdrLen, p, sock, q.mtu > 0)
	}
	clear(q.splitPay[:n])
	return true
}

func (q *txQueue) drop(c *buffer.Cache, b *buffer.Buf, reason drop.Reason) {
	q.ctr.TxDrop(reason)
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
		r, ok = q.peers.fdb.lookup([6]byte(f[0:6]), now)
	}
	if ok {
		one[0] = int32(r)
	} else {
		to = q.all
		q.ctr.N[cFlooded]++
	}
	pi := q.hold(c, b, orig, len(to))
	sock := int32(senderOf(flowHash(f), len(q.senders)))
	fits := q.mtu > 0 && len(f) <= q.mtu+14
	for _, r := range to {
		if q.nmsg == maxMsgs {
			// Flooded to more remotes than one flush sends: the rest
			// go with the next, the frame's buffer held until then.
			pi = q.flushHolding(c)
		}
		q.message(pi, r, q.slotLen(), f, sock, fits)
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
	rt := q.peers.route(dst)
	if rt == nil {
		q.drop(c, b, drop.NoRoute)
		return
	}
	pi := q.hold(c, b, orig, 1)
	i := q.nmsg
	packet.PutEthernet(q.hdrs[i][outerLen:], rt.mac, q.p.cfg.VTEPMAC, et)
	sock := int32(senderOf(ipFlowHash(fnvBasis, et, pkt), len(q.senders)))
	q.message(pi, rt.remote, q.slotLen(), pkt, sock, q.mtu > 0 && len(pkt) <= q.mtu)
}

// hold keeps b among the buffers of the queued messages, after sending
// those queued if n more would not fit (a flood to more than maxMsgs
// remotes starts a flush of its own and continues in the next: see
// flushHolding), and returns its index.
func (q *txQueue) hold(c *buffer.Cache, b *buffer.Buf, orig int32, n int) int32 {
	if q.nmsg+min(n, maxMsgs) > maxMsgs {
		q.flush(c)
	}
	q.pend = append(q.pend, b)
	q.pendSent = append(q.pendSent, false)
	q.pendReason = append(q.pendReason, drop.NotSpecified)
	q.pendOrig = append(q.pendOrig, orig)
	return int32(len(q.pend) - 1)
}

// message queues the datagram of the first hlen bytes of the next
// header slot (the VXLAN header, and what the caller wrote after it)
// and data f (a frame, a routed port's IP packet, or a segment's
// payload, which may be empty) to remote r through sending socket
// sock; fits says it fits the underlay's MTU whole.
func (q *txQueue) message(pi, r int32, hlen int, f []byte, sock int32, fits bool) {
	i := q.nmsg
	q.nmsg++
	q.iovs[2*i].SetLen(hlen)
	q.iovs[2*i+1].Base = nil
	if len(f) > 0 {
		q.iovs[2*i+1].Base = &f[0]
	}
	q.iovs[2*i+1].SetLen(len(f))
	q.dest[i], q.fits[i], q.owner[i] = r, fits, pi
	q.next[i] = -1
	if l := &q.bySock[sock]; l.first < 0 {
		l.first, l.last = int32(i), int32(i)
	} else {
		q.next[l.last] = int32(i)
		l.last = int32(i)
	}
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
	q.send()
	q.release(c, len(q.pend))
}

// flushHolding sends the queued datagrams and frees their buffers but
// the one held last, a frame flooded to more remotes than fit one
// flush: it stays held, with what its datagrams met so far, as the
// first buffer of the next flush. It returns that index.
func (q *txQueue) flushHolding(c *buffer.Cache) int32 {
	q.send()
	last := len(q.pend) - 1
	b, sent, reason, orig := q.pend[last], q.pendSent[last], q.pendReason[last], q.pendOrig[last]
	q.release(c, last)
	q.pend, q.pendSent = append(q.pend, b), append(q.pendSent, sent)
	q.pendReason, q.pendOrig = append(q.pendReason, reason), append(q.pendOrig, orig)
	return 0
}

// send sends the queued datagrams, one socket after another, noting
// which left.
func (q *txQueue) send() {
	for sock := range q.senders {
		if q.bySock[sock].first >= 0 {
			q.flushSocket(sock)
			q.bySock[sock] = sockList{-1, -1}
		}
	}
}

// release frees the first n held buffers, whose datagrams were sent,
// and empties the queue of messages: consumed if any of a buffer's
// datagrams left, else dropped with the reason of the last that failed.
func (q *txQueue) release(c *buffer.Cache, n int) {
	for i, b := range q.pend[:n] {
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
	}
	clear(q.pend)
	q.pend, q.pendSent, q.pendReason, q.pendOrig = q.pend[:0], q.pendSent[:0], q.pendReason[:0], q.pendOrig[:0]
	q.nmsg = 0
}

// flushSocket sends the queued datagrams of one sending socket, in
// order, with one sendmmsg if nothing fails, and notes which were sent.
func (q *txQueue) flushSocket(sock int) {
	n := q.plan(sock)
	fd := q.senders[sock].fd
	for done := 0; done < n; {
		sent, err := sendmmsg(fd, q.out[done:n])
		q.ctr.N[cTxCalls]++
		if err == nil && sent == 0 {
			err = unix.ENOBUFS // sent nothing, said nothing: do not spin
		}
		if err != nil {
			// The entry at done failed: count its datagrams, go on after
			// it. A UDP_SEGMENT send the kernel refused for other reasons
			// than a full buffer (an underlay device without checksum
			// offload, a path MTU that shrank) is not tried again on this
			// queue: its datagrams, and those that follow, go one by one.
			reason := sendReason(err)
			msgs := q.order[q.entFirst[done]:][:q.entN[done]]
			if len(msgs) > 1 && reason != drop.FullRing {
				q.gso = false
				for _, m := range msgs {
					q.sendOne(fd, m)
				}
				done++
				continue
			}
			for _, m := range msgs {
				q.ctr.TxDrop(reason)
				q.pendReason[q.owner[m]] = reason
			}
			done++
			continue
		}
		for e := done; e < done+sent; e++ {
			if q.entN[e] > 1 {
				q.ctr.N[cTxGSOSends]++
			}
			for _, m := range q.order[q.entFirst[e]:][:q.entN[e]] {
				q.sentOne(m)
			}
		}
		done += sent
	}
	for e := range n {
		q.out[e].Hdr.Iov, q.out[e].Hdr.Name = nil, nil
	}
	clear(q.outIovs[:2*len(q.order)])
}

// sentOne notes that datagram m left.
func (q *txQueue) sentOne(m int32) {
	q.pendSent[q.owner[m]] = true
	q.ctr.N[cTxPackets]++
	// The inner frame's bytes (a routed port's IP packet's): what
	// follows the slot's fixed part, and the data.
	q.ctr.N[cTxBytes] += uint64(q.iovs[2*m].Len) - uint64(q.slotLen()) + uint64(q.iovs[2*m+1].Len)
}

// sendOne sends datagram m by itself, through socket fd.
func (q *txQueue) sendOne(fd int, m int32) {
	h := &q.single[0].Hdr
	h.Iov = &q.iovs[2*m]
	h.SetIovlen(2)
	d := &q.dests[q.dest[m]]
	h.Name = (*byte)(unsafe.Pointer(&d.sa))
	h.Namelen = d.namelen
	sent, err := sendmmsg(fd, q.single[:])
	q.ctr.N[cTxCalls]++
	h.Iov, h.Name = nil, nil
	if err == nil && sent == 1 {
		q.sentOne(m)
		return
	}
	reason := drop.FullRing
	if err != nil {
		reason = sendReason(err)
	}
	q.ctr.TxDrop(reason)
	q.pendReason[q.owner[m]] = reason
}

// plan builds the sendmmsg entries of a socket's queued datagrams:
// a run of datagrams to one remote whose lengths are all one segment
// size (the last may be shorter), each fitting the MTU, is one entry
// with UDP_SEGMENT; any other datagram is an entry of its own. It
// returns the number of entries.
func (q *txQueue) plan(sock int) int {
	q.order = q.order[:0]
	n := 0
	size, total := 0, 0 // of the open run, entry n-1
	open := false
	for m := q.bySock[sock].first; m >= 0; m = q.next[m] {
		length := int(q.iovs[2*m].Len + q.iovs[2*m+1].Len)
		if open && q.dest[m] == q.dest[q.order[len(q.order)-1]] && q.fits[m] &&
			length <= size && q.entN[n-1] < maxGSOSegments && total+length <= maxGSOPayload {
			q.entN[n-1]++
			total += length
			open = length == size // a shorter datagram ends the run
		} else {
			q.entFirst[n], q.entN[n] = int32(len(q.order)), 1
			size, total = length, length
			open = q.gso && q.fits[m]
			n++
		}
		q.order = append(q.order, m)
	}
	for e := range n {
		first, count := int(q.entFirst[e]), int(q.entN[e])
		iovs := q.outIovs[2*first : 2*(first+count)]
		for k, m := range q.order[first : first+count] {
			iovs[2*k], iovs[2*k+1] = q.iovs[2*m], q.iovs[2*m+1]
		}
		h := &q.out[e].Hdr
		h.Iov = &iovs[0]
		h.SetIovlen(len(iovs))
		d := &q.dests[q.dest[q.order[first]]]
		h.Name = (*byte)(unsafe.Pointer(&d.sa))
		h.Namelen = d.namelen
		h.Control, h.Controllen = nil, 0
		if count > 1 {
			ctl := q.ctl[e*gsoCmsgLen : (e+1)*gsoCmsgLen]
			m := q.order[first]
			size := int(q.iovs[2*m].Len + q.iovs[2*m+1].Len)
			*(*uint16)(unsafe.Pointer(&ctl[unix.CmsgLen(0)])) = uint16(size)
			h.Control = &ctl[0]
			h.SetControllen(gsoCmsgLen)
		}
	}
	return n
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
