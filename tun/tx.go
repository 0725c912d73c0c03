//go:build linux

package tun

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/cacheline"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/vnet"
)

// txQueue writes to one queue's file. Only its worker touches it.
type txQueue struct {
	_        [cacheline.Size]byte
	dev      *Device
	fd       int
	layer    packet.Layer
	vnet     bool
	offloads port.Offloads
	hdr      hdrMode // of packets without a header of their own
	maxFrame int
	zero     [vnet.HeaderLen]byte // the header of packets that need nothing
	iov      [2]unix.Iovec        // zero header + data, for writev
	segs     []*buffer.Buf
	gro      *groState // nil without Config.GRO
	ur       *txUring  // nil on the system-call path
	ctr      counters
	_        [cacheline.Size]byte
}

// groState is a queue's GRO scratch space.
type groState struct {
	plan *vnet.Coalescer
	pkts [][]byte      // the planned burst's data (cap vnet.GROMaxBurst)
	hdrs []vnet.Header // and vnet headers (zero if none)
	hdr  [vnet.GROHeaderRoom]byte
	iov  [1 + vnet.GROMaxSegments]unix.Iovec
}

var _ port.TxQueue = (*txQueue)(nil)

func (q *txQueue) init(d *Device, fd int) {
	q.dev, q.fd, q.layer, q.vnet = d, fd, d.info.Layer, d.vnet
	q.offloads, q.maxFrame = d.info.Offloads, d.info.MaxFrame
	q.hdr = hdrNone
	if d.vnet {
		q.hdr = hdrZero
	}
	q.iov[0].Base = &q.zero[0]
	q.iov[0].SetLen(len(q.zero))
	// Segment scratch space for the most segments vnet.Segment makes of
	// one packet: a packet that would make more is dropped as GSO_SEG.
	q.segs = make([]*buffer.Buf, vnet.MaxSegments)
	q.ctr = newCounters()
	if kinds := groKinds(q.offloads); d.gro && kinds != 0 {
		q.gro = &groState{plan: vnet.NewCoalescer(q.layer, kinds, q.maxFrame),
			pkts: make([][]byte, 0, vnet.GROMaxBurst), hdrs: make([]vnet.Header, 0, vnet.GROMaxBurst)}
	}
}

// groKinds returns the GSO packets GRO may build for a device with the
// offloads o: every kind the kernel took, all of which need checksum
// offload.
func groKinds(o port.Offloads) vnet.GROKinds {
	if o&port.OffloadCsum == 0 {
		return 0
	}
	var k vnet.GROKinds
	for _, m := range []struct {
		o port.Offloads
		k vnet.GROKinds
	}{{port.OffloadTSO4, vnet.GROTCPv4}, {port.OffloadTSO6, vnet.GROTCPv6}, {port.OffloadUSO4, vnet.GROUDPv4}, {port.OffloadUSO6, vnet.GROUDPv6}} {
		if o&m.o != 0 {
			k |= m.k
		}
	}
	return k
}

