package memport

import (
	"errors"
	"fmt"
	"runtime"
	"softnet.dev/internal/cacheline"
	"sync"
	"sync/atomic"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/ring"
)

// Pair defaults.
const (
	DefaultRingSize = 1024
	DefaultMaxFrame = 65535
)

// PairConfig configures a Pair. The zero value is one queue with rings of
// DefaultRingSize and frames up to DefaultMaxFrame, reported as packet.L2
// (the zero Layer).
type PairConfig struct {
	Queues   int          // queues per end (default 1)
	RingSize int          // per direction and queue, a power of two (default DefaultRingSize)
	Layer    packet.Layer // what Info reports; the pair itself carries any bytes
	MaxFrame int          // longer packets are dropped with drop.PktTooBig (default DefaultMaxFrame)
}

// PairStats count one end's traffic. Drops are of packets this end was
// given to transmit.
type PairStats struct {
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	FullRing  uint64 `json:"full_ring"` // the ring toward the peer was full
	TooBig    uint64 `json:"too_big"`   // longer than MaxFrame
	Down      uint64 `json:"down"`      // this end or the peer was down or closed
}

// Port state bits.
const (
	stateDown uint32 = 1 << iota
	stateClosed
)

// PairPort is one end of an in-process veth pair. What its TxQueue(i)
// transmits, its peer's RxQueue(i) receives: the buffer pointers move
// through an SPSC ring, with their ownership and without a copy. The
// buffers keep the cache that allocated them as their owner, so whoever
// finally frees them does a deferred remote free to it, as a kernel veth
// frees a peer's skb.
//
// Each queue belongs to one worker at a time; SetDown and Stats may be
// called from anywhere.
type PairPort struct {
	info  port.Info
	peer  *PairPort
	rx    []pairRx
	tx    []pairTx
	state atomic.Uint32

	closeMu sync.Mutex
	closed  bool
}

var (
	_ port.Port    = (*PairPort)(nil)
	_ port.RxQueue = (*pairRx)(nil)
	_ port.TxQueue = (*pairTx)(nil)
)

// pairRx is a receive queue: the consumer end of the ring from the peer's
// transmit queue of the same index.
type pairRx struct {
	_    cacheline.Pad
	port *PairPort
	ring *ring.SPSC[*buffer.Buf]
	fd   int

	// Written by both sides: the receiver arms, the transmitter clears
	// armed to claim the wakeup, busy brackets a transmit so that Close
	// can wait it out.
	_     cacheline.Pad
	armed atomic.Bool
	busy  atomic.Bool

	// The receiving worker's.
	_     cacheline.Pad
	rbuf  [8]byte
	ctr   struct{ packets, bytes uint64 }
	pubRx struct{ packets, bytes atomic.Uint64 }
	_     cacheline.Pad
}

// pairTx is a transmit queue: the producer end of a ring into the peer.
type pairTx struct {
	_     cacheline.Pad
	port  *PairPort
	dst   *pairRx
	ctr   PairStats // the Tx and drop fields
	pubTx [5]atomic.Uint64
	_     cacheline.Pad
}

