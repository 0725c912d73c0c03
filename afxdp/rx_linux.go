package afxdp

import (
	"fmt"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/attach"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/vnet"
)

// In unaligned mode a receive descriptor's address is the fill address
// in its low 48 bits and the data's offset from it above
// (XSK_UNALIGNED_BUF_OFFSET_SHIFT); in aligned mode it is the data's
// address, and the sum of both parts is that too.
const (
	offsetShift = 48
	addrMask    = 1<<offsetShift - 1
)

// maxPieces bounds the pieces of one multi-buffer frame (the kernel's
// MAX_SKB_FRAGS is 17, plus the head).
const maxPieces = 18

// shrinkAfter steers a queue's fill target down: it grows fourfold each time
// the kernel took every frame lent to it, and halves after that many
// bursts that left at least half of it unused.
const shrinkAfter = 1024

// rxQueue is one socket's receive side: the port.RxQueue the engine
// polls. It lends frames of the worker's cache to the fill ring and
// builds buffers around what the kernel wrote into them, without a copy.
type rxQueue struct {
	p      *Port
	s      *xsk
	lentAt []uint64 // bit i: frame i is in the fill or receive ring
	lent   int
	target int
	calm   int
	need   int // fill frames the longest frame takes (its pieces)
	budget *fillBudget
	pieces []*buffer.Buf // of a multi-buffer frame being received
	notify func()
	ctr    counters
}

var (
	_ port.RxQueue  = (*rxQueue)(nil)
	_ port.Notifier = (*rxQueue)(nil)
	_ attach.Queue  = (*rxQueue)(nil)
)

// Receive takes the frames the kernel wrote into lent frames, builds a
// buffer around each (a multi-buffer frame is joined into one buffer of
// a larger class), finishes checksums a peer left partial, and lends
// the fill ring as many frames again, in bulk, within the worker's
// budget. It makes a system call only for a zero-copy driver that asks
// for one (XDP_RING_NEED_WAKEUP).
func (q *rxQueue) Receive(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	if q.p.link.gone.Load() {
		return 0, q.p.downError("receive")
	}
	if c.Pool() != q.p.pool {
		return 0, fmt.Errorf("afxdp %s: receive with a cache of another pool than the port's", q.p.cfg.Name)
	}
	if q.budget == nil || q.budget.cache != c {
		q.join(c)
	}
	n, bytes := q.reap(c, bufs)
	q.refill(c)
	q.ctr.N[cRxPackets] += uint64(n)
	q.ctr.N[cRxBytes] += uint64(bytes)
	q.ctr.N[cLent] = uint64(q.lent)
	q.ctr.N[cFillTarget] = uint64(q.target)
	q.ctr.Publish()
	return n, nil
}

// reap takes up to len(bufs) frames off the receive ring.
func (q *rxQueue) reap(c *buffer.Cache, bufs []*buffer.Buf) (n, bytes int) {
	r := q.s.rx
	avail := r.ready(uint32(len(bufs)))
	if avail == 0 {
		return 0, 0
	}
	// The kernel took every frame it was lent, or left fewer than the
	// longest frame takes (it drops a multi-buffer frame it cannot
	// place whole, counting it in rx_dropped, not as a fill-ring miss):
	// the queue needs more.
	q.need = q.p.piecesPerFrame()
	dry := int(q.s.fill.local-q.s.fill.cons.Load()) < q.need
	i := uint32(0)
	for ; i < avail && n < len(bufs); i++ {
		d := r.desc(r.local + i)
		b := q.take(c, d)
		if b == nil {
			continue
		}
		if d.Options&unix.XDP_PKT_CONTD != 0 || len(q.pieces) > 0 {
			if b = q.piece(c, b, d.Options&unix.XDP_PKT_CONTD != 0); b == nil {
				continue
			}
		}
		if b.Len() < packet.EthernetHeaderLen {
			q.drop(c, b, drop.PktTooSmall)
			continue
		}
		if !q.p.cfg.TrustCsum && vnet.FinishPartial(b.Bytes(), packet.L2) {
			q.ctr.N[cRxCsumFinished]++
		}
		bufs[n] = b
		n++
		bytes += b.Len()
	}
	r.release(i)
	q.steer(dry)
	return n, bytes
}

// take returns the buffer whose frame a receive descriptor names, with
// its data window on what the kernel wrote, or nil if the descriptor is
// not one of a frame this queue lent (which a correct kernel never
// writes) or does not fit it.
func (q *rxQueue) take(c *buffer.Cache, d *unix.XDPDesc) *buffer.Buf {
	abs := d.Addr&addrMask + d.Addr>>offsetShift
	frame := abs / uint64(q.p.slab.Frame)
	if frame >= uint64(q.p.frames) || q.lentAt[frame/64]&(1<<(frame%64)) == 0 {
		q.ctr.RxDrop(drop.DevHdr)
		return nil
	}
	q.lentAt[frame/64] &^= 1 << (frame % 64)
	q.budget.lend(q, -1)
	b := q.p.pool.Buf(q.p.slab.First + uint32(frame))
	if !b.SetData(int(abs-frame*uint64(q.p.slab.Frame)), int(d.Len)) {
		q.drop(c, b, drop.DevHdr)
		return nil
	}
	return b
}