// Transmit writes every packet of bufs and frees it into c, or drops it
// with a reason. While the link is down it drops them all with
// drop.DevReady, without a system call; if the device is gone it does the
// same and returns an error matching port.ErrDown.
func (q *txQueue) Transmit(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	sent := 0
	var err error
	down := false
	switch {
	case q.dev.closed.Load():
		err = errClosed
	case q.dev.link.gone.Load():
		err = errGone
	case q.ur != nil && q.ur.stuck != nil:
		err = q.ur.stuck
	case q.dev.link.down.Load():
		down = true
	}
	q.maxFrame = int(q.dev.link.maxFrame.Load())
	u := q.ur
	if u != nil && err == nil && u.ring == nil {
		err = u.setup(q, c, false)
	}
	coalesce := q.gro != nil && len(bufs) > 1 && err == nil && !down
	// A burst is planned vnet.GROMaxBurst packets at a time, so that the
	// plan's scratch space is fixed.
	for part := bufs; len(part) > 0; {
		burst := part
		if coalesce {
			burst = part[:q.planGRO(part)]
		}
		part = part[len(burst):]
		for i := range burst {
			n := 1
			if coalesce {
				if n = q.gro.plan.GROCount(i); n == 0 {
					continue // sent or dropped with the packet that leads its run
				}
			}
			if err != nil || down {
				q.dropRun(c, burst, i, n, coalesce, drop.DevReady)
				continue
			}
			var s int
			s, err = q.sendPackets(c, burst, i, n)
			sent += s
			down, err = linkDown(err)
		}
		if coalesce {
			clear(q.gro.pkts) // they point into the buffers, which are gone
		}
	}
	if u != nil && u.ring != nil {
		s, ferr := u.flush(q, c)
		sent += s
		if _, ferr = linkDown(ferr); err == nil {
			err = ferr
		}
	}
	q.ctr.Publish()
	if err != nil {
		return sent, fmt.Errorf("tun %s: write: %w: %w", q.dev.info.Name, port.ErrDown, err)
	}
	return sent, nil
}

// sendPackets sends the n packets that start at bufs[i] (a GRO run if n > 1),
// or drops them with a reason, and returns how many were sent. On the
// io_uring path the writes are gathered for Transmit's one submission;
// packets that need work in software are written by the system-call path,
// after what was gathered before them, so the burst keeps its order.
func (q *txQueue) sendPackets(c *buffer.Cache, bufs []*buffer.Buf, i, n int) (int, error) {
	if q.ur != nil {
		if n > 1 {
			return q.queueRun(c, bufs, i)
		}
		return q.queueOne(c, bufs[i])
	}
	var ok bool
	var err error
	if n > 1 {
		ok, err = q.sendRun(c, bufs, i)
	} else {
		ok, err = q.send(c, bufs[i])
	}
	if !ok {
		return 0, err
	}
	return n, err
}

// linkDown separates EIO, a link set down before the link watch said so
// (the rest of the burst is dropped as if it had), from errors that end
// the queue.
func linkDown(err error) (bool, error) {
	if errors.Is(err, unix.EIO) {
		return true, nil
	}
	return false, err
}

// planGRO plans the coalescing of a burst, or of its first
// vnet.GROMaxBurst packets, and returns the number planned.
func (q *txQueue) planGRO(bufs []*buffer.Buf) int {
	g := q.gro
	g.pkts, g.hdrs = g.pkts[:0], g.hdrs[:0]
	for _, b := range bufs[:min(len(bufs), vnet.GROMaxBurst)] {
		var h vnet.Header
		if b.Flags()&FlagVnetHdr != 0 && b.Headroom() >= vnet.HeaderLen {
			h, _ = vnet.Decode(b.Frame()[b.Headroom()-vnet.HeaderLen:])
		}
		g.pkts, g.hdrs = append(g.pkts, b.Bytes()), append(g.hdrs, h)
	}
	return g.plan.Plan(g.pkts, g.hdrs)
}

// sendRun writes the GSO packet GRO planned for the run led by bufs[i]
// and frees the run's buffers. It reports whether it was sent, and
// returns an error only if the device is gone or down (the errno).
func (q *txQueue) sendRun(c *buffer.Cache, bufs []*buffer.Buf, i int) (bool, error) {
	n, res := q.writeRun(i)
	if res.ok() {
		for j := i; j >= 0; j = q.gro.plan.GRONext(j) {
			c.Consume(bufs[j])
		}
		return true, nil
	}
	q.dropRun(c, bufs, i, n, true, res.reason)
	if res.down != 0 {
		return false, res.down
	}
	return false, nil
}

