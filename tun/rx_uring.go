package tun

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/attach"
	"softnet.dev/internal/uring"
	"softnet.dev/port"
	"softnet.dev/vnet"
)

// RingBuffers is the most buffers of one class that one worker's
// io_uring lends the kernel for its RX queues: at most a quarter of the
// class's count, so that a pool sized for its workers (RingBuffers each,
// plus their bursts) never starves one worker for another's loans. It is
// per worker, whatever the number of queues the worker serves.
const RingBuffers = 256

// Operations in a ring's user data, in its low byte; above it, the
// member's slot (bits 8-23), its buffer group (bits 24-31) and, in the
// high 32 bits, the slot's generation, so that a late completion of a
// member that left is not taken for one of the slot's next member.
const (
	opRead uint64 = iota + 1
	opCancel
)

// closeWait bounds each wait for the kernel when a read is cancelled or
// a ring torn down, and closeTries the waits.
const (
	closeWait  = time.Second
	closeTries = 5
)

// rxRing is the io_uring of one worker's RX queues (seed 002's refill
// ring, one level up, as the kernel's per-CPU NAPI cache serves every
// device on its CPU): each member queue has a multishot read in flight
// that takes buffers from the ring's buffer group of its class, and the
// buffers are lent from the worker's cache. Memory lent to the kernel is
// per worker and class, not per queue, so an idle queue holds nothing.
//
// A completion is sorted into its member's FIFO by whichever member's
// Receive reaps it, and the member is notified (port.Notifier), so the
// worker polls only queues with packets.
type rxRing struct {
	cache  *buffer.Cache // the worker's: the ring's registry key
	ring   *uring.Ring
	efd    int  // signalled by the ring; every member's FD
	shared bool // in the registry, for every queue attached with cache

	groups []*bufGroup // by groupIndex; nil until a member needs it

	members   []*rxMember // by slot; nil where free
	gens      []uint32    // by slot
	freeSlots []uint16
	users     int
	rearm     []*rxMember // members whose read must be (re)armed
	err       error       // the ring failed: every member reports it
}

// bufGroup is a ring's provided buffers of one class.
type bufGroup struct {
	index  int // in rxRing.groups, and the kernel's buffer group id
	class  buffer.Class
	vnet   bool // reads land after the headroom less a vnet header
	br     *uring.BufRing
	lent   []*buffer.Buf // by buffer id; nil where not lent
	free   []uint16      // ids not lent
	spare  []*buffer.Buf
	queued int  // buffers read and still in members' FIFOs
	starve bool // a read ended for want of a buffer
}

// rxMember is one RX queue's place on a ring.
type rxMember struct {
	ring    *rxRing
	q       *rxQueue
	group   *bufGroup
	slot    uint16
	gen     uint32
	reading bool          // its multishot read is in flight
	waiting bool          // in ring.rearm
	fifo    []*buffer.Buf // packets read and not received; power-of-two length
	head, n int
	err     error
	notify  func()
}

// rings are the shared rings by worker cache: a queue that a worker
// attaches joins the ring of that worker's cache.
var rings = struct {
	sync.Mutex
	m map[*buffer.Cache]*rxRing
}{m: map[*buffer.Cache]*rxRing{}}

func newRxRing(c *buffer.Cache, single bool) (*rxRing, error) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	r, err := uring.New(uring.Options{Entries: 64, CQEntries: 4 * RingBuffers, SingleIssuer: single})
	if err != nil {
		unix.Close(efd)
		return nil, err
	}
	if err := r.RegisterEventfd(efd); err != nil {
		r.Close()
		unix.Close(efd)
		return nil, err
	}
	return &rxRing{cache: c, ring: r, efd: efd, groups: make([]*bufGroup, 2*c.Pool().NumClasses())}, nil
}

// groupIndex is the group of buffers of class whose reads land with or
// without a vnet header.
func groupIndex(class buffer.Class, vnetHdr bool) int {
	if vnetHdr {
		return 2*int(class) + 1
	}
	return 2 * int(class)
}

// group returns the ring's buffer group for q, set up on first use.
func (r *rxRing) group(q *rxQueue) (*bufGroup, error) {
	class := q.class
	gi := groupIndex(class, q.vnet)
	if g := r.groups[gi]; g != nil {
		return g, nil
	}
	n := 1
	for n*2 <= min(RingBuffers, r.cache.Pool().Config().Classes[class].Count/4) {
		n *= 2
	}
	br, err := r.ring.NewBufRing(uint16(gi), n)
	if err != nil {
		return nil, err
	}
	g := &bufGroup{index: gi, class: class, vnet: q.vnet, br: br, lent: make([]*buffer.Buf, n), spare: make([]*buffer.Buf, n), free: make([]uint16, n)}
	for i := range g.free {
		g.free[i] = uint16(n - 1 - i)
	}
	r.groups[gi] = g
	return g, nil
}

