package afxdp

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/linkwatch"
	"softnet.dev/internal/netns"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/vnet"
)

// xdpHeadroom is what the kernel leaves before the data of every frame
// it receives into (XDP_PACKET_HEADROOM).
const xdpHeadroom = unix.XDP_PACKET_HEADROOM

// minChunk is the smallest UMEM frame the kernel takes
// (XDP_UMEM_MIN_CHUNK_SIZE).
const minChunk = 2048

// closeDrain bounds how long Close waits for frames in flight to come
// back through the completion ring before it closes the sockets.
const closeDrain = 200 * time.Millisecond

// Port is an AF_XDP port: an XDP program on an existing interface
// redirects the frames it receives to one socket per queue, whose UMEM
// is a class of the workers' buffer pool. It is an L2 port.
type Port struct {
	cfg     Config
	info    port.Info
	pool    *buffer.Pool
	class   buffer.Class
	slab    buffer.Slab
	frames  int // in the slab
	ifindex int
	zc, sg  bool
	prog    *xdpProg
	socks   []*xsk
	rx      []*rxQueue
	tx      []*txQueue
	watch   *linkwatch.Watch
	link    linkStatus

	closeMu sync.Mutex
	closed  atomic.Bool
	final   *kernelCounts // what the kernel counted, read at close
}

var _ port.Port = (*Port)(nil)

// linkStatus is what the queues know of the interface, kept current by
// the link watch and read once per burst.
type linkStatus struct {
	down     atomic.Bool
	gone     atomic.Bool
	maxFrame atomic.Int32 // MTU plus the Ethernet header and a VLAN tag
}

// Open attaches a port to the interface cfg.Dev in cfg.NetNS: it
// removes a stale XDP program softnet left there (and refuses an
// interface with anyone else's), opens and binds a socket per queue on
// the shared UMEM of a class of cfg.Pool, and attaches the program that
// redirects the interface's frames to them. The fill rings get their
// frames when the queues are first polled (or attached by an engine).
func Open(cfg Config) (*Port, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Port{cfg: cfg, pool: cfg.Pool}
	if err := netns.Do(cfg.NetNS, p.open); err != nil {
		p.undo()
		return nil, fmt.Errorf("afxdp %s: %w", cfg.Name, err)
	}
	p.watch.Start(p.ifindex, &linkEvents{p: p})
	return p, nil
}

// open does what needs the interface's namespace.
func (p *Port) open() error {
	cfg := &p.cfg
	var err error
	// Subscribed before the interface is looked at, so that no change
	// between the look and the subscription is missed.
	if p.watch, err = linkwatch.New(); err != nil {
		return err
	}
	l, err := netlink.LinkByName(cfg.Dev)
	if err != nil {
		return fmt.Errorf("interface %s: %w", cfg.Dev, err)
	}
	a := l.Attrs()
	p.ifindex = a.Index
	p.link.maxFrame.Store(int32(a.MTU + ethOverhead))
	p.link.down.Store(a.Flags&unix.IFF_UP == 0)
	queues := cfg.Queues
	if queues == 0 {
		if queues, err = rxQueues(cfg.Dev); err != nil {
			return err
		}
	}
	if removed, err := clearStale(p.ifindex, cfg.Dev); err != nil {
		return err
	} else if removed {
		cfg.Log.Warn("removed a stale XDP program softnet had left on the interface", "port", cfg.Name, "dev", cfg.Dev)
	}
	frameSize := cfg.FrameSize
	if frameSize == 0 {
		frameSize = a.MTU + ethOverhead
	}
	if err := p.chooseClass(frameSize); err != nil {
		return err
	}
	// The program is loaded before the sockets so that a kernel without
	// multi-buffer XDP programs (before 5.18) is known before they bind.
	frags := true
	if p.prog, err = loadProg(queues, cfg.PassUnclaimed, frags); err != nil {
		frags = false
		if p.prog, err = loadProg(queues, cfg.PassUnclaimed, frags); err != nil {
			return err
		}
	}
	for i := range queues {
		s, res, err := p.openSocket(i)
		if err != nil {
			return err
		}
		p.socks = append(p.socks, s)
		p.addQueues(s)
		p.zc, p.sg = res.zc, res.sg && frags
		if err := p.prog.xsks.Put(uint32(i), uint32(s.fd)); err != nil {
			return fmt.Errorf("queue %d: socket into the XSKMAP: %w", i, err)
		}
	}
	if err := p.prog.attach(p.ifindex, cfg.Mode); err != nil {
		return fmt.Errorf("%s: %w", cfg.Dev, err)
	}
	p.info = port.Info{Name: cfg.Name, Layer: packet.L2, Queues: queues, MaxFrame: a.MTU + ethOverhead}
	return nil
}

