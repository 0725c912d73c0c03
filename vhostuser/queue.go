//go:build linux

package vhostuser

import (
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/cacheline"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/tun"
	"softnet.dev/vnet"
)

// maxFrame is the largest frame the port takes or gives: a 64 KiB GSO
// packet with its Ethernet header and a VLAN tag.
const maxFrame = 65535 + 14 + 4

// maxBurst bounds the entries one Receive takes.
const maxBurst = 256

// virtio-net header lengths: struct virtio_net_hdr, and with num_buffers
// (VIRTIO_F_VERSION_1 or VIRTIO_NET_F_MRG_RXBUF).
const (
	hdrLegacy = vnet.HeaderLen
	hdrMrg    = vnet.HeaderLen + 2
)

// setFeatures derives what the data path needs from the negotiated
// features.
func (r *split) setFeatures(f uint64) {
	r.hdrLen = hdrLegacy
	if f&(featVersion1|featMrgRxbuf) != 0 {
		r.hdrLen = hdrMrg
	}
	r.mergeable = f&featMrgRxbuf != 0
	r.inOrder = f&featInOrder != 0
	r.eventIdx = f&featEventIdx != 0
	r.fromGuest, r.toGuest = 0, 0
	if f&featCsum != 0 {
		r.fromGuest |= port.OffloadCsum
		if f&featHostTSO4 != 0 {
			r.fromGuest |= port.OffloadTSO4
		}
		if f&featHostTSO6 != 0 {
			r.fromGuest |= port.OffloadTSO6
		}
	}
	if f&featGuestCsum != 0 {
		r.toGuest |= port.OffloadCsum
		if f&featGuestTSO4 != 0 {
			r.toGuest |= port.OffloadTSO4
		}
		if f&featGuestTSO6 != 0 {
			r.toGuest |= port.OffloadTSO6
		}
	}
}

// rxQueue takes packets from the guest's transmit ring. How its worker
// sleeps and wakes is in wait.go.
type rxQueue struct {
	_     [cacheline.Size]byte
	p     *Port
	v     *vring
	pool  *buffer.Pool
	small buffer.Class // the class of a frame of a 1500-byte MTU
	spare []*buffer.Buf
	cur   *buffer.Buf // the buffer the burst works on, for faulted
	got   int         // the packets the burst received, for faulted
	ctr   counters
	waiter
	_ [cacheline.Size]byte
}

var _ port.RxQueue = (*rxQueue)(nil)

func newRxQueue(p *Port, v *vring) (*rxQueue, error) {
	q := &rxQueue{p: p, v: v, spare: make([]*buffer.Buf, maxBurst), ctr: newCounters()}
	if err := q.waiter.open(q.pollRing); err != nil {
		return nil, err
	}
	return q, nil
}

// Receive takes up to len(bufs) packets from the guest: it walks each
// available descriptor chain with every bound checked, copies the packet
// into a buffer of the burst's bulk get (the guest may rewrite its
// buffers once they are used), completes the used entries with one
// index store and notifies the guest once, if it asked.
func (q *rxQueue) Receive(c *buffer.Cache, bufs []*buffer.Buf) (got int, err error) {
	if !q.v.mu.TryLock() {
		return 0, nil
	}
	defer q.v.mu.Unlock()
	r := q.v.run
	if r == nil || r.broken {
		return 0, nil
	}
	if err := q.setPool(c.Pool()); err != nil {
		return 0, err
	}
	defer q.faulted(c, r, &got)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return q.receive(c, r, bufs), nil
}

// faulted recovers from a fault in guest memory (its file shrank under
// the mapping, which the front-end can do at any time): what the burst
// held is freed, the packets received so far are kept, and the ring is
// given up until it restarts. Any other panic goes on.
func (q *rxQueue) faulted(c *buffer.Cache, r *split, got *int) {
	x := recover()
	if x == nil {
		return
	}
	if !guestFault(x) {
		panic(x)
	}
	if q.cur != nil {
		c.Drop(q.cur, drop.DevHdr) // counted once, with the ring, below
		q.cur = nil
	}
	for i, b := range q.spare {
		if b != nil {
			c.Consume(b) // not a packet yet
			q.spare[i] = nil
		}
	}
	*got = q.got
	q.ctr.RxDrop(drop.DevHdr)
	q.breakRing(r, RefusedRingFault)
}