// piece collects one piece of a multi-buffer frame; with the last one
// it returns the frame joined into one buffer, else nil.
func (q *rxQueue) piece(c *buffer.Cache, b *buffer.Buf, more bool) *buffer.Buf {
	if len(q.pieces) == maxPieces {
		// Longer than any frame the kernel makes: drop what came so far.
		q.dropPieces(c, drop.PktTooBig)
	}
	q.pieces = append(q.pieces, b)
	if more {
		return nil
	}
	total := 0
	for _, p := range q.pieces {
		total += p.Len()
	}
	class, ok := q.p.pool.ClassFor(total)
	if !ok {
		q.dropPieces(c, drop.PktTooBig)
		return nil
	}
	whole, err := c.Get(class)
	if err != nil {
		q.dropPieces(c, drop.NoMem)
		return nil
	}
	for _, p := range q.pieces {
		d, _ := whole.Append(p.Len())
		copy(d, p.Bytes())
	}
	c.ConsumeBulk(q.pieces)
	clear(q.pieces)
	q.pieces = q.pieces[:0]
	q.ctr.N[cRxMultiBuf]++
	return whole
}

// dropPieces drops the frame being received in pieces: one drop, its
// other pieces freed with it.
func (q *rxQueue) dropPieces(c *buffer.Cache, r drop.Reason) {
	if len(q.pieces) == 0 {
		return
	}
	q.drop(c, q.pieces[0], r)
	c.ConsumeBulk(q.pieces[1:])
	clear(q.pieces)
	q.pieces = q.pieces[:0]
}

func (q *rxQueue) drop(c *buffer.Cache, b *buffer.Buf, r drop.Reason) {
	q.ctr.RxDrop(r)
	c.Drop(b, r)
}

// steer adapts the fill target: four times larger (up to the ring) when the
// kernel found the fill ring empty, halved (down to the floor) after a
// long calm.
func (q *rxQueue) steer(dry bool) {
	switch {
	case dry:
		q.target = min(4*q.target, int(q.s.fill.size))
		q.calm = 0
	case int(q.s.fill.local-q.s.fill.cons.Load()) >= q.target/2:
		if q.calm++; q.calm >= shrinkAfter {
			q.target = max(q.target/2, q.budget.floor, q.need)
			q.calm = 0
		}
	}
}

// refill lends the fill ring frames up to the queue's allowance, taken
// from c in bulk, and published with one store. A queue left with
// too few frames to receive the longest frame into asks to be polled
// again (its socket would never become readable), and the worker, whose
// cache just ran dry, waits for buffers to come home before it does.
func (q *rxQueue) refill(c *buffer.Cache) {
	b, fill := q.budget, q.s.fill
	want := b.allowance(q)
	want = min(want, int(fill.free(uint32(want))))
	for want > 0 {
		k := min(want, refillChunk)
		bufs := b.bufs[:k]
		if err := c.GetBulk(bufs, q.p.class); err != nil {
			q.ctr.N[cFillShort]++
			break
		}
		for j, buf := range bufs {
			frame := buf.ID() - q.p.slab.First
			*fill.addr(fill.local + uint32(j)) = uint64(frame) * uint64(q.p.slab.Frame)
			q.lentAt[frame/64] |= 1 << (frame % 64)
		}
		clear(bufs)
		fill.submit(uint32(k))
		b.lend(q, k)
		want -= k
	}
	if q.lent < q.need && q.notify != nil {
		q.notify()
	}
	if fill.needWakeup() {
		q.s.kickFill()
		q.ctr.N[cRxCalls]++
	}
}

// FD implements port.Waiter: the socket, readable while the receive ring
// holds frames.
func (q *rxQueue) FD() int { return q.s.fd }

// Arm implements port.Waiter. The socket is level-triggered, so there is
// nothing to arm. A queue with too few frames lent for the longest
// frame may wait for nothing (the kernel drops what it cannot place
// whole), and one whose interface is gone must be polled to say so (its
// socket never becomes readable again): both say they are pending.
func (q *rxQueue) Arm() bool {
	return q.s.rx.pending() || q.lent < q.need || q.p.link.gone.Load()
}

// Disarm implements port.Waiter.
func (q *rxQueue) Disarm() {}

// SetNotify implements port.Notifier: the queue is polled only when its
// FD is readable, or when it asks to be (starved of buffers).
func (q *rxQueue) SetNotify(f func()) { q.notify = f }

// Attach implements internal/attach.Queue: the queue joins the fill
// budget of the worker whose cache c is, and lends its fill ring its
// first frames there.
func (q *rxQueue) Attach(c *buffer.Cache) {
	if c.Pool() != q.p.pool || q.p.closed.Load() {
		return // Receive reports the misuse
	}
	q.join(c)
	q.refill(c)
	q.ctr.Publish()
}

// Detach implements internal/attach.Queue: what the queue lent stays
// lent until the port closes, but no longer counts against the worker.
func (q *rxQueue) Detach(c *buffer.Cache) { q.leave() }
