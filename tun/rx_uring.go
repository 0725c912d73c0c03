package tun

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/uring"
	"softnet.dev/port"
	"softnet.dev/vnet"
)

// User data of an RX ring's requests.
const (
	udRead uint64 = iota + 1
	udCancel
)

// maxLent bounds the buffers one RX queue lends the kernel: the burst a
// multishot read can complete between two rounds.
const maxLent = 256

// closeWait bounds each wait for the kernel when a ring is torn down, and
// closeTries the waits.
const (
	closeWait  = time.Second
	closeTries = 5
)

// rxUring is an RX queue's io_uring state: a multishot read of the
// queue's file into a provided-buffer ring whose buffers are lent from
// the polling worker's cache (seed 002's refill ring). Every lent buffer
// is in lent until a completion names it or the ring is torn down.
type rxUring struct {
	ring   *uring.Ring
	br     *uring.BufRing
	efd    int           // signalled by the ring; the queue's FD
	lent   []*buffer.Buf // by buffer id; nil where not lent
	free   []uint16      // ids not lent
	spare  []*buffer.Buf
	class  buffer.Class
	armed  bool // the multishot read is in flight
	err    error
	single bool // set up by Attach, on the worker's locked thread
}

// setup sets up the ring on the calling thread.
func (u *rxUring) setup(q *rxQueue, c *buffer.Cache, single bool) error {
	if p := c.Pool(); p != q.pool {
		q.setPool(p, q.dev.link.maxFrame.Load())
	}
	u.class = q.class
	n := 1
	for n*2 <= min(maxLent, q.pool.Config().Classes[q.class].Count/4) {
		n *= 2
	}
	r, err := uring.New(uring.Options{Entries: 8, CQEntries: uint32(max(16, 2*n)), SingleIssuer: single})
	if err != nil {
		return err
	}
	fail := func(err error) error {
		r.Close()
		return err
	}
	if err := r.RegisterFiles([]int{q.fd}); err != nil {
		return fail(err)
	}
	if err := r.RegisterEventfd(u.efd); err != nil {
		return fail(err)
	}
	if u.br, err = r.NewBufRing(0, n); err != nil {
		return fail(err)
	}
	u.ring, u.single = r, single
	u.lent = make([]*buffer.Buf, n)
	u.spare = make([]*buffer.Buf, n)
	u.free = make([]uint16, n)
	for i := range u.free {
		u.free[i] = uint16(n - 1 - i)
	}
	return nil
}

// Attach sets the queue's ring up on the worker's thread, as a single
// issuer (port.Attacher).
func (q *rxQueue) Attach(c *buffer.Cache) {
	if u := q.ur; u != nil && u.ring == nil {
		u.err = u.setup(q, c, true)
	}
}

// Detach takes back every lent buffer into c and tears the ring down, on
// the thread that set it up.
func (q *rxQueue) Detach(c *buffer.Cache) {
	if q.ur != nil {
		if err := q.ur.close(q, c); err != nil {
			q.ur.err = err
		}
	}
}

// readOff is where a read into b lands: with a vnet header, at the end of
// the headroom, so that the header sits right before the data.
func (q *rxQueue) readOff(b *buffer.Buf) int {
	if q.vnet {
		return b.Headroom() - vnet.HeaderLen
	}
	return b.Headroom()
}

// refill lends the kernel as many buffers as fit in the ring.
func (u *rxUring) refill(q *rxQueue, c *buffer.Cache) {
	k := len(u.free)
	if k == 0 {
		return
	}
	got := u.spare[:k]
	if c.GetBulk(got, u.class) != nil {
		got = u.spare[:0]
		for range k {
			b, err := c.Get(u.class)
			if err != nil {
				break
			}
			got = append(got, b)
		}
	}
	for i, b := range got {
		id := u.free[len(u.free)-1]
		u.free = u.free[:len(u.free)-1]
		u.lent[id] = b
		f := b.Frame()[q.readOff(b):]
		u.br.Add(unsafe.Pointer(&f[0]), uint32(len(f)), id)
		got[i] = nil
	}
	if len(got) > 0 {
		u.br.Publish()
	}
}

// take returns the buffer a completion names, no longer lent.
func (u *rxUring) take(id uint16) *buffer.Buf {
	if int(id) >= len(u.lent) {
		return nil
	}
	b := u.lent[id]
	if b != nil {
		u.lent[id] = nil
		u.free = append(u.free, id)
	}
	return b
}

// receiveUring is Receive on the io_uring path: one io_uring_enter
// submits the (re-)armed read and runs the kernel's pending reads, and
// every completion is a packet in a lent buffer, validated as a read's.
func (q *rxQueue) receiveUring(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	u := q.ur
	if u.ring != nil && u.class != q.class {
		// The device's max frame changed (its MTU): the lent buffers may
		// be too short for what now arrives, and a short buffer would
		// truncate the packet. Lend new ones.
		single := u.single
		if err := u.close(q, c); err != nil {
			return 0, fmt.Errorf("tun %s: %w", q.dev.info.Name, err)
		}
		if err := u.setup(q, c, single); err != nil {
			return 0, fmt.Errorf("tun %s: io_uring: %w", q.dev.info.Name, err)
		}
	}
	if u.ring == nil {
		if err := u.setup(q, c, false); err != nil {
			return 0, fmt.Errorf("tun %s: io_uring: %w", q.dev.info.Name, err)
		}
	}
	u.refill(q, c)
	if q.starved = len(u.free) == len(u.lent); q.starved {
		// Nothing lent: the pool is empty, and packets wait in the
		// kernel, as when a read finds no buffer.
		q.ctr.rxDrop(drop.NoMem)
	}
	if !u.armed && len(u.free) < len(u.lent) {
		u.ring.GetSQE().PrepReadMultishot(0, true, u.br.Group(), udRead)
		u.armed = true
	}
	if _, err := u.ring.Submit(); err != nil {
		return 0, fmt.Errorf("tun %s: %w", q.dev.info.Name, err)
	}
	n, seen := 0, uint32(0)
	var err error
	for ready := u.ring.Ready(); seen < ready && n < len(bufs) && err == nil; seen++ {
		cqe := u.ring.CQE(seen)
		if cqe.UserData != udRead {
			continue // a cancellation's own completion
		}
		var b *buffer.Buf
		if b, err = u.completion(q, c, cqe); b != nil {
			bufs[n] = b
			n++
			q.ctr.n[cRxPackets]++
			q.ctr.n[cRxBytes] += uint64(b.Len())
		}
	}
	u.ring.Seen(seen)
	q.ctr.publish()
	return n, err
}