// receive is Receive's burst, on a running ring, under Receive's guard:
// the buffer it works on is q.cur, and q.got the packets it put in bufs.
func (q *rxQueue) receive(c *buffer.Cache, r *split, bufs []*buffer.Buf) int {
	q.got = 0
	r.setNoNotify(true)
	avail, ok := r.pending()
	if !ok {
		q.ctr.RxDrop(drop.DevHdr)
		q.breakRing(r, RefusedRingAhead)
		return 0
	}
	n := min(int(avail), len(bufs), maxBurst)
	if n == 0 {
		return 0
	}
	spare := q.spare[:n]
	if err := c.GetBulk(spare, q.small); err != nil {
		// The entries stay in the ring until buffers come back.
		q.ctr.RxDrop(drop.NoMem)
		q.ctr.Publish()
		return 0
	}
	start := r.usedIdx
	var last uint16 // the burst's last head
	for k := range spare {
		b := spare[k]
		spare[k] = nil
		q.cur = b
		head := r.availHead(r.lastAvail)
		r.lastAvail++
		budget := int(r.num)
		segs, total, werr := walk(r.desc, r.num, r.mem, head, false, maxBytesPerPacket, &budget, r.segs[:0])
		// Completed whatever it held: the guest gets every buffer back.
		// In order, the burst's last entry stands for all (below).
		if !r.inOrder {
			r.putUsed(r.usedIdx, head, 0)
		}
		r.usedIdx++
		last = head
		if werr != walkOK {
			reason := drop.DevHdr
			if werr == walkTooBig {
				reason = drop.PktTooBig
			}
			q.ctr.N[refusalCounter(chainRefusal(werr))]++
			q.cur = nil
			q.drop(c, b, reason)
			continue
		}
		q.cur = nil // fit frees or keeps it
		if b, ok = q.fit(c, b, total-r.hdrLen); !ok {
			continue
		}
		q.cur = b
		if ok, reason := q.accept(r, b, segs, total); !ok {
			q.cur = nil
			q.drop(c, b, reason)
			continue
		}
		q.ctr.N[cRxPackets]++
		q.ctr.N[cRxBytes] += uint64(b.Len())
		bufs[q.got] = b
		q.got++
		q.cur = nil
	}
	if r.inOrder {
		r.putUsed(r.usedIdx-1, last, 0)
	}
	r.publishUsed()
	q.p.call(q.v, r, start, &q.ctr)
	q.ctr.Publish()
	return q.got
}

func (q *rxQueue) drop(c *buffer.Cache, b *buffer.Buf, reason drop.Reason) {
	q.ctr.RxDrop(reason)
	c.Drop(b, reason)
}

// fit returns a buffer whose room holds n bytes: b, or one of a larger
// class in its place.
func (q *rxQueue) fit(c *buffer.Cache, b *buffer.Buf, n int) (*buffer.Buf, bool) {
	if n <= q.pool.Room(q.small) {
		return b, true
	}
	class, ok := q.pool.ClassFor(n)
	if !ok {
		q.drop(c, b, drop.PktTooBig)
		return nil, false
	}
	big, err := c.Get(class)
	if err != nil {
		q.drop(c, b, drop.NoMem)
		return nil, false
	}
	c.Consume(b) // unused, not a lost packet
	return big, true
}

// setPool picks the class of ordinary frames for the pool of the
// worker's cache.
func (q *rxQueue) setPool(p *buffer.Pool) error {
	if q.pool == p {
		return nil
	}
	if p.Config().Headroom < hdrMrg {
		return fmt.Errorf("vhost-user %s: the pool's headroom (%d bytes) cannot hold a virtio-net header: %w", q.p.cfg.Name, p.Config().Headroom, port.ErrDown)
	}
	q.pool = p
	if c, ok := p.ClassFor(1500 + 14 + 4); ok {
		q.small = c
	} else {
		q.small = buffer.Class(p.NumClasses() - 1)
	}
	return nil
}

