package tun

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/uring"
	"softnet.dev/vnet"
)

// txEntries is a TX ring's submission queue size: the writes one
// io_uring_enter submits at most.
const txEntries = 256

// txUring is a TX queue's io_uring state: the writes of a burst are
// prepared as SQEs and submitted with one io_uring_enter, which also
// reaps them (a TUN write completes inline). Each write's buffers stay in
// held until its completion says whether they were sent.
type txUring struct {
	ring   *uring.Ring
	pool   *buffer.Pool
	slots  []txSlot // by user data
	free   []uint16 // slots not in flight
	held   []*buffer.Buf
	iovs   []unix.Iovec // of the writes not yet submitted
	hdrs   []byte       // GRO headers, vnet.GROHeaderRoom per slot
	err    error
	single bool
	// stuck is set once writes did not complete within a flush's wait:
	// their buffers stay with the kernel, so their slots cannot be
	// reused, and every later Transmit fails with it.
	stuck error
	// stall, a test's hook, stands for a kernel that never completes a
	// write: waits submit nothing and return at once.
	stall bool
}

// txSlot is one write in flight.
type txSlot struct {
	first, count int // its buffers, in held
	bytes        int // after the vnet header
	gso, run     bool
}

func newTxUring() *txUring {
	u := &txUring{
		slots: make([]txSlot, txEntries),
		free:  make([]uint16, txEntries),
		held:  make([]*buffer.Buf, 0, txEntries*4),
		iovs:  make([]unix.Iovec, 0, 2*txEntries),
		hdrs:  make([]byte, txEntries*vnet.GROHeaderRoom),
	}
	for i := range u.free {
		u.free[i] = uint16(txEntries - 1 - i)
	}
	return u
}

func (u *txUring) setup(q *txQueue, c *buffer.Cache, single bool) error {
	r, err := uring.New(uring.Options{Entries: txEntries, SingleIssuer: single})
	if err != nil {
		return err
	}
	if err := r.RegisterFiles([]int{q.fd}); err != nil {
		r.Close()
		return err
	}
	u.ring, u.single, u.pool = r, single, c.Pool()
	return nil
}

// Attach sets the queue's ring up on the worker's thread, as a single
// issuer (internal/attach.Queue).
func (q *txQueue) Attach(c *buffer.Cache) {
	if u := q.ur; u != nil && u.ring == nil {
		u.err = u.setup(q, c, true)
	}
}

// Detach completes or cancels the writes in flight and tears the ring
// down, on the thread that set it up.
func (q *txQueue) Detach(c *buffer.Cache) {
	if q.ur != nil {
		if err := q.ur.close(q, c); err != nil {
			q.ur.err = err
		}
	}
}

// dropOne drops a packet that was to be gathered.
func (q *txQueue) dropOne(c *buffer.Cache, b *buffer.Buf, reason drop.Reason) {
	q.ctr.TxDrop(reason)
	c.Drop(b, reason)
}

// queueOne gathers the write of one packet, or sends it through the
// system-call path if it needs work in software first.
func (q *txQueue) queueOne(c *buffer.Cache, b *buffer.Buf) (int, error) {
	if b.Flags()&FlagVnetHdr == 0 {
		return q.queueWrite(c, b, b.Bytes(), q.hdr, false)
	}
	head := b.Headroom()
	if head < vnet.HeaderLen {
		return sentOf(q.done(c, b, failed(drop.DevHdr)))
	}
	frame := b.Frame()
	h, _ := vnet.Decode(frame[head-vnet.HeaderLen : head])
	if need := q.needs(h, b.Bytes()); q.vnet && q.offloads&need == need {
		return q.queueWrite(c, b, frame[head-vnet.HeaderLen:head+b.Len()], hdrInline, h.IsGSO())
	}
	s, err := q.ur.flush(q, c)
	if err != nil {
		q.dropOne(c, b, drop.DevReady)
		return s, err
	}
	s2, err := sentOf(q.sendMarked(c, b))
	return s + s2, err
}

func sentOf(ok bool, err error) (int, error) {
	if ok {
		return 1, err
	}
	return 0, err
}

// room makes room for one more write of iovs iovecs, flushing if needed.
func (u *txUring) room(q *txQueue, c *buffer.Cache, iovs int) (int, error) {
	if u.hasRoom(iovs) {
		return 0, nil
	}
	sent, err := u.flush(q, c)
	if err == nil && !u.hasRoom(iovs) {
		err = fmt.Errorf("io_uring: no room for a write after a flush (%d in flight)", u.inFlight())
	}
	return sent, err
}