// busyWait bounds how long Open waits for a queue that an AF_XDP socket
// closed a moment ago still holds: the kernel lets go of it from a
// workqueue, after the socket's last reference.
const busyWait = 2 * time.Second

// openSocket opens and binds queue i's socket, waiting out a queue that
// is still busy for busyWait.
func (p *Port) openSocket(i int) (*xsk, bindResult, error) {
	deadline := time.Now().Add(busyWait)
	for {
		s, err := newXSK(i, &p.cfg)
		if err != nil {
			return nil, bindResult{}, err
		}
		res, err := bind(s, p.ifindex, p.pool, p.class, p.cfg.ZeroCopy)
		if err == nil {
			return s, res, nil
		}
		s.close()
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return nil, bindResult{}, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// chooseClass picks the UMEM's class: the smallest whose frames, which
// the kernel wants between 2048 bytes and a page, hold frameSize after
// its XDP headroom, or failing that the largest within those bounds
// (longer frames then arrive in pieces).
func (p *Port) chooseClass(frameSize int) error {
	page := os.Getpagesize()
	best, found := buffer.Class(0), false
	for c := range p.pool.NumClasses() {
		class := buffer.Class(c)
		f := p.pool.Slab(class).Frame
		if f < minChunk || f > page {
			continue
		}
		if f-xdpHeadroom >= frameSize {
			best, found = class, true
			break
		}
		best, found = class, true
	}
	if !found {
		return fmt.Errorf("the pool has no class with frames of %d to %d bytes, as a UMEM needs (a room of about %d with the pool's headroom)", minChunk, page, minChunk)
	}
	p.class, p.slab = best, p.pool.Slab(best)
	p.frames = len(p.slab.Mem) / p.slab.Frame
	return nil
}

// addQueues makes the queues around a bound socket.
func (p *Port) addQueues(s *xsk) {
	words := (p.frames + 63) / 64
	p.rx = append(p.rx, &rxQueue{p: p, s: s, lentAt: make([]uint64, words), pieces: make([]*buffer.Buf, 0, maxPieces), ctr: newCounters()})
	p.tx = append(p.tx, &txQueue{p: p, s: s, lentAt: make([]uint64, words), segs: make([]*buffer.Buf, vnet.MaxSegments), ctr: newCounters()})
}

// undo releases what a failed Open had set up; nothing was lent yet.
func (p *Port) undo() {
	p.watch.Stop()
	if p.prog != nil {
		p.prog.close()
	}
	for _, s := range p.socks {
		unbind(s)
	}
}

// Info implements port.Port.
func (p *Port) Info() port.Info { return p.info }

// Config returns the port's configuration, defaults filled in.
func (p *Port) Config() Config { return p.cfg }

// Mode says how the port runs: the XDP program's mode, whether the
// sockets are zero-copy, and whether frames longer than a UMEM frame
// arrive in pieces (multi-buffer) rather than being dropped by the
// kernel.
func (p *Port) Mode() (xdp Mode, zeroCopy, multiBuffer bool) {
	return p.prog.mode, p.zc, p.sg
}

// RxQueue implements port.Port.
func (p *Port) RxQueue(i int) port.RxQueue {
	if i < 0 || i >= len(p.rx) {
		return nil
	}
	return p.rx[i]
}

// TxQueue implements port.Port.
func (p *Port) TxQueue(i int) port.TxQueue {
	if i < 0 || i >= len(p.tx) {
		return nil
	}
	return p.tx[i]
}

// Close is CloseInto(nil), for a port used without an engine.
func (p *Port) Close() error { return p.CloseInto(nil) }

// CloseInto detaches the program (the interface's frames go to the
// kernel's stack again), waits a little for frames in flight, closes the
// sockets and frees every frame they were lent into c, as
// drop.QueuePurge. c may be nil: a cache of the port's pool is made for
// it. The queues must no longer be polled (an engine detaches them
// first; a program that polls them itself closes the port from the
// goroutine that polls them).
func (p *Port) CloseInto(c *buffer.Cache) error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed.Swap(true) {
		return nil
	}
	p.watch.Stop()
	var errs []error
	errs = append(errs, p.prog.detach())
	if c == nil {
		tmp, err := p.pool.NewCache(nil)
		if err != nil {
			return errors.Join(fmt.Errorf("afxdp %s: close: cache to take frames back: %w", p.cfg.Name, err), p.release())
		}
		defer tmp.Close()
		c = tmp
	}
	p.drainTx(c)
	k := p.kernelCounts()
	p.final = &k
	errs = append(errs, p.release())
	for _, q := range p.rx {
		q.leave()
		q.dropPieces(c, drop.QueuePurge)
		q.lent -= purge(c, p, q.lentAt)
		q.ctr.Publish()
	}
	for _, q := range p.tx {
		q.lent -= purge(c, p, q.lentAt)
		q.ctr.Publish()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("afxdp %s: close: %w", p.cfg.Name, err)
	}
	return nil
}

// drainTx gives the kernel a moment to complete what the transmit rings
// hold: a driver that sends from UMEM pages (zero-copy, or
// IFF_TX_SKB_NO_LINEAR) may still read them. Whatever is still in
// flight after closeDrain is freed anyway once the sockets are closed.
func (p *Port) drainTx(c *buffer.Cache) {
	deadline := time.Now().Add(closeDrain)
	for _, q := range p.tx {
		for q.complete(c); q.lent > 0 && time.Now().Before(deadline); q.complete(c) {
			q.s.kickTx()
			time.Sleep(time.Millisecond)
		}
	}
}

// release closes the program and the sockets.
func (p *Port) release() error {
	var errs []error
	errs = append(errs, p.prog.close())
	for _, s := range p.socks {
		errs = append(errs, unbind(s))
	}
	return errors.Join(errs...)
}

// purge drops every frame marked in lent into c and returns how many.
func purge(c *buffer.Cache, p *Port, lent []uint64) int {
	n := 0
	for w, word := range lent {
		for word != 0 {
			i := w*64 + bits.TrailingZeros64(word)
			word &= word - 1
			c.Drop(p.pool.Buf(p.slab.First+uint32(i)), drop.QueuePurge)
			n++
		}
		lent[w] = 0
	}
	return n
}

// piecesPerFrame is how many UMEM frames the longest frame the interface
// may send takes: more than one only on a multi-buffer socket (without
// it the kernel drops such a frame as too long). It follows the MTU.
func (p *Port) piecesPerFrame() int {
	if !p.sg {
		return 1
	}
	room := p.slab.Frame - xdpHeadroom
	return (int(p.link.maxFrame.Load()) + room - 1) / room
}

func (p *Port) downError(op string) error {
	why := "closed"
	if p.link.gone.Load() {
		why = "interface deleted"
	}
	return fmt.Errorf("afxdp %s: %s: %w: %s", p.cfg.Name, op, port.ErrDown, why)
}

// linkEvents follows the interface for the queues.
type linkEvents struct{ p *Port }

func (e *linkEvents) Up(up bool) {
	if e.p.link.down.Swap(!up) != !up {
		if up {
			e.p.cfg.Log.Info("port link up: forwarding resumes", "port", e.p.cfg.Name)
		} else {
			e.p.cfg.Log.Warn("port link down: frames toward it are dropped as DEV_READY until it comes up", "port", e.p.cfg.Name)
		}
	}
}

func (e *linkEvents) MTU(mtu int) {
	if mtu > 0 {
		e.p.link.maxFrame.Store(int32(mtu + ethOverhead))
	}
}

// Deleted marks the port gone. A socket whose interface is gone never
// becomes readable again, so the worker learns it from the port's next
// transmit, or when it next wakes up (Arm says the queue is pending).
func (e *linkEvents) Deleted() {
	if !e.p.link.gone.Swap(true) {
		e.p.cfg.Log.Warn("port interface deleted: the port is down", "port", e.p.cfg.Name, "dev", e.p.cfg.Dev)
	}
}

func (e *linkEvents) Lost(err error) {
	e.p.link.down.Store(false)
	e.p.cfg.Log.Error("port link events lost: link state and MTU are no longer followed", "port", e.p.cfg.Name, "err", err)
}