// accept copies the chain's total bytes, header and frame, into b so
// that the frame starts at the headroom, then validates the header. A
// header the packet still needs (tun.FlagVnetHdr: GSO or a checksum to
// finish) is left right before the frame, as package tun leaves it.
func (q *rxQueue) accept(r *split, b *buffer.Buf, segs [][]byte, total int) (bool, drop.Reason) {
	hl := r.hdrLen
	switch {
	case total < hl:
		return false, drop.DevHdr
	case total-hl < packet.EthernetHeaderLen:
		return false, drop.PktTooSmall
	}
	head := b.Headroom()
	off := head - hl
	frame := b.Frame()
	if off < 0 || off+total > len(frame) {
		return false, drop.PktTooBig
	}
	gather(frame[off:off+total], segs)
	b.SetData(head, total-hl)
	h, _ := vnet.Decode(frame[off : off+vnet.HeaderLen])
	if h == (vnet.Header{}) || (h.Flags == vnet.FlagDataValid && h.GSOType == vnet.GSONone) {
		return true, drop.NotSpecified
	}
	need := offloadsOf(h, b.Bytes())
	if need&^r.fromGuest != 0 {
		return false, drop.DevHdr // an offload the guest did not negotiate
	}
	if ok, reason := vnet.Check(h, b.Bytes(), packet.L2); !ok {
		return false, reason
	}
	if h.IsGSO() || h.NeedsCsum() {
		if hl == hdrMrg {
			// num_buffers follows the header; it means nothing from the
			// guest. Move the header next to the frame.
			copy(frame[head-vnet.HeaderLen:head], frame[off:off+vnet.HeaderLen])
		}
		b.SetFlags(tun.FlagVnetHdr)
	}
	return true, drop.NotSpecified
}

// breakRing gives up a ring the guest corrupted, until it restarts,
// with v.mu held: its kick is not watched meanwhile.
func (q *rxQueue) breakRing(r *split, why Refusal) {
	r.broken = true
	q.ctr.N[refusalCounter(why)]++
	q.ctr.Publish()
	q.p.watchKick(q.v)
	q.p.log.Warn("vhost-user ring stopped until restarted", "ring", q.v.index, "why", why)
}

// offloadsOf returns the offloads a frame with the header h needs. The
// IP version only tells USO4 from USO6, which vhost-user ports never
// negotiate, so an untagged frame's first IP byte is enough.
func offloadsOf(h vnet.Header, frame []byte) port.Offloads {
	return h.Offloads(len(frame) > packet.EthernetHeaderLen && frame[packet.EthernetHeaderLen]>>4 == 6)
}

// call notifies the guest that the used entries from old on wait, if it
// asked (split.needCall), without ever waiting for its eventfd
// (call.go).
func (p *Port) call(v *vring, r *split, old uint16, ctr *counters) {
	if v.calls.fd >= 0 && r.needCall(old) {
		v.calls.call(ctr)
	}
}

// txQueue fills a receive ring of the guest: its own pair's, or the one
// remapTx routes it to.
type txQueue struct {
	_     [cacheline.Size]byte
	p     *Port
	route atomic.Pointer[txRoute]
	v     *vring        // the ring of the burst, route's when it began
	segs  []*buffer.Buf // software GSO's segments
	copy  *buffer.Buf   // a shared packet's copy whose checksum is finished
	cur   *buffer.Buf   // the packet being sent, for faulted
	sent  int           // the packets the burst sent, for faulted
	ctr   counters
	_     [cacheline.Size]byte
}

var _ port.TxQueue = (*txQueue)(nil)

func newTxQueue(p *Port, v *vring) *txQueue {
	q := &txQueue{p: p, v: v, segs: make([]*buffer.Buf, vnet.MaxSegments), ctr: newCounters()}
	q.route.Store(&txRoute{v: v})
	return q
}

// Transmit copies each packet into the guest's receive buffers, merging
// buffers for a packet larger than one (VIRTIO_NET_F_MRG_RXBUF), and
// frees it. The used entries are published with one index store and the
// guest notified once per burst. While no front-end runs the ring, the
// packets drop as DEV_READY; when the guest's ring is full, as FULL_RING.
// A queue whose ring another queue shares (txRoute) waits for that
// queue's burst to end.
func (q *txQueue) Transmit(c *buffer.Cache, bufs []*buffer.Buf) (sent int, err error) {
	route := q.route.Load()
	v := route.v
	if route.shared {
		v.txMu.Lock()
		defer v.txMu.Unlock()
	}
	if !v.mu.TryLock() {
		q.dropAll(c, bufs, drop.DevReady)
		return 0, nil
	}
	defer v.mu.Unlock()
	r := v.run
	if r == nil || r.broken {
		q.dropAll(c, bufs, drop.DevReady)
		return 0, nil
	}
	q.v = v
	defer q.faulted(c, r, bufs, &sent)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return q.transmit(c, r, bufs), nil
}