func (u *txUring) hasRoom(iovs int) bool {
	return len(u.free) > 0 && u.ring.SQSpace() > 0 && len(u.iovs)+iovs <= cap(u.iovs)
}

// slot takes a free slot for a write of bufs.
func (u *txUring) slot(bytes int, gso, run bool, bufs ...*buffer.Buf) uint16 {
	id := u.free[len(u.free)-1]
	u.free = u.free[:len(u.free)-1]
	u.slots[id] = txSlot{first: len(u.held), count: len(bufs), bytes: bytes, gso: gso, run: run}
	u.held = append(u.held, bufs...)
	return id
}

// queueWrite gathers the write of p, b's packet with its header as mode
// says.
func (q *txQueue) queueWrite(c *buffer.Cache, b *buffer.Buf, p []byte, mode hdrMode, gso bool) (int, error) {
	n := len(p)
	if mode == hdrInline {
		n -= vnet.HeaderLen
	}
	if res, ok := q.checkSize(n); !ok {
		return sentOf(q.done(c, b, res))
	}
	u := q.ur
	s, err := u.room(q, c, 2)
	if err != nil {
		q.dropOne(c, b, drop.DevReady)
		return s, err
	}
	id := u.slot(n, gso, false, b)
	e := u.ring.GetSQE()
	if mode == hdrZero {
		k := len(u.iovs)
		u.iovs = append(u.iovs, unix.Iovec{Base: &q.zero[0]}, unix.Iovec{Base: &p[0]})
		u.iovs[k].SetLen(len(q.zero))
		u.iovs[k+1].SetLen(len(p))
		e.PrepWritev(0, true, u.iovs[k:k+2], uint64(id))
	} else {
		e.PrepWrite(0, true, unsafe.Pointer(&p[0]), len(p), uint64(id))
	}
	return s, nil
}

// queueRun gathers the write of the GSO packet GRO planned for the run
// led by bufs[i]: its merged headers and every packet's payload.
func (q *txQueue) queueRun(c *buffer.Cache, bufs []*buffer.Buf, i int) (int, error) {
	g, u := q.gro, q.ur
	n := 0
	for j := i; j >= 0; j = g.plan.GRONext(j) {
		n++
	}
	s, err := u.room(q, c, 1+n)
	if err != nil {
		q.dropRun(c, bufs, i, n, true, drop.DevReady)
		return s, err
	}
	id := u.free[len(u.free)-1]
	hdr := g.plan.GROHeaders(i, bufs[i].Bytes(), u.hdrs[int(id)*vnet.GROHeaderRoom:(int(id)+1)*vnet.GROHeaderRoom])
	k := len(u.iovs)
	u.iovs = append(u.iovs, unix.Iovec{Base: &hdr[0]})
	u.iovs[k].SetLen(len(hdr))
	size := len(hdr) - vnet.HeaderLen
	first := len(u.held)
	for j := i; j >= 0; j = g.plan.GRONext(j) {
		p := g.plan.GROPayload(j, bufs[j].Bytes())
		u.iovs = append(u.iovs, unix.Iovec{Base: &p[0]})
		u.iovs[len(u.iovs)-1].SetLen(len(p))
		size += len(p)
		u.held = append(u.held, bufs[j])
	}
	if res, ok := q.checkSize(size); !ok {
		clear(u.iovs[k:])
		u.iovs = u.iovs[:k]
		clear(u.held[first:])
		u.held = u.held[:first]
		q.dropRun(c, bufs, i, n, true, res.reason)
		return s, nil
	}
	u.free = u.free[:len(u.free)-1]
	u.slots[id] = txSlot{first: first, count: n, bytes: size, run: true}
	u.ring.GetSQE().PrepWritev(0, true, u.iovs[k:], uint64(id))
	return s, nil
}

// inFlight is the number of writes submitted or gathered and not
// completed.
func (u *txUring) inFlight() int { return len(u.slots) - len(u.free) }

