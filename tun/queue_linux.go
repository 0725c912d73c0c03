package tun

import (
	"fmt"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/port"
	"softnet.dev/vnet"
)

// batchSize is what Queue.BatchSize suggests: enough buffers for a 64 KiB
// TSO packet split at an MSS of 536, or two at the usual 1448.
const batchSize = 128

// Queue is one queue of a Device for a caller that runs no engine:
// blocking batch reads and writes, of byte slices (Read, Write) or of
// softnet buffers (Receive, Transmit). Reads block until a packet is
// there, then take what else is waiting, up to the batch, without
// blocking again. One goroutine at a time may read (Read or Receive) and
// one write (Write or Transmit); a read and a write may run at once.
// Device.Close ends blocked reads. A queue polled by an engine worker
// through RxQueue and TxQueue must not be used through Queue as well.
//
// Read and Write allocate nothing per call; Read makes one buffer of
// 64 KiB the first time it needs a place to split GSO packets from.
type Queue struct {
	dev *Device
	rx  *rxQueue
	tx  *txQueue
	pfd [2]unix.PollFd // the queue's file and the device's wake eventfd
	// scratch holds a packet with its vnet header when the caller's
	// buffer cannot (it is shorter than a 64 KiB frame), and a GSO
	// packet kept for the next Read (pending bytes) when a Read had not
	// enough buffers left for its segments.
	scratch []byte
	pending int
}

func (q *Queue) init(d *Device, rx *rxQueue, tx *txQueue) {
	q.dev, q.rx, q.tx = d, rx, tx
}

// BatchSize is the number of buffers to give Read and the largest
// burst worth giving Write.
func (q *Queue) BatchSize() int { return batchSize }

// Read reads packets into bufs[i][offset:], their lengths into sizes[i],
// and returns how many. It blocks until there is at least one, then
// takes what else the device holds, without blocking, until bufs are
// full. With an error it returns the packets read before it.
//
// A GSO packet is split into segments (vnet.SegmentBytes), each in a
// buffer of its own with finished checksums, and so is a packet's
// partial checksum finished (vnet.FinishChecksum): the caller gets plain
// IP packets (Ethernet frames on TAP). A buffer that holds offset plus
// Info().MaxFrame, with offset of at least vnet.HeaderLen, is read into
// directly; others need one copy, and a packet or segment longer than
// its buffer is dropped as drop.PktTooBig. A GSO packet with more
// segments than buffers left waits for the next Read, or is dropped as
// drop.GsoSeg if it has more than len(bufs).
//
// With KeepGSO, packets are handed over whole instead, each preceded by
// its virtio-net header at bufs[i][offset-vnet.HeaderLen:offset]: offset
// must be at least vnet.HeaderLen and every buffer must hold offset plus
// Info().MaxFrame.
//
// An invalid packet is dropped and counted by reason in Stats().RxDrops.
// Errors: bad arguments (nothing is read), and the device closed or gone
// (matching port.ErrDown).
func (q *Queue) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if err := q.checkRead(bufs, sizes, offset); err != nil {
		return 0, err
	}
	if len(bufs) == 0 {
		return 0, nil
	}
	d := q.dev
	d.ioMu.RLock()
	defer d.ioMu.RUnlock()
	if d.closed.Load() {
		return 0, q.rx.downError(errClosed)
	}
	if err := q.rx.leaveUring(); err != nil {
		return 0, fmt.Errorf("tun %s: read: %w", d.info.Name, err)
	}
	for {
		if d.closed.Load() {
			return 0, q.rx.downError(errClosed)
		}
		n, err := q.readBurst(bufs, sizes, offset)
		q.rx.ctr.Publish()
		if n > 0 || err != nil {
			return n, err
		}
		if err := q.wait(); err != nil {
			return 0, err
		}
	}
}

func (q *Queue) checkRead(bufs [][]byte, sizes []int, offset int) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("tun %s: read: "+format, append([]any{q.dev.info.Name}, args...)...)
	}
	switch {
	case offset < 0:
		return fail("negative offset %d", offset)
	case len(sizes) < len(bufs):
		return fail("%d sizes for %d buffers", len(sizes), len(bufs))
	case q.dev.keepGSO && offset < vnet.HeaderLen:
		return fail("offset %d leaves no room for the %d-byte vnet header KeepGSO hands over", offset, vnet.HeaderLen)
	}
	want := offset + 1
	if q.dev.keepGSO {
		want = offset + q.dev.info.MaxFrame
	}
	for i, b := range bufs {
		if len(b) < want {
			return fail("buffer %d is %d bytes, want at least %d (offset %d)", i, len(b), want, offset)
		}
	}
	return nil
}