// writeRun writes the GSO packet GRO planned for the run led by packet
// i of the planned burst (gro.pkts), with one writev of its headers and
// every packet's payload, and returns the number of packets it carried.
func (q *txQueue) writeRun(i int) (int, result) {
	g := q.gro
	hdr := g.plan.GROHeaders(i, g.pkts[i], g.hdr[:])
	iov := g.iov[:1]
	iov[0].Base = &hdr[0]
	iov[0].SetLen(len(hdr))
	size := len(hdr) - vnet.HeaderLen
	for j := i; j >= 0; j = g.plan.GRONext(j) {
		p := g.plan.GROPayload(j, g.pkts[j])
		iov = append(iov, unix.Iovec{Base: &p[0]})
		iov[len(iov)-1].SetLen(len(p))
		size += len(p)
	}
	n := len(iov) - 1
	res := q.writev(iov, size)
	clear(iov) // the iovecs point into the packets, which are about to go
	if res.ok() {
		q.ctr.N[cCoalesced]++
		q.ctr.N[cCoalescedSegs] += uint64(n)
	}
	return n, res
}

// writeBytes is Queue.Write: it writes the packets bufs[i][offset:],
// coalesced with GRO, each preceded by its own vnet header at
// bufs[i][offset-vnet.HeaderLen:offset] if keep, and returns the number
// written. A packet that fails is counted as a drop; the error says the
// device is gone, and the rest of the burst is dropped.
func (q *txQueue) writeBytes(bufs [][]byte, offset int, keep bool) (int, error) {
	coalesce := q.gro != nil && len(bufs) > 1
	sent := 0
	var err error
	// Planned vnet.GROMaxBurst packets at a time, as in Transmit.
	for part := bufs; len(part) > 0; {
		burst := part
		if coalesce {
			g := q.gro
			g.pkts, g.hdrs = g.pkts[:0], g.hdrs[:0]
			for _, b := range part[:min(len(part), vnet.GROMaxBurst)] {
				var h vnet.Header
				if keep {
					h, _ = vnet.Decode(b[offset-vnet.HeaderLen:])
				}
				g.pkts, g.hdrs = append(g.pkts, b[offset:]), append(g.hdrs, h)
			}
			burst = part[:g.plan.Plan(g.pkts, g.hdrs)]
		}
		part = part[len(burst):]
		for i, b := range burst {
			n := 1
			if coalesce {
				if n = q.gro.plan.GROCount(i); n == 0 {
					continue // written or dropped with the packet that leads its run
				}
			}
			var res result
			switch {
			case err != nil:
				res = failed(drop.DevReady)
			case n > 1:
				n, res = q.writeRun(i)
			case keep:
				h, _ := vnet.Decode(b[offset-vnet.HeaderLen:])
				if res = q.write(b[offset-vnet.HeaderLen:], hdrInline); res.ok() && h.IsGSO() {
					q.ctr.N[cGSOOut]++
				}
			default:
				res = q.write(b[offset:], q.hdr)
			}
			if res.ok() {
				sent += n
				continue
			}
			for range n {
				q.ctr.TxDrop(res.reason)
			}
			if res.down != 0 {
				err = res.down
			}
		}
		if coalesce {
			clear(q.gro.pkts) // they point into the caller's memory
		}
	}
	q.ctr.Publish()
	if err != nil {
		return sent, fmt.Errorf("tun %s: write: %w: %w", q.dev.info.Name, port.ErrDown, err)
	}
	return sent, nil
}

// dropRun drops bufs[i] with the reason, and with it the rest of the run
// it leads if the burst was planned.
func (q *txQueue) dropRun(c *buffer.Cache, bufs []*buffer.Buf, i, n int, planned bool, reason drop.Reason) {
	if !planned || n == 1 {
		q.ctr.TxDrop(reason)
		c.Drop(bufs[i], reason)
		return
	}
	for j := i; j >= 0; j = q.gro.plan.GRONext(j) {
		q.ctr.TxDrop(reason)
		c.Drop(bufs[j], reason)
	}
}

// send transmits one packet and frees it. It reports whether it was sent,
// and returns an error only if the device is gone or down (the errno).
func (q *txQueue) send(c *buffer.Cache, b *buffer.Buf) (bool, error) {
	if b.Flags()&FlagVnetHdr != 0 {
		return q.sendMarked(c, b)
	}
	return q.done(c, b, q.write(b.Bytes(), q.hdr))
}