// flush submits the gathered writes and waits for every write in flight
// to complete, freeing or dropping their buffers. It returns the packets
// sent and an error if the device is gone, or if writes did not
// complete within closeTries×closeWait: the queue is then stuck (see
// txUring.stuck).
func (u *txUring) flush(q *txQueue, c *buffer.Cache) (int, error) {
	if u.stuck != nil {
		return 0, u.stuck
	}
	sent, err := u.settle(q, c)
	if n := u.inFlight(); n > 0 && err == nil {
		u.stuck = fmt.Errorf("io_uring: %d writes not completed within %v; their buffers stay with the kernel", n, closeTries*closeWait)
		err = u.stuck
	}
	return sent, err
}

// settle submits the gathered writes and waits (closeWait at a time,
// closeTries times at most) for every write in flight to complete,
// freeing or dropping their buffers. It returns the packets sent and an
// error if the device is gone.
func (u *txUring) settle(q *txQueue, c *buffer.Cache) (int, error) {
	sent := 0
	var down error
	for try := 0; u.inFlight() > 0 && try < closeTries; try++ {
		want := uint32(u.inFlight())
		err := u.wait(want)
		clear(u.iovs) // the kernel copied them (IORING_FEAT_SUBMIT_STABLE)
		u.iovs = u.iovs[:0]
		if err != nil {
			return sent, err
		}
		ready := u.ring.Ready()
		for i := range ready {
			s, err := u.complete(q, c, u.ring.CQE(i))
			sent += s
			if down == nil {
				down = err
			}
		}
		u.ring.Seen(ready)
		if ready == want {
			break
		}
	}
	if u.inFlight() == 0 {
		u.held = u.held[:0]
	}
	return sent, down
}

// wait submits what is gathered and waits for want completions, or
// closeWait.
func (u *txUring) wait(want uint32) error {
	if u.stall {
		return nil
	}
	_, err := u.ring.SubmitAndWait(want, closeWait)
	return err
}

// complete settles one write: its buffers are freed if it was written
// and dropped with the reason its error maps to (as the system-call
// path's) if not.
func (u *txUring) complete(q *txQueue, c *buffer.Cache, cqe *uring.CQE) (int, error) {
	if cqe.UserData >= uint64(len(u.slots)) {
		return 0, nil // a cancellation's own completion
	}
	id := uint16(cqe.UserData)
	s := u.slots[id]
	u.free = append(u.free, id)
	bufs := u.held[s.first : s.first+s.count]
	defer clear(bufs)
	if cqe.Res >= 0 {
		q.ctr.N[cTxPackets]++
		q.ctr.N[cTxBytes] += uint64(s.bytes)
		if s.run {
			q.ctr.N[cCoalesced]++
			q.ctr.N[cCoalescedSegs] += uint64(s.count)
		}
		if s.gso {
			q.ctr.N[cGSOOut]++
		}
		c.ConsumeBulk(bufs)
		return s.count, nil
	}
	errno := unix.Errno(-cqe.Res)
	res := errnoResult(errno)
	if errno == unix.ECANCELED {
		res = failed(drop.QueuePurge)
	}
	for _, b := range bufs {
		q.ctr.TxDrop(res.reason)
		c.Drop(b, res.reason)
	}
	if res.down != 0 {
		return 0, res.down
	}
	return 0, nil
}

// close completes what is in flight, cancelling what does not complete,
// and tears the ring down.
func (u *txUring) close(q *txQueue, c *buffer.Cache) error {
	if u.ring == nil {
		return nil
	}
	var errs []error
	if _, err := u.settle(q, c); err != nil && !errors.As(err, new(unix.Errno)) {
		errs = append(errs, err)
	}
	if u.inFlight() > 0 {
		if e := u.ring.GetSQE(); e != nil {
			e.PrepCancel(0, uring.CancelAny|uring.CancelAll, txEntries)
		}
		if _, err := u.settle(q, c); err != nil && !errors.As(err, new(unix.Errno)) {
			errs = append(errs, err)
		}
	}
	if n := u.inFlight(); n > 0 {
		errs = append(errs, fmt.Errorf("%d writes still in flight after cancelling; their buffers stay lent", n))
	} else {
		// The device's file now, not when the kernel gets round to
		// freeing the closed ring (after an RCU grace period): while
		// the ring holds it, closing the device's last queue does not
		// remove the device. Should this fail, the ring's teardown
		// still lets it go.
		_ = u.ring.UnregisterFiles()
	}
	if err := u.ring.Close(); err != nil {
		errs = append(errs, err)
	}
	u.ring = nil
	q.ctr.Publish()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("io_uring: %w", err)
	}
	return nil
}