// readBurst reads what the device holds into bufs, without blocking.
func (q *Queue) readBurst(bufs [][]byte, sizes []int, offset int) (int, error) {
	n := 0
	if m := q.pending; m > 0 {
		q.pending = 0
		n = q.deliver(q.scratch, m, false, bufs, sizes, offset, 0)
	}
	for n < len(bufs) && q.pending == 0 {
		dst, direct := q.dst(bufs[n], offset)
		m, err := unix.Read(q.rx.fd, dst)
		switch err {
		case nil:
			k := q.deliver(dst, m, direct, bufs, sizes, offset, n) - n
			n += k
			if k > 1 && len(bufs)-n < k {
				// The next packet is likely a GSO packet as large: it
				// would not fit and would have to be copied aside.
				return n, nil
			}
		case unix.EINTR:
		case unix.EAGAIN:
			return n, nil
		default:
			return n, q.rx.downError(err)
		}
	}
	return n, nil
}

// dst returns where to read the next packet: into b itself when it holds
// whatever the device may deliver, with the vnet header before offset,
// otherwise into scratch.
func (q *Queue) dst(b []byte, offset int) ([]byte, bool) {
	if !q.rx.vnet {
		return b[offset:], true
	}
	if offset >= vnet.HeaderLen && len(b)-offset >= q.dev.info.MaxFrame {
		return b[offset-vnet.HeaderLen:], true
	}
	return q.scratchBuf(), false
}

func (q *Queue) scratchBuf() []byte {
	if q.scratch == nil {
		q.scratch = make([]byte, vnet.HeaderLen+q.dev.info.MaxFrame)
	}
	return q.scratch
}

// deliver hands the m bytes read into p (bufs[n] at offset, less the
// vnet header, if direct) to the caller as packets bufs[n:], and returns
// the new count of packets in bufs.
func (q *Queue) deliver(p []byte, m int, direct bool, bufs [][]byte, sizes []int, offset, n int) int {
	rx := q.rx
	h, ok, reason := checkRead(p[:min(m, len(p))], m, len(p), rx.vnet, rx.layer)
	if !ok {
		rx.ctr.RxDrop(reason)
		return n
	}
	if !rx.vnet {
		return q.took(sizes, n, m)
	}
	pkt := p[vnet.HeaderLen:m]
	if h.IsGSO() && q.dev.keepGSO {
		rx.ctr.N[cGSOIn]++
	}
	switch {
	case q.dev.keepGSO:
		return q.took(sizes, n, len(pkt))
	case !h.IsGSO():
		if h.NeedsCsum() {
			if !vnet.FinishChecksum(h, pkt) {
				rx.ctr.RxDrop(drop.DevHdr)
				return n
			}
			rx.ctr.N[cCsumFinished]++
		}
		if !direct {
			if len(bufs[n])-offset < len(pkt) {
				rx.ctr.RxDrop(drop.PktTooBig)
				return n
			}
			copy(bufs[n][offset:], pkt)
		}
		return q.took(sizes, n, len(pkt))
	}
	k := vnet.SegmentCount(h, pkt, rx.layer)
	switch {
	case k == 0:
		rx.ctr.RxDrop(drop.GsoSeg)
		return n
	case k > len(bufs)-n && n == 0:
		rx.ctr.RxDrop(drop.GsoSeg) // it would never fit this caller's batch
		return n
	case k > len(bufs)-n:
		if direct {
			copy(q.scratchBuf(), p[:m])
		}
		q.pending = m
		return n
	}
	got, reason := vnet.SegmentBytes(h, pkt, rx.layer, bufs[n:n+k], offset, sizes[n:n+k])
	if got == 0 {
		rx.ctr.RxDrop(reason)
		return n
	}
	rx.ctr.N[cSegmented]++
	rx.ctr.N[cSegments] += uint64(got)
	for i := range got {
		rx.ctr.N[cRxPackets]++
		rx.ctr.N[cRxBytes] += uint64(sizes[n+i])
	}
	return n + got
}