// transmit is Transmit's burst under its guard: the packet it works on
// is q.cur, a copy or segments of it q.copy and q.segs, and q.sent the
// packets sent.
func (q *txQueue) transmit(c *buffer.Cache, r *split, bufs []*buffer.Buf) int {
	start := r.usedIdx
	q.sent = 0
	for i, b := range bufs {
		bufs[i] = nil
		q.cur = b
		if q.send(c, r, b) {
			q.sent++
		}
		q.cur = nil
	}
	if r.usedIdx != start {
		r.publishUsed()
		q.p.call(q.v, r, start, &q.ctr)
	}
	q.ctr.Publish()
	return q.sent
}

// faulted is rxQueue.faulted for a transmit burst: the packet being
// sent and those after it are dropped.
func (q *txQueue) faulted(c *buffer.Cache, r *split, bufs []*buffer.Buf, sent *int) {
	x := recover()
	if x == nil {
		return
	}
	if !guestFault(x) {
		panic(x)
	}
	for _, b := range append(q.segs, q.copy) {
		if b != nil {
			c.Consume(b) // the queue's own copies
		}
	}
	clear(q.segs)
	q.copy = nil
	if q.cur != nil {
		q.ctr.TxDrop(drop.DevReady)
		c.Drop(q.cur, drop.DevReady)
		q.cur = nil
	}
	*sent = q.sent
	q.breakRing(r, RefusedRingFault)
	q.dropAll(c, bufs, drop.DevReady) // and publishes the counters
}

func (q *txQueue) dropAll(c *buffer.Cache, bufs []*buffer.Buf, reason drop.Reason) {
	for i, b := range bufs {
		if b != nil {
			q.ctr.TxDrop(reason)
			c.Drop(b, reason)
			bufs[i] = nil
		}
	}
	q.ctr.Publish()
}

// send delivers one packet, segmenting it or finishing its checksum
// first if it needs an offload the guest did not take, and frees it.
func (q *txQueue) send(c *buffer.Cache, r *split, b *buffer.Buf) bool {
	if b.Flags()&tun.FlagVnetHdr != 0 && b.Headroom() >= vnet.HeaderLen {
		h, _ := vnet.Decode(b.Frame()[b.Headroom()-vnet.HeaderLen:])
		if offloadsOf(h, b.Bytes())&^r.toGuest == 0 {
			return q.done(c, b, q.deliver(r, &h, b.Bytes()))
		}
		switch {
		case h.IsGSO():
			return q.segment(c, r, b, h)
		case h.NeedsCsum():
			return q.finishChecksum(c, r, b, h)
		}
	}
	return q.done(c, b, q.deliver(r, nil, b.Bytes()))
}

// done frees b as sent, or drops it with the reason.
func (q *txQueue) done(c *buffer.Cache, b *buffer.Buf, reason drop.Reason) bool {
	q.cur = nil
	if reason == delivered {
		c.Consume(b)
		return true
	}
	q.ctr.TxDrop(reason)
	c.Drop(b, reason)
	return false
}

// delivered is deliver's success: no reason to drop.
const delivered = drop.NumReasons

// deliver copies the header h (nil: none, all zero) and pkt into the
// guest's next receive chains. Nothing is consumed unless the whole
// packet fits.
func (q *txQueue) deliver(r *split, h *vnet.Header, pkt []byte) drop.Reason {
	if len(pkt) == 0 {
		return drop.PktTooSmall
	}
	need := r.hdrLen + len(pkt)
	segs := r.segs[:0]
	chains, have := 0, 0
	budget := int(r.num) // descriptors, over all the packet's chains
	for have < need {
		if chains == 1 && !r.mergeable {
			return drop.PktTooBig // the guest's buffers are smaller than the packet
		}
		avail, ok := r.available(uint16(chains) + 1)
		switch {
		case !ok:
			q.breakRing(r, RefusedRingAhead)
			return drop.DevReady
		case chains == int(avail):
			return drop.FullRing
		}
		head := r.availHead(r.lastAvail + uint16(chains))
		var n int
		var werr walkError
		segs, n, werr = walk(r.desc, r.num, r.mem, head, true, need-have, &budget, segs)
		if werr != walkOK {
			q.ctr.N[refusalCounter(chainRefusal(werr))]++
			q.breakRing(r, RefusedRingBadChain)
			return drop.DevHdr
		}
		// What the chain holds of the packet (its last buffer may hold
		// more, of any length: a length past 32 bits must not wrap).
		r.heads[chains], r.lens[chains] = head, uint32(min(n, need-have))
		chains++
		have += n
	}
	q.writeHeader(r, segs, h, chains)
	scatter(segs, r.hdrLen, pkt)
	left := need
	for k := range chains {
		w := min(int(r.lens[k]), left)
		r.putUsed(r.usedIdx, r.heads[k], uint32(w))
		r.usedIdx++
		left -= w
	}
	r.lastAvail += uint16(chains)
	q.ctr.N[cTxPackets]++
	q.ctr.N[cTxBytes] += uint64(len(pkt))
	return delivered
}