// join makes q a member, reading into buffers of its class.
func (r *rxRing) join(q *rxQueue) error {
	g, err := r.group(q)
	if err != nil {
		return err
	}
	m := &rxMember{ring: r, q: q, group: g, fifo: make([]*buffer.Buf, len(g.lent))}
	if k := len(r.freeSlots); k > 0 {
		m.slot, r.freeSlots = r.freeSlots[k-1], r.freeSlots[:k-1]
		r.members[m.slot] = m
	} else {
		if len(r.members) > 0xffff {
			return errors.New("io_uring: 65536 queues on one worker")
		}
		m.slot = uint16(len(r.members))
		r.members, r.gens = append(r.members, m), append(r.gens, 0)
	}
	m.gen = r.gens[m.slot]
	m.notify = q.notify
	r.users++
	r.wantRead(m)
	q.m = m
	return nil
}

func (m *rxMember) userData(op uint64) uint64 {
	return uint64(m.gen)<<32 | uint64(m.group.index)<<24 | uint64(m.slot)<<8 | op
}

// wantRead queues m's read for arming, and has the worker poll m, so
// that the read is armed at its next round even while other queues keep
// the worker from sleeping.
func (r *rxRing) wantRead(m *rxMember) {
	if !m.waiting && m.err == nil {
		m.waiting = true
		r.rearm = append(r.rearm, m)
		if m.notify != nil {
			m.notify()
		}
	}
}

// sqe returns a submission entry, submitting what is prepared if the
// queue is full.
func (r *rxRing) sqe() (*uring.SQE, error) {
	if e := r.ring.GetSQE(); e != nil {
		return e, nil
	}
	if _, err := r.ring.Submit(); err != nil {
		return nil, err
	}
	if e := r.ring.GetSQE(); e != nil {
		return e, nil
	}
	return nil, errors.New("io_uring: submission queue full after submitting")
}

// service does the ring's work for every member: lends buffers where the
// kernel runs short, arms reads, enters the kernel only if it has
// something to submit or completion work queued, and sorts completions
// into the members' FIFOs. An idle ring makes no system call.
func (r *rxRing) service(c *buffer.Cache) error {
	if r.err != nil {
		return r.err
	}
	for _, g := range r.groups {
		if g != nil {
			g.refill(c)
		}
	}
	if err := r.armReads(); err != nil {
		return r.fail(err)
	}
	if r.ring.Prepared() > 0 || r.ring.TaskWork() {
		if _, err := r.ring.Submit(); err != nil {
			return r.fail(err)
		}
	}
	if r.ring.Ready() > 0 {
		r.reap(c)
	}
	return nil
}

func (r *rxRing) fail(err error) error {
	r.err = fmt.Errorf("io_uring: %w", err)
	for _, m := range r.members {
		if m != nil && m.notify != nil {
			m.notify()
		}
	}
	return r.err
}

// armReads prepares the multishot read of every member waiting for one
// whose group has buffers in the kernel's ring.
func (r *rxRing) armReads() error {
	keep := r.rearm[:0]
	for _, m := range r.rearm {
		switch {
		case m.err != nil || m.q == nil:
			m.waiting = false
			continue
		case m.group.inRing() == 0:
			keep = append(keep, m)
			continue
		}
		e, err := r.sqe()
		if err != nil {
			return err
		}
		e.PrepReadMultishot(m.q.fd, false, m.group.br.Group(), m.userData(opRead))
		m.waiting, m.reading = false, true
	}
	clear(r.rearm[len(keep):])
	r.rearm = keep
	return nil
}

// inRing is the number of buffers in the kernel's ring.
func (g *bufGroup) inRing() int { return len(g.lent) - len(g.free) }