// sendMarked transmits a packet whose vnet header sits right before its
// data: whole if this device takes the offloads it asks for, else
// segmented or checksummed here.
func (q *txQueue) sendMarked(c *buffer.Cache, b *buffer.Buf) (bool, error) {
	head := b.Headroom()
	if head < vnet.HeaderLen {
		return q.done(c, b, failed(drop.DevHdr))
	}
	frame := b.Frame()
	h, _ := vnet.Decode(frame[head-vnet.HeaderLen : head])
	if need := q.needs(h, b.Bytes()); q.vnet && q.offloads&need == need {
		// Zero copy: the header and the data are contiguous already.
		res := q.write(frame[head-vnet.HeaderLen:head+b.Len()], hdrInline)
		if res.ok() && h.IsGSO() {
			q.ctr.N[cGSOOut]++
		}
		return q.done(c, b, res)
	}
	switch {
	case h.IsGSO():
		return q.segment(c, b, h)
	case h.NeedsCsum():
		return q.finishChecksum(c, b, h)
	}
	// A header that asks for nothing: the packet is an ordinary one.
	return q.done(c, b, q.write(b.Bytes(), q.hdr))
}

// needs returns the offloads a device must accept to take the packet
// whole.
func (q *txQueue) needs(h vnet.Header, pkt []byte) port.Offloads {
	return h.Offloads(ipVersion(pkt, q.layer) == 6)
}

// ipVersion returns the IP version of a packet starting at layer, or 0.
func ipVersion(pkt []byte, layer packet.Layer) int {
	if layer == packet.L3 {
		if len(pkt) == 0 {
			return 0
		}
		return int(pkt[0] >> 4)
	}
	off := 12
	for range 2 { // at most one 802.1Q tag, as packet.Parse
		if len(pkt) < off+2 {
			return 0
		}
		switch uint16(pkt[off])<<8 | uint16(pkt[off+1]) {
		case packet.EtherTypeIPv4:
			return 4
		case packet.EtherTypeIPv6:
			return 6
		case packet.EtherTypeVLAN:
			off += packet.VLANTagLen
			continue
		}
		return 0
	}
	return 0
}

// segment splits a GSO packet in software and writes the segments. The
// packet counts as sent only if every segment was written.
func (q *txQueue) segment(c *buffer.Cache, b *buffer.Buf, h vnet.Header) (bool, error) {
	pkt := b.Bytes()
	n := vnet.SegmentCount(h, pkt, q.layer)
	if n < 1 {
		return q.done(c, b, failed(drop.GsoSeg))
	}
	segs := q.segs[:n]
	got, reason := vnet.Segment(c, h, pkt, q.layer, segs)
	if got == 0 {
		return q.done(c, b, failed(reason))
	}
	q.ctr.N[cSegmented]++
	res := result{}
	for i, s := range segs[:got] {
		if res.ok() {
			if res = q.write(s.Bytes(), q.hdr); res.ok() {
				q.ctr.N[cSegments]++
			}
		}
		// The segments are this queue's own copies: they are freed as
		// consumed whatever happened, and a loss is counted once, on the
		// packet they came from.
		c.Consume(s)
		segs[i] = nil
	}
	return q.done(c, b, res)
}

// finishChecksum completes the checksum of a packet that left it to the
// device, then writes it. A shared buffer is copied first: its other
// holders may be reading it.
func (q *txQueue) finishChecksum(c *buffer.Cache, b *buffer.Buf, h vnet.Header) (bool, error) {
	pkt := b.Bytes()
	var cp *buffer.Buf
	if b.Refs() > 1 {
		class, ok := c.Pool().ClassFor(len(pkt))
		if !ok {
			return q.done(c, b, failed(drop.PktTooBig))
		}
		var err error
		if cp, err = c.Get(class); err != nil {
			return q.done(c, b, failed(drop.NoMem))
		}
		cp.SetData(cp.Headroom(), len(pkt))
		copy(cp.Bytes(), pkt)
		pkt = cp.Bytes()
	}
	res := failed(drop.DevHdr) // offsets outside the packet
	if vnet.FinishChecksum(h, pkt) {
		q.ctr.N[cCsumFinished]++
		res = q.write(pkt, q.hdr)
	}
	if cp != nil {
		c.Consume(cp)
	}
	return q.done(c, b, res)
}