// completion handles one completion of the read: the packet, if valid,
// or an error if the device is gone.
func (u *rxUring) completion(q *rxQueue, c *buffer.Cache, cqe *uring.CQE) (*buffer.Buf, error) {
	if cqe.Flags&uring.CQEMore == 0 {
		u.armed = false
	}
	id, ok := cqe.BufID()
	if !ok {
		switch errno := unix.Errno(-cqe.Res); {
		case cqe.Res >= 0:
		case errno == unix.ENOBUFS:
			// Every lent buffer is used: the packet stays queued in the
			// kernel, as when a read finds the pool empty.
			q.ctr.rxDrop(drop.NoMem)
		case errno == unix.ECANCELED, errno == unix.EINTR, errno == unix.EAGAIN:
		default:
			return nil, q.downError(errno)
		}
		return nil, nil
	}
	b := u.take(id)
	if b == nil {
		return nil, fmt.Errorf("tun %s: io_uring named buffer %d, which is not lent: %w", q.dev.info.Name, id, port.ErrDown)
	}
	off := q.readOff(b)
	if cqe.Res < 0 {
		c.Consume(b)
		return nil, q.downError(unix.Errno(-cqe.Res))
	}
	if ok, reason := q.accept(b, off, int(cqe.Res), len(b.Frame())-off); !ok {
		q.ctr.rxDrop(reason)
		c.Drop(b, reason)
		return nil, nil
	}
	return b, nil
}

// armUring reports packets pending if completions wait, or if the read
// could not be armed (then the worker's next round re-arms it; an empty
// pool makes the worker wait for buffers, not spin). On a DEFER_TASKRUN
// ring reads done by the kernel become completions only when this thread
// enters the ring: Submit runs them, and any later one signals the
// eventfd the worker sleeps on.
func (q *rxQueue) armUring() bool {
	u := q.ur
	if u.ring == nil {
		return false // the eventfd starts signalled: the worker's first Receive sets the ring up
	}
	if !u.armed {
		return true
	}
	var cnt [8]byte
	_, _ = unix.Read(u.efd, cnt[:])
	if _, err := u.ring.Submit(); err != nil {
		return true // Receive reports it
	}
	return u.ring.Ready() > 0
}

// close cancels the read, drops into c the packets read and not received
// (drop.QueuePurge), takes back every lent buffer and tears the ring down.
func (u *rxUring) close(q *rxQueue, c *buffer.Cache) error {
	if u.ring == nil {
		return nil
	}
	var errs []error
	if u.armed {
		u.ring.GetSQE().PrepCancel(udRead, 0, udCancel)
	}
	// Completions already posted go first: their packets are purged,
	// not mistaken for buffers never filled.
	if _, err := u.ring.Submit(); err != nil {
		errs = append(errs, err)
	}
	u.purge(q, c)
	for try := 0; u.armed && len(errs) == 0 && try < closeTries; try++ {
		if _, err := u.ring.SubmitAndWait(1, closeWait); err != nil {
			errs = append(errs, err)
			break
		}
		u.purge(q, c)
	}
	if u.armed {
		// The kernel may still write into the lent buffers: they are
		// left lent rather than reused, and the pool's leak check says so.
		errs = append(errs, fmt.Errorf("io_uring read not cancelled after %v; %d buffers stay lent", closeTries*closeWait, len(u.lent)-len(u.free)))
	} else {
		for id, b := range u.lent {
			if b != nil {
				u.lent[id] = nil
				u.free = append(u.free, uint16(id))
				c.Consume(b) // lent, never filled: not a lost packet
			}
		}
		if err := u.br.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := u.ring.Close(); err != nil {
		errs = append(errs, err)
	}
	u.ring, u.br = nil, nil
	q.ctr.publish()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("io_uring: %w", err)
	}
	return nil
}

// purge drops, as drop.QueuePurge, the packets of every posted
// completion of the read.
func (u *rxUring) purge(q *rxQueue, c *buffer.Cache) {
	ready := u.ring.Ready()
	for i := range ready {
		cqe := u.ring.CQE(i)
		if cqe.UserData != udRead {
			continue
		}
		if cqe.Flags&uring.CQEMore == 0 {
			u.armed = false
		}
		if id, ok := cqe.BufID(); ok {
			if b := u.take(id); b != nil {
				q.ctr.rxDrop(drop.QueuePurge)
				c.Drop(b, drop.QueuePurge)
			}
		}
	}
	u.ring.Seen(ready)
}

// leaveUring moves the queue to the system-call path for good, taking
// back what its ring lent: Queue.Read reads the file itself, and a
// multishot read armed on it would take its packets.
func (q *rxQueue) leaveUring() error {
	u := q.ur
	if u == nil {
		return nil
	}
	err := withCache(nil, q.pool, func(c *buffer.Cache) error { return u.close(q, c) })
	unix.Close(u.efd)
	q.ur = nil
	return err
}