// refill lends the kernel buffers when its ring has run low, or when a
// read waits for one. Buffers read and not yet received count against
// the group's size, so that members' FIFOs never overflow and the kernel
// stops at the group's size, leaving packets in the device's queue.
func (g *bufGroup) refill(c *buffer.Cache) {
	k := len(g.free) - g.queued
	if k <= 0 || k < len(g.lent)/4 && g.inRing() > 0 && !g.starve {
		return
	}
	got := g.spare[:k]
	if c.GetBulk(got, g.class) != nil {
		got = g.spare[:0]
		for range k {
			b, err := c.Get(g.class)
			if err != nil {
				break
			}
			got = append(got, b)
		}
	}
	for i, b := range got {
		id := g.free[len(g.free)-1]
		g.free = g.free[:len(g.free)-1]
		g.lent[id] = b
		f := b.Frame()[readOff(b, g.vnet):]
		g.br.Add(unsafe.Pointer(&f[0]), uint32(len(f)), id)
		got[i] = nil
	}
	if len(got) > 0 {
		g.br.Publish()
		g.starve = false
	}
}

// readOff is where a read into b lands: with a vnet header, at the end of
// the headroom, so that the header sits right before the data.
func readOff(b *buffer.Buf, vnetHdr bool) int {
	if vnetHdr {
		return b.Headroom() - vnet.HeaderLen
	}
	return b.Headroom()
}

// take returns the buffer a completion names, no longer lent, or nil if
// the id is not lent.
func (g *bufGroup) take(id uint16) *buffer.Buf {
	if int(id) >= len(g.lent) {
		return nil
	}
	b := g.lent[id]
	if b != nil {
		g.lent[id] = nil
		g.free = append(g.free, id)
	}
	return b
}

// reap sorts every posted completion.
func (r *rxRing) reap(c *buffer.Cache) {
	ready := r.ring.Ready()
	for i := range ready {
		r.completion(c, r.ring.CQE(i))
	}
	r.ring.Seen(ready)
}

// completion handles one completion of a member's read: a packet into
// its FIFO, a drop, or the end of the read.
func (r *rxRing) completion(c *buffer.Cache, cqe *uring.CQE) {
	if cqe.UserData&0xff != opRead {
		return // a cancellation's own completion
	}
	slot, gen := uint16(cqe.UserData>>8), uint32(cqe.UserData>>32)
	var m *rxMember
	if int(slot) < len(r.members) && r.gens[slot] == gen {
		m = r.members[slot]
	}
	id, hasBuf := cqe.BufID()
	var b *buffer.Buf
	if hasBuf {
		if gi := int(cqe.UserData>>24) & 0xff; gi < len(r.groups) && r.groups[gi] != nil {
			b = r.groups[gi].take(id)
		}
	}
	if m == nil {
		// A member that left: its read was cancelled and this packet
		// arrived before the cancellation.
		if b != nil {
			c.Drop(b, drop.QueuePurge)
		}
		return
	}
	q := m.q
	if cqe.Flags&uring.CQEMore == 0 {
		m.reading = false
		r.wantRead(m)
	}
	switch {
	case hasBuf && b == nil:
		m.setErr(fmt.Errorf("tun %s: io_uring named buffer %d, which is not lent: %w", q.dev.info.Name, id, port.ErrDown))
	case cqe.Res < 0:
		if b != nil {
			c.Consume(b) // never filled
		}
		switch errno := unix.Errno(-cqe.Res); errno {
		case unix.ENOBUFS:
			// Every lent buffer is used: the packet stays queued in the
			// device, as when a read finds the pool empty, and the read
			// is armed again once buffers are lent.
			q.ctr.RxDrop(drop.NoMem)
			m.group.starve = true
		case unix.ECANCELED, unix.EINTR, unix.EAGAIN:
		default:
			m.setErr(q.downError(errno))
		}
	case b == nil:
	default:
		off := readOff(b, q.vnet)
		if ok, reason := q.accept(b, off, int(cqe.Res), len(b.Frame())-off); !ok {
			q.ctr.RxDrop(reason)
			c.Drop(b, reason)
			return
		}
		m.push(b)
	}
}

// push appends b to m's FIFO, which has room: the group lends no more
// than the FIFO holds.
func (m *rxMember) push(b *buffer.Buf) {
	m.fifo[(m.head+m.n)&(len(m.fifo)-1)] = b
	m.n++
	m.group.queued++
	q := m.q
	q.ctr.N[cRxPackets]++
	q.ctr.N[cRxBytes] += uint64(b.Len())
	if m.n == 1 && m.notify != nil {
		m.notify()
	}
}

// pop moves up to len(bufs) packets from m's FIFO into bufs.
func (m *rxMember) pop(bufs []*buffer.Buf) int {
	n := min(m.n, len(bufs))
	for i := range n {
		j := (m.head + i) & (len(m.fifo) - 1)
		bufs[i], m.fifo[j] = m.fifo[j], nil
	}
	m.head = (m.head + n) & (len(m.fifo) - 1)
	m.n -= n
	m.group.queued -= n
	return n
}