// result is the outcome of a write: the zero value is success.
type result struct {
	reason drop.Reason
	failed bool
	down   unix.Errno // set if the device is gone, or down (EIO)
}

func (r result) ok() bool { return !r.failed }

func failed(r drop.Reason) result { return result{reason: r, failed: true} }

// done frees b as sent or dropped, as res says, and returns Transmit's
// view: sent, and the errno if the device is gone or down.
func (q *txQueue) done(c *buffer.Cache, b *buffer.Buf, res result) (bool, error) {
	if res.ok() {
		c.Consume(b)
		return true, nil
	}
	q.ctr.TxDrop(res.reason)
	c.Drop(b, res.reason)
	if res.down != 0 {
		return false, res.down
	}
	return false, nil
}

// What precedes the data in a write.
type hdrMode uint8

const (
	hdrNone   hdrMode = iota // nothing: the device has no vnet header
	hdrZero                  // a zero vnet header, from the queue
	hdrInline                // the data starts with its own vnet header
)

// write writes one packet in one system call.
func (q *txQueue) write(p []byte, mode hdrMode) result {
	n := len(p)
	if mode == hdrInline {
		n -= vnet.HeaderLen
	}
	if res, ok := q.checkSize(n); !ok {
		return res // before &p[0]: p may be empty
	}
	if mode != hdrZero {
		return q.syscall(unix.SYS_WRITE, unsafe.Pointer(&p[0]), len(p), n)
	}
	q.iov[1].Base = &p[0]
	q.iov[1].SetLen(len(p))
	res := q.writev(q.iov[:], n)
	q.iov[1].Base = nil
	return res
}

// writev writes one packet, n bytes after its vnet header, gathered from
// iov, in one system call.
func (q *txQueue) writev(iov []unix.Iovec, n int) result {
	if res, ok := q.checkSize(n); !ok {
		return res
	}
	return q.syscall(unix.SYS_WRITEV, unsafe.Pointer(&iov[0]), len(iov), n)
}

// checkSize checks the length of a packet after its vnet header.
func (q *txQueue) checkSize(n int) (result, bool) {
	switch {
	case n > q.maxFrame:
		return failed(drop.PktTooBig), false
	case n <= 0:
		return failed(drop.PktTooSmall), false
	}
	return result{}, true
}

// syscall makes the write or writev of a packet of n bytes (after its
// vnet header) and turns its outcome into a result.
func (q *txQueue) syscall(trap uintptr, p unsafe.Pointer, arg, n int) result {
	for {
		_, _, errno := unix.Syscall(trap, uintptr(q.fd), uintptr(p), uintptr(arg))
		switch errno {
		case 0:
			q.ctr.N[cTxPackets]++
			q.ctr.N[cTxBytes] += uint64(n)
			return result{}
		case unix.EINTR:
			continue
		}
		return errnoResult(errno)
	}
}

// errnoResult maps a write's error to a drop reason, and says if the
// device is gone; the io_uring path maps its completions' errors the same.
func errnoResult(errno unix.Errno) result {
	switch errno {
	case unix.EAGAIN, unix.ENOBUFS:
		return failed(drop.FullRing)
	case unix.EIO, unix.EBADFD, unix.ENODEV, unix.ENXIO, unix.EBADF:
		// EIO: the device is down, for now; EBADFD: it was deleted.
		return result{reason: drop.DevReady, failed: true, down: errno}
	case unix.EINVAL:
		// The kernel refused the vnet header, or a frame too short.
		return failed(drop.DevHdr)
	case unix.EMSGSIZE:
		return failed(drop.PktTooBig)
	}
	return failed(drop.NotSpecified)
}
