package afxdp

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/tun"
	"softnet.dev/vnet"
)

// maxTxPieces bounds the pieces a frame longer than a UMEM frame is sent
// in: a piece may cross a page, and the kernel's skb takes at most
// MAX_SKB_FRAGS (17) page fragments; a frame it refuses would be lost
// with its UMEM frames until the port closes.
const maxTxPieces = 8

// reapChunk is how many completed frames are freed with one ConsumeBulk.
const reapChunk = 64

// A queue's wakeup (in copy mode, the system call that sends) waits,
// while its worker keeps finding packets, for kickAt frames or for
// holdMax after the first: at load one call sends a batch, and a frame
// waits at most holdMax, as a NIC's interrupt coalescing lets it. A
// worker that finds nothing flushes at once.
const (
	kickAt  = 32
	holdMax = 50 * time.Microsecond
)

// epoch is the origin of the queues' hold times.
var epoch = time.Now()

// txQueue is one socket's transmit side: the port.TxQueue of one
// worker. A buffer of the UMEM's class leaves from its own frame; any
// other is copied into one first. Frames come back through the
// completion ring and are freed in bulk into the worker's cache.
type txQueue struct {
	p      *Port
	s      *xsk
	lentAt []uint64 // bit i: frame i is in the transmit or completion ring
	lent   int
	queued uint32 // descriptors written, not yet published
	unsent uint32 // published since the last wakeup
	heldAt int64  // when the first of them was held, since epoch
	segs   []*buffer.Buf
	pieces [maxTxPieces]*buffer.Buf
	done   [reapChunk]*buffer.Buf
	ctr    counters
}

var (
	_ port.TxQueue = (*txQueue)(nil)
	_ port.Flusher = (*txQueue)(nil)
)

// Transmit puts every frame of bufs on the transmit ring and publishes
// them with one store; Flush, at the end of the worker's round, sends
// what the round's bursts put there. GSO packets are segmented and
// partial checksums finished first: an AF_XDP frame carries no offload
// metadata.
func (q *txQueue) Transmit(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	q.complete(c)
	var err error
	switch {
	case q.p.link.gone.Load():
		err = q.p.downError("transmit")
	case c.Pool() != q.p.pool:
		err = fmt.Errorf("afxdp %s: transmit with a cache of another pool than the port's", q.p.cfg.Name)
	case q.p.link.down.Load():
	default:
		sent := q.send(c, bufs)
		q.ctr.Publish()
		return sent, nil
	}
	for _, b := range bufs {
		q.drop(c, b, drop.DevReady)
	}
	q.ctr.Publish()
	return 0, err
}

func (q *txQueue) send(c *buffer.Cache, bufs []*buffer.Buf) int {
	sent := 0
	for _, b := range bufs {
		if b.Flags()&tun.FlagVnetHdr == 0 {
			sent += q.put(c, b)
			continue
		}
		n, how, reason := vnet.Resolve(c, b, packet.L2, q.segs)
		if n == 0 {
			q.drop(c, b, reason)
			continue
		}
		switch how {
		case vnet.Segmented:
			q.ctr.N[cSegmented]++
			q.ctr.N[cSegments] += uint64(n)
		case vnet.Finished:
			q.ctr.N[cCsumFinished]++
		}
		for _, s := range q.segs[:n] {
			sent += q.put(c, s)
		}
		clear(q.segs[:n])
	}
	if q.queued > 0 {
		q.s.tx.submit(q.queued)
		q.unsent += q.queued
		q.queued = 0
	}
	return sent
}

// put writes b's descriptors after those queued, and returns 1 if it
// did, 0 if b was dropped.
func (q *txQueue) put(c *buffer.Cache, b *buffer.Buf) int {
	n := b.Len()
	switch {
	case n < packet.EthernetHeaderLen:
		q.drop(c, b, drop.PktTooSmall)
		return 0
	case n > int(q.p.link.maxFrame.Load()):
		q.drop(c, b, drop.PktTooBig)
		return 0
	}
	frame := b.ID() - q.p.slab.First
	if b.Class() == q.p.class && frame < uint32(q.p.frames) && q.lentAt[frame/64]&(1<<(frame%64)) == 0 {
		if !q.room(1) {
			q.drop(c, b, drop.FullRing)
			return 0
		}
		q.desc(b, 0)
		q.count(n)
		return 1
	}
	// Another class, or a frame this queue sends already (a buffer
	// flooded to this port twice cannot be, but the check is cheap):
	// copied into fresh UMEM frames, in pieces if it must be.
	room := q.p.slab.Frame - q.p.pool.Config().Headroom
	pieces := (n + room - 1) / room
	switch {
	case pieces > 1 && (!q.p.sg || pieces > maxTxPieces):
		q.drop(c, b, drop.PktTooBig)
		return 0
	case !q.room(uint32(pieces)):
		q.drop(c, b, drop.FullRing)
		return 0
	}
	ps := q.pieces[:pieces]
	if err := c.GetBulk(ps, q.p.class); err != nil {
		q.drop(c, b, drop.NoMem)
		return 0
	}
	data := b.Bytes()
	for i, p := range ps {
		d, _ := p.Append(min(room, len(data)))
		data = data[copy(d, data):]
		more := uint32(0)
		if i < pieces-1 {
			more = unix.XDP_PKT_CONTD
		}
		q.desc(p, more)
	}
	clear(ps)
	c.Consume(b)
	q.ctr.N[cTxCopied]++
	if pieces > 1 {
		q.ctr.N[cTxMultiBuf]++
	}
	q.count(n)
	return 1
}