// NewPair returns the two ends of a pair, named a and b.
func NewPair(a, b string, cfg PairConfig) (*PairPort, *PairPort, error) {
	fail := func(format string, args ...any) (*PairPort, *PairPort, error) {
		return nil, nil, fmt.Errorf("memport: pair %s/%s: "+format, append([]any{a, b}, args...)...)
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if cfg.RingSize == 0 {
		cfg.RingSize = DefaultRingSize
	}
	if cfg.MaxFrame == 0 {
		cfg.MaxFrame = DefaultMaxFrame
	}
	switch {
	case cfg.Queues < 1 || cfg.Queues > maxQueues:
		return fail("%d queues, want 1 to %d", cfg.Queues, maxQueues)
	case cfg.Layer != packet.L2 && cfg.Layer != packet.L3:
		return fail("unknown layer %d", cfg.Layer)
	case cfg.MaxFrame < 1 || cfg.MaxFrame > 1<<20:
		return fail("max frame %d outside [1, %d]", cfg.MaxFrame, 1<<20)
	}
	ends := [2]*PairPort{}
	for i, name := range []string{a, b} {
		ends[i] = &PairPort{
			info: port.Info{Name: name, Layer: cfg.Layer, Queues: cfg.Queues, MaxFrame: cfg.MaxFrame},
			rx:   make([]pairRx, cfg.Queues),
			tx:   make([]pairTx, cfg.Queues),
		}
	}
	var fds []int
	closeAll := func() {
		for _, fd := range fds {
			closeFD(fd)
		}
	}
	for i, p := range ends {
		p.peer = ends[1-i]
		for q := range p.rx {
			r, err := ring.NewSPSC[*buffer.Buf](cfg.RingSize)
			if err != nil {
				closeAll()
				return fail("%w", err)
			}
			fd, err := newEventFD()
			if err != nil {
				closeAll()
				return fail("%s queue %d: %w", p.info.Name, q, err)
			}
			fds = append(fds, fd)
			p.rx[q].port, p.rx[q].ring, p.rx[q].fd = p, r, fd
		}
	}
	for i, p := range ends {
		for q := range p.tx {
			p.tx[q].port, p.tx[q].dst = p, &ends[1-i].rx[q]
		}
	}
	return ends[0], ends[1], nil
}

// Info describes this end.
func (p *PairPort) Info() port.Info { return p.info }

// Peer returns the other end.
func (p *PairPort) Peer() *PairPort { return p.peer }

// RxQueue returns receive queue i, or nil if there is no such queue.
func (p *PairPort) RxQueue(i int) port.RxQueue {
	if i < 0 || i >= len(p.rx) {
		return nil
	}
	return &p.rx[i]
}

// TxQueue returns transmit queue i, or nil if there is no such queue.
func (p *PairPort) TxQueue(i int) port.TxQueue {
	if i < 0 || i >= len(p.tx) {
		return nil
	}
	return &p.tx[i]
}

// SetDown sets this end down or up. While it is down its Receive and
// Transmit return port.ErrDown (Transmit dropping what it was given with
// drop.DevReady), and the peer's transmits toward it are dropped with
// drop.DevReady, as for a veth whose peer has no carrier. Packets already
// in its rings stay there.
func (p *PairPort) SetDown(down bool) {
	if down {
		p.state.Or(stateDown)
	} else {
		p.state.And(^stateDown)
	}
}

// Stats returns this end's counters, as of each queue's last burst. Safe
// from any goroutine.
func (p *PairPort) Stats() PairStats {
	var s PairStats
	for i := range p.rx {
		s.RxPackets += p.rx[i].pubRx.packets.Load()
		s.RxBytes += p.rx[i].pubRx.bytes.Load()
	}
	for i := range p.tx {
		f := &p.tx[i].pubTx
		s.TxPackets += f[0].Load()
		s.TxBytes += f[1].Load()
		s.FullRing += f[2].Load()
		s.TooBig += f[3].Load()
		s.Down += f[4].Load()
	}
	return s
}

// CloseInto closes this end: from then on its queues return port.ErrDown and
// the peer's transmits toward it fail with port.ErrDown too. Buffers
// still in the rings this end receives from are dropped into c with
// drop.QueuePurge (the peer's Close does the same for the other
// direction), and the eventfds are closed. The workers of this end must
// have stopped; a peer transmit in progress is waited for. Idempotent.
func (p *PairPort) CloseInto(c *buffer.Cache) error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.state.Or(stateClosed)
	var errs []error
	var burst [64]*buffer.Buf
	for i := range p.rx {
		q := &p.rx[i]
		// A peer transmitter that saw the port open before the store
		// above is still inside Transmit: let it finish its enqueue and
		// its eventfd write.
		for q.busy.Load() {
			runtime.Gosched()
		}
		if c == nil {
			if n := q.ring.Len(); n > 0 {
				errs = append(errs, fmt.Errorf("queue %d: %d buffers queued and no cache to drop them into", i, n))
			}
		} else {
			for n := q.ring.DequeueBurst(burst[:]); n > 0; n = q.ring.DequeueBurst(burst[:]) {
				c.DropBulk(burst[:n], drop.QueuePurge)
			}
		}
		if err := closeFD(q.fd); err != nil {
			errs = append(errs, fmt.Errorf("queue %d: %w", i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("memport: pair %s: close: %w", p.info.Name, err)
	}
	return nil
}

// Receive takes up to len(bufs) packets the peer transmitted on this
// queue. c is not used: the buffers arrive allocated.
func (q *pairRx) Receive(_ *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	if q.port.state.Load() != 0 {
		return 0, port.ErrDown
	}
	n := q.ring.DequeueBurst(bufs)
	if n == 0 {
		return 0, nil
	}
	var bytes uint64
	for _, b := range bufs[:n] {
		bytes += uint64(b.Len())
	}
	q.ctr.packets += uint64(n)
	q.ctr.bytes += bytes
	q.pubRx.packets.Store(q.ctr.packets)
	q.pubRx.bytes.Store(q.ctr.bytes)
	return n, nil
}

// FD returns the queue's eventfd, or -1 once the port is closed.
func (q *pairRx) FD() int {
	if q.port.state.Load()&stateClosed != 0 {
		return -1
	}
	return q.fd
}

// Arm asks the peer's transmitter to write the eventfd at its next
// enqueue, and reports whether packets are already waiting. The flag is
// set before the ring is checked, and the transmitter checks it after
// enqueueing, so one of the two always sees the other: no wakeup is lost.
func (q *pairRx) Arm() bool {
	if q.port.state.Load()&stateClosed != 0 {
		return false
	}
	q.armed.Store(true)
	return q.ring.Len() > 0
}

// Disarm withdraws the request and resets the eventfd.
func (q *pairRx) Disarm() {
	if q.port.state.Load()&stateClosed != 0 {
		return // the fd is closed, and its number may be reused
	}
	q.armed.Store(false)
	resetFD(q.fd, &q.rbuf)
}

// Transmit moves bufs into the ring toward the peer's receive queue of the
// same index, dropping into c (with a reason) what it cannot move: packets
// longer than MaxFrame (drop.PktTooBig), the part of the burst that does
// not fit the ring (drop.FullRing), everything while either end is down
// (drop.DevReady). It may reorder bufs' entries; it returns the number
// sent, which were the first that many of bufs as it leaves them.
func (q *pairTx) Transmit(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	p := q.port
	if p.state.Load() != 0 {
		q.dropAll(c, bufs)
		return 0, port.ErrDown
	}
	var bytes uint64
	n := 0
	for _, b := range bufs {
		if b == nil || b.Len() > p.info.MaxFrame {
			if b != nil {
				q.ctr.TooBig++
			}
			c.Drop(b, drop.PktTooBig) // nil: counted by the cache as a misuse
			continue
		}
		bytes += uint64(b.Len())
		bufs[n] = b
		n++
	}
	dst := q.dst
	dst.busy.Store(true)
	if st := dst.port.state.Load(); st != 0 {
		dst.busy.Store(false)
		q.dropAll(c, bufs[:n])
		if st&stateClosed != 0 {
			return 0, port.ErrDown
		}
		return 0, nil
	}
	k := dst.ring.EnqueueBurst(bufs[:n])
	// bufs[:k] belong to the peer now: read nothing of them.
	if k < n {
		for _, b := range bufs[k:n] {
			bytes -= uint64(b.Len())
		}
		c.DropBulk(bufs[k:n], drop.FullRing)
		q.ctr.FullRing += uint64(n - k)
	}
	if k > 0 && dst.armed.Load() && dst.armed.CompareAndSwap(true, false) {
		signalFD(dst.fd)
	}
	dst.busy.Store(false)
	q.ctr.TxPackets += uint64(k)
	q.ctr.TxBytes += bytes
	q.publish()
	return k, nil
}

// dropAll drops a burst that meets a down port.
func (q *pairTx) dropAll(c *buffer.Cache, bufs []*buffer.Buf) {
	c.DropBulk(bufs, drop.DevReady)
	q.ctr.Down += uint64(len(bufs))
	q.publish()
}

func (q *pairTx) publish() {
	for i, v := range [...]uint64{q.ctr.TxPackets, q.ctr.TxBytes, q.ctr.FullRing, q.ctr.TooBig, q.ctr.Down} {
		if q.pubTx[i].Load() != v {
			q.pubTx[i].Store(v)
		}
	}
}