func (m *rxMember) setErr(err error) {
	if m.err == nil {
		m.err = err
		if m.notify != nil {
			m.notify()
		}
	}
}

// leave cancels m's read, drops what its FIFO holds (drop.QueuePurge)
// and frees its slot. Completions of the read that come later are
// purged by whichever member reaps them.
func (r *rxRing) leave(m *rxMember, c *buffer.Cache) error {
	var errs []error
	if m.reading && r.err == nil {
		if e, err := r.sqe(); err != nil {
			errs = append(errs, err)
		} else {
			e.PrepCancel(m.userData(opRead), 0, m.userData(opCancel))
		}
		for try := 0; m.reading && len(errs) == 0 && try < closeTries; try++ {
			if _, err := r.ring.SubmitAndWait(1, closeWait); err != nil {
				errs = append(errs, err)
				break
			}
			r.reap(c)
		}
		if m.reading && len(errs) == 0 {
			// The read may still take buffers of the group: its
			// completions are purged as they come.
			errs = append(errs, fmt.Errorf("io_uring read not cancelled after %v", closeTries*closeWait))
		}
	}
	q := m.q
	for m.n > 0 {
		var one [1]*buffer.Buf
		m.pop(one[:])
		q.ctr.RxDrop(drop.QueuePurge)
		c.Drop(one[0], drop.QueuePurge)
	}
	q.ctr.Publish()
	r.members[m.slot] = nil
	r.gens[m.slot]++
	r.freeSlots = append(r.freeSlots, m.slot)
	r.users--
	m.q, m.notify = nil, nil // armReads skips it if it waits
	q.m = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("io_uring: %w", err)
	}
	return nil
}

// close tears the ring down once no member is left: it takes back every
// lent buffer into c.
func (r *rxRing) close(c *buffer.Cache) error {
	var errs []error
	// Completions already posted go first: a departed member's packets
	// are purged, not mistaken for buffers never filled.
	if r.err == nil {
		if _, err := r.ring.Submit(); err != nil {
			errs = append(errs, err)
		}
		r.reap(c)
	}
	for _, g := range r.groups {
		if g == nil {
			continue
		}
		for id, b := range g.lent {
			if b != nil {
				g.lent[id] = nil
				g.free = append(g.free, uint16(id))
				c.Consume(b) // lent, never filled: not a lost packet
			}
		}
		if err := g.br.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := r.ring.Close(); err != nil {
		errs = append(errs, err)
	}
	unix.Close(r.efd)
	r.efd = -1
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("io_uring: %w", err)
	}
	return nil
}

// The engine attaches both kinds of queue on its workers' threads.
var (
	_ attach.Queue = (*rxQueue)(nil)
	_ attach.Queue = (*txQueue)(nil)
)

// Attach makes the queue a member of the io_uring of the worker whose
// cache c is, set up on the worker's thread as a single issuer
// (internal/attach.Queue).
func (q *rxQueue) Attach(c *buffer.Cache) {
	if !q.uring || q.m != nil {
		return
	}
	q.syncPool(c)
	rings.Lock()
	defer rings.Unlock()
	r := rings.m[c]
	if r == nil {
		var err error
		if r, err = newRxRing(c, true); err != nil {
			q.ringErr = fmt.Errorf("tun %s: io_uring: %w", q.dev.info.Name, err)
			return
		}
		r.shared = true
		rings.m[c] = r
	}
	if err := r.join(q); err != nil {
		q.ringErr = fmt.Errorf("tun %s: io_uring: %w", q.dev.info.Name, err)
		r.release(c)
	}
}

// Detach takes the queue off its worker's ring, on the worker's thread;
// the ring is torn down with its last member, giving back into c every
// buffer it lent.
func (q *rxQueue) Detach(c *buffer.Cache) {
	if q.m == nil {
		return
	}
	r := q.m.ring
	err := r.leave(q.m, c)
	rings.Lock()
	err = errors.Join(err, r.release(c))
	rings.Unlock()
	if err != nil && q.ringErr == nil {
		q.ringErr = fmt.Errorf("tun %s: %w", q.dev.info.Name, err)
	}
}

// release closes a ring that has no member left. rings is locked if the
// ring is shared.
func (r *rxRing) release(c *buffer.Cache) error {
	if r.users > 0 {
		return nil
	}
	if r.shared {
		delete(rings.m, r.cache)
	}
	return r.close(c)
}