// writeHeader writes the virtio-net header h (nil: all zero) of a packet
// over chains receive chains at the start of their buffers segs. The
// header is stored straight into the first buffer, which a guest's
// buffer always holds whole in practice: assembled on the stack first,
// it would be read back by a copy whose loads wait for every earlier
// store to the guest's memory to complete (a load that spans several
// smaller stores is not forwarded from them), one stall per packet.
func (q *txQueue) writeHeader(r *split, segs [][]byte, h *vnet.Header, chains int) {
	if first := segs[0]; len(first) >= r.hdrLen {
		if h != nil {
			h.Encode(first)
		} else {
			clear(first[:vnet.HeaderLen])
		}
		if r.hdrLen == hdrMrg {
			binary.LittleEndian.PutUint16(first[vnet.HeaderLen:], uint16(chains))
		}
		return
	}
	var hdr [hdrMrg]byte
	if h != nil {
		h.Encode(hdr[:])
	}
	if r.hdrLen == hdrMrg {
		binary.LittleEndian.PutUint16(hdr[vnet.HeaderLen:], uint16(chains))
	}
	scatter(segs, 0, hdr[:r.hdrLen])
}

// breakRing gives up a ring the guest corrupted, until it restarts.
func (q *txQueue) breakRing(r *split, why Refusal) {
	r.broken = true
	q.ctr.N[refusalCounter(why)]++
	q.p.log.Warn("vhost-user ring stopped until restarted", "ring", q.v.index, "why", why)
}

// segment splits a GSO packet for a guest without TSO. The packet counts
// as sent only if every segment was delivered.
func (q *txQueue) segment(c *buffer.Cache, r *split, b *buffer.Buf, h vnet.Header) bool {
	pkt := b.Bytes()
	n := vnet.SegmentCount(h, pkt, packet.L2)
	if n < 1 || n > len(q.segs) {
		return q.done(c, b, drop.GsoSeg)
	}
	segs := q.segs[:n]
	got, reason := vnet.Segment(c, h, pkt, packet.L2, segs)
	if got == 0 {
		return q.done(c, b, reason)
	}
	q.ctr.N[cSegmented]++
	res := delivered
	for i, s := range segs[:got] {
		if res == delivered {
			res = q.deliver(r, nil, s.Bytes())
		}
		// The segments are this queue's copies: freed as consumed, and a
		// loss counted once, on the packet they came from.
		c.Consume(s)
		segs[i] = nil
	}
	return q.done(c, b, res)
}

// finishChecksum completes the checksum of a packet that left it to the
// device, for a guest without GUEST_CSUM. A shared buffer is copied
// first: its other holders may be reading it.
func (q *txQueue) finishChecksum(c *buffer.Cache, r *split, b *buffer.Buf, h vnet.Header) bool {
	pkt := b.Bytes()
	var cp *buffer.Buf
	if b.Refs() > 1 {
		class, ok := c.Pool().ClassFor(len(pkt))
		if !ok {
			return q.done(c, b, drop.PktTooBig)
		}
		var err error
		if cp, err = c.Get(class); err != nil {
			return q.done(c, b, drop.NoMem)
		}
		q.copy = cp
		cp.SetData(cp.Headroom(), len(pkt))
		copy(cp.Bytes(), pkt)
		pkt = cp.Bytes()
	}
	res := drop.DevHdr // offsets outside the packet
	if vnet.FinishChecksum(h, pkt) {
		res = q.deliver(r, nil, pkt)
	}
	if cp != nil {
		q.copy = nil
		c.Consume(cp)
	}
	return q.done(c, b, res)
}