// took records a packet of size bytes as bufs[n].
func (q *Queue) took(sizes []int, n, size int) int {
	sizes[n] = size
	q.rx.ctr.N[cRxPackets]++
	q.rx.ctr.N[cRxBytes] += uint64(size)
	return n + 1
}

// wait blocks until the queue's file is readable or the device is
// closed.
func (q *Queue) wait() error {
	if q.rx.Arm() {
		return nil // io_uring completions wait already
	}
	// On the io_uring path the file's packets become completions, which
	// the queue's FD (an eventfd) signals.
	q.pfd = [2]unix.PollFd{
		{Fd: int32(q.rx.FD()), Events: unix.POLLIN},
		{Fd: int32(q.dev.wake), Events: unix.POLLIN},
	}
	for {
		_, err := unix.Poll(q.pfd[:], -1)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return q.rx.downError(err)
		case q.pfd[1].Revents != 0:
			return q.rx.downError(errClosed)
		case q.pfd[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0:
			// The device is unregistering: a read would find nothing and
			// the next poll return at once.
			return q.rx.downError(unix.EBADFD)
		}
		return nil
	}
}

// Write writes the packets bufs[i][offset:] and returns how many were
// written. With Config.GRO (or FileConfig.GRO) runs of segments of one
// flow leave as one GSO packet (vnet.Coalescer), each counted in Stats
// as Coalesced, its packets as CoalescedSegs. Without KeepGSO the
// packets are plain IP packets (Ethernet frames on TAP); with it each
// is preceded by its virtio-net header at
// bufs[i][offset-vnet.HeaderLen:offset], as Read hands them over.
//
// A packet the device refuses (too long, a bad header, a full queue) is
// dropped and counted by reason in Stats().TxDrops. Errors: bad
// arguments (nothing is written), and the device closed or gone
// (matching port.ErrDown), after which the rest of bufs is dropped.
func (q *Queue) Write(bufs [][]byte, offset int) (int, error) {
	fail := func(format string, args ...any) (int, error) {
		return 0, fmt.Errorf("tun %s: write: "+format, append([]any{q.dev.info.Name}, args...)...)
	}
	switch {
	case offset < 0:
		return fail("negative offset %d", offset)
	case q.dev.keepGSO && offset < vnet.HeaderLen:
		return fail("offset %d leaves no room for the %d-byte vnet header KeepGSO takes", offset, vnet.HeaderLen)
	}
	for i, b := range bufs {
		if len(b) < offset {
			return fail("buffer %d is %d bytes, shorter than offset %d", i, len(b), offset)
		}
	}
	d := q.dev
	d.ioMu.RLock()
	defer d.ioMu.RUnlock()
	if d.closed.Load() {
		for range bufs {
			q.tx.ctr.TxDrop(drop.DevReady)
		}
		q.tx.ctr.Publish()
		return fail("%w: %w", port.ErrDown, errClosed)
	}
	return q.tx.writeBytes(bufs, offset, d.keepGSO)
}

// Receive is RxQueue.Receive, blocking: it waits until a packet is there
// and returns at least one, or an error: the device closed or gone
// (matching port.ErrDown), or a pool with no buffer to read into
// (matching buffer.ErrExhausted; the packets stay queued in the kernel).
func (q *Queue) Receive(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	d := q.dev
	d.ioMu.RLock()
	defer d.ioMu.RUnlock()
	for {
		n, err := q.rx.Receive(c, bufs)
		switch {
		case n > 0 || err != nil:
			return n, err
		case q.rx.starved:
			return 0, fmt.Errorf("tun %s: read: %w", d.info.Name, buffer.ErrExhausted)
		}
		if err := q.wait(); err != nil {
			return 0, err
		}
	}
}

// Transmit is TxQueue.Transmit, safe against a concurrent Device.Close:
// it writes every packet and frees it into c, or drops it with a reason.
// Writes to TUN do not block; a full device queue is a drop
// (drop.FullRing).
func (q *Queue) Transmit(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	q.dev.ioMu.RLock()
	defer q.dev.ioMu.RUnlock()
	return q.tx.Transmit(c, bufs)
}