// room reports whether the transmit ring has room for k more
// descriptors after those queued.
func (q *txQueue) room(k uint32) bool {
	return q.s.tx.free(q.queued+k) >= q.queued+k
}

// desc writes the descriptor of b's data, whose frame is the UMEM's.
func (q *txQueue) desc(b *buffer.Buf, options uint32) {
	frame := b.ID() - q.p.slab.First
	d := q.s.tx.desc(q.s.tx.local + q.queued)
	d.Addr = uint64(frame)*uint64(q.p.slab.Frame) + uint64(b.Headroom())
	d.Len = uint32(b.Len())
	d.Options = options
	q.queued++
	q.lentAt[frame/64] |= 1 << (frame % 64)
	q.lent++
}

func (q *txQueue) count(bytes int) {
	q.ctr.N[cTxPackets]++
	q.ctr.N[cTxBytes] += uint64(bytes)
}

// Flush implements port.Flusher: it asks the kernel to send the ring's
// frames when the kernel says it needs a system call to (in copy mode
// it always does; a zero-copy driver says so only when its queue
// stopped), then frees what was sent. While more packets come (more)
// it holds fewer than kickAt frames back, for at most holdMax. A kernel
// that stopped short (its completion ring full) gets a second kick once
// the completions are taken.
func (q *txQueue) Flush(c *buffer.Cache, more bool) (held bool, err error) {
	switch {
	case q.p.link.gone.Load():
		return false, q.p.downError("transmit")
	case q.p.link.down.Load():
		// What the ring holds waits for the link: a wakeup would only
		// fail with ENETDOWN. The first flush after it is up sends it.
		return false, nil
	case q.s.tx.local == q.s.tx.cons.Load():
		q.unsent, q.heldAt = 0, 0 // the kernel took everything
		q.complete(c)
		return false, nil
	}
	if more && q.unsent < kickAt {
		now := int64(time.Since(epoch))
		if q.heldAt == 0 {
			q.heldAt = now
		}
		if now-q.heldAt < int64(holdMax) {
			return true, nil
		}
	}
	q.unsent, q.heldAt = 0, 0
	return false, q.kick(c)
}

// kick wakes the kernel up to send.
func (q *txQueue) kick(c *buffer.Cache) error {
	tx := q.s.tx
	for try := 0; try < 2 && tx.local != tx.cons.Load() && tx.needWakeup(); try++ {
		e := q.s.kickTx()
		q.ctr.N[cTxCalls]++
		q.complete(c)
		switch e {
		case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS:
			// EAGAIN: the rest goes with the second kick or the next
			// burst; EBUSY: the device dropped a frame (it completes).
		case unix.ENETDOWN:
			return nil // the link is down: the ring waits for it
		case unix.ENXIO:
			return q.p.downError("transmit")
		default:
			return fmt.Errorf("afxdp %s: queue %d: transmit: %w", q.p.cfg.Name, q.s.queue, e)
		}
		if e != unix.EAGAIN {
			break
		}
	}
	q.ctr.Publish()
	return nil
}

// complete frees, in bulk, the frames the kernel is done sending.
func (q *txQueue) complete(c *buffer.Cache) {
	cr := q.s.comp
	avail := cr.ready(cr.size)
	if avail == 0 {
		return
	}
	k := 0
	for i := uint32(0); i < avail; i++ {
		frame := *cr.addr(cr.local + i) / uint64(q.p.slab.Frame)
		if frame >= uint64(q.p.frames) || q.lentAt[frame/64]&(1<<(frame%64)) == 0 {
			q.ctr.TxDrop(drop.DevHdr) // not a frame this queue sent: a kernel bug
			continue
		}
		q.lentAt[frame/64] &^= 1 << (frame % 64)
		q.lent--
		q.done[k] = q.p.pool.Buf(q.p.slab.First + uint32(frame))
		if k++; k == reapChunk {
			c.ConsumeBulk(q.done[:k])
			k = 0
		}
	}
	cr.release(avail)
	c.ConsumeBulk(q.done[:k])
	clear(q.done[:k])
	q.ctr.N[cLent] = uint64(q.lent)
}

func (q *txQueue) drop(c *buffer.Cache, b *buffer.Buf, r drop.Reason) {
	q.ctr.TxDrop(r)
	c.Drop(b, r)
}