// SetNotify is port.Notifier: the queue shares its FD with the other
// queues of its worker's ring, and notify tells the worker that
// completions another queue reaped left packets for this one.
func (q *rxQueue) SetNotify(notify func()) {
	q.notify = notify
	if q.m != nil {
		q.m.notify = notify
	}
}

// syncPool picks the class for c's pool and the device's max frame now.
func (q *rxQueue) syncPool(c *buffer.Cache) {
	if p, mf := c.Pool(), q.dev.link.maxFrame.Load(); p != q.pool || mf != q.maxFrame {
		q.setPool(p, mf)
	}
}

// member returns q's place on a ring: its worker's if attached, else a
// ring of its own, made on first use, which is not a single issuer. A
// queue whose class changed (the device's MTU did) moves to the group
// of its new class, since a short buffer would truncate what now
// arrives.
func (q *rxQueue) member(c *buffer.Cache) (*rxMember, error) {
	if q.ringErr != nil {
		return nil, q.ringErr
	}
	m := q.m
	if m != nil && m.group.class == q.class {
		return m, nil
	}
	if m == nil {
		r, err := newRxRing(c, false)
		if err != nil {
			return nil, fmt.Errorf("tun %s: io_uring: %w", q.dev.info.Name, err)
		}
		if err := r.join(q); err != nil {
			return nil, errors.Join(fmt.Errorf("tun %s: io_uring: %w", q.dev.info.Name, err), r.close(c))
		}
		return q.m, nil
	}
	r := m.ring
	if err := r.leave(m, c); err != nil {
		return nil, fmt.Errorf("tun %s: %w", q.dev.info.Name, err)
	}
	if err := r.join(q); err != nil {
		return nil, fmt.Errorf("tun %s: io_uring: %w", q.dev.info.Name, err)
	}
	return q.m, nil
}

// receiveUring is Receive on the io_uring path: the ring's work, then
// the packets the queue's FIFO holds, validated as they were reaped.
func (q *rxQueue) receiveUring(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	m, err := q.member(c)
	if err != nil {
		return 0, err
	}
	r := m.ring
	if !r.shared {
		r.cache = c
	}
	if err := r.service(c); err != nil {
		return 0, fmt.Errorf("tun %s: %w", q.dev.info.Name, err)
	}
	n := m.pop(bufs)
	// Nothing lent and nothing read: the pool is empty, and packets wait
	// in the kernel, as when a read finds no buffer.
	q.starved = n == 0 && !m.reading && m.group.inRing() == 0
	if m.waiting && m.notify != nil {
		// The read is not armed yet (no buffer to lend): poll again next
		// round, when buffers may be back.
		m.notify()
	}
	q.ctr.Publish()
	if n == 0 && m.err != nil {
		return 0, m.err
	}
	return n, nil
}

// armUring reports packets pending if the queue's FIFO has some, if
// completions wait to be reaped, or if a read waits for buffers (then
// the worker's next round lends them, and an empty pool makes it wait
// for buffers, not sleep). On a DEFER_TASKRUN ring, reads done by the
// kernel become completions only when the ring's thread enters it:
// entering runs them, and any later one signals the eventfd the worker
// sleeps on, which is reset first so that none is missed.
func (q *rxQueue) armUring() bool {
	m := q.m
	if m == nil {
		return false
	}
	r := m.ring
	if m.n > 0 || m.err != nil || r.err != nil || len(r.rearm) > 0 {
		return true
	}
	var cnt [8]byte
	_, _ = unix.Read(r.efd, cnt[:])
	if r.ring.Prepared() > 0 || r.ring.TaskWork() {
		if _, err := r.ring.Submit(); err != nil {
			return true // Receive reports it
		}
	}
	return r.ring.Ready() > 0
}

// leaveUring moves the queue to the system-call path for good, taking
// back what its ring lent: Queue.Read reads the file itself, and a
// multishot read armed on it would take its packets.
func (q *rxQueue) leaveUring() error {
	if !q.uring {
		return nil
	}
	q.uring = false
	return q.closeRing(nil)
}

// closeRing takes the queue off a ring of its own and tears it down,
// into c or a cache of the pool made for the purpose. A queue still on
// its worker's ring is left to Detach, on the worker's thread.
func (q *rxQueue) closeRing(c *buffer.Cache) error {
	m := q.m
	if m == nil {
		return nil
	}
	if m.ring.shared {
		return fmt.Errorf("rx queue still attached to a worker's io_uring")
	}
	return withCache(c, q.pool, func(c *buffer.Cache) error {
		r := m.ring
		return errors.Join(r.leave(m, c), r.release(c))
	})
}
