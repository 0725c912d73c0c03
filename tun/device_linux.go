package tun

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/internal/linkwatch"
	"softnet.dev/internal/netns"
	"softnet.dev/packet"
	"softnet.dev/port"
)

// goneTimeout bounds how long Close waits for a device it created to
// disappear.
const goneTimeout = 2 * time.Second

// adoptTimeout bounds how long Open waits for a device to adopt that
// the program before still holds.
const adoptTimeout = 5 * time.Second

// errClosed is what queues of a closed device report, with port.ErrDown.
var errClosed = errors.New("device closed")

// Device is an open TUN or TAP device: a port.Port with one receive and
// one transmit queue per file descriptor, each also usable without an
// engine through Queue. Each queue belongs to one worker at a time; Info,
// Created and Stats may be called from anywhere.
type Device struct {
	info    port.Info
	vnet    bool  // packets carry a virtio-net header
	bulk    bool  // not Config.Knobs.SingleGets
	gro     bool  // Config.GRO
	keepGSO bool  // Config.KeepGSO
	io      IO    // IOSyscall or IOUring
	ioWhy   error // why IOAuto chose IOSyscall
	created bool
	// persist: the device outlives its files (TUNSETPERSIST), adopted
	// (Config.Adopt) or kept; Close clears it unless kept.
	persist, kept bool
	nl            *netlink.Handle // Open's, bound to the device's namespace; nil for FromFiles and once closed
	fds           []int
	files         []*os.File // FromFiles': closed instead of fds
	wake          int        // eventfd that Close makes readable to end blocked Queue reads
	rx            []rxQueue
	tx            []txQueue
	queues        []Queue
	ctrs          []*counters

	// How Open found an existing device, to leave it so.
	setUp   bool // it was down and Open set it up
	origMTU int  // Open changed its MTU from this; 0 if not

	link    linkStatus
	watch   *linkwatch.Watch
	ifindex int
	dev     string // the device's name in its namespace; info.Name is the port's

	closed  atomic.Bool
	closeMu sync.Mutex
	done    bool // Close ran; under closeMu
	// ioMu is held shared by every Queue call and exclusively by Close,
	// so that no call uses a file number Close has released.
	ioMu sync.RWMutex
}

var _ port.Port = (*Device)(nil)

// Open opens the device cfg describes, creating it if it does not exist,
// and sets it up.
func Open(cfg Config) (*Device, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Device{vnet: cfg.Offload, bulk: !cfg.Knobs.SingleGets(), gro: cfg.GRO, keepGSO: cfg.KeepGSO, wake: -1}
	if err := d.chooseIO(cfg.IO); err != nil {
		return nil, fmt.Errorf("tun %s: %w", cfg.Name, err)
	}
	err = netns.Do(cfg.NetNS, func() error { return d.open(cfg) })
	if err == nil {
		err = d.start()
	}
	if err == nil {
		err = d.startUring()
	}
	if err != nil {
		d.undo()
		return nil, fmt.Errorf("tun %s: %w", cfg.Name, err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d.watch.Start(d.ifindex, &linkEvents{dev: d, l2: linkOverhead(cfg.TAP), log: log})
	return d, nil
}

// open does everything that needs the device's namespace; it runs on a
// thread switched into it. On failure the caller undoes what was done.
func (d *Device) open(cfg Config) error {
	nl, err := newNetlink()
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	d.nl = nl
	// Subscribed before anything is looked at, so that no change is
	// missed between the look and the subscription.
	if d.watch, err = linkwatch.New(); err != nil {
		return err
	}
	before, err := lookup(nl, cfg.Name)
	switch {
	case err != nil:
		return fmt.Errorf("look up: %w", err)
	case before.exists && before.kind != "tun":
		return fmt.Errorf("exists and is not a TUN/TAP device (%s)", before.kind)
	}
	d.created = !before.exists
	if cfg.Adopt {
		if !before.exists {
			return fmt.Errorf("adopt: %w (deleted while its program was down?)", ErrNoDevice)
		}
		d.created, d.persist = true, true
	}

	flags := uint16(unix.IFF_NO_PI)
	d.dev = cfg.Name
	d.info = port.Info{Name: cfg.Name, Layer: packet.L3, Queues: cfg.Queues}
	if cfg.PortName != "" {
		d.info.Name = cfg.PortName
	}
	l2 := linkOverhead(cfg.TAP)
	if cfg.TAP {
		flags |= unix.IFF_TAP
		d.info.Layer = packet.L2
	} else {
		flags |= unix.IFF_TUN
	}
	if cfg.Offload {
		flags |= unix.IFF_VNET_HDR
	}
	if cfg.Queues > 1 {
		flags |= unix.IFF_MULTI_QUEUE
	}
	for i := range cfg.Queues {
		fd, err := openQueue(cfg.Name, flags)
		if cfg.Adopt {
			// A program that died holds its files until the kernel has
			// torn down its io_uring, which it does after the process
			// is gone: the device is busy for a moment.
			for deadline := time.Now().Add(adoptTimeout); errors.Is(err, unix.EBUSY) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
				fd, err = openQueue(cfg.Name, flags)
			}
		}
		if err != nil {
			return fmt.Errorf("attach queue %d: %w", i, err)
		}
		d.fds = append(d.fds, fd)
	}
	if err := d.setOffloads(!d.created); err != nil {
		return err
	}

	link, err := nl.LinkByName(cfg.Name)
	if err != nil {
		return fmt.Errorf("look up after attach: %w", err)
	}
	d.ifindex = link.Attrs().Index
	mtu := link.Attrs().MTU
	if cfg.MTU != 0 && cfg.MTU != mtu {
		if err := nl.LinkSetMTU(link, cfg.MTU); err != nil {
			return fmt.Errorf("set MTU %d: %w", cfg.MTU, err)
		}
		if !d.created {
			d.origMTU = mtu
		}
		mtu = cfg.MTU
	}
	if !before.up {
		if err := nl.LinkSetUp(link); err != nil {
			return fmt.Errorf("set up: %w", err)
		}
		d.setUp = !d.created
	}
	if cfg.Offload {
		d.info.MaxFrame = MaxMTU + l2
	} else {
		d.info.MaxFrame = mtu + l2
	}
	return nil
}

// setOffloads gives a device with a vnet header every offload vnet
// handles. Without a header there is no way to tell us a packet still
// needs segmenting: with clear, whatever an earlier user enabled goes.
// Offloads are the device's, not a queue's: one file sets them.
func (d *Device) setOffloads(clear bool) error {
	fd := d.fds[0]
	if !d.vnet {
		if clear {
			if err := clearOffload(fd); err != nil {
				return fmt.Errorf("clear offload: %w", err)
			}
		}
		return nil
	}
	if err := setVnetHdrSize(fd); err != nil {
		return fmt.Errorf("set vnet header size: %w", err)
	}
	var err error
	if d.info.Offloads, err = setOffload(fd); err != nil {
		return fmt.Errorf("set offload: %w", err)
	}
	return nil
}

// start makes the queues over d.fds, whatever opened them: Open and
// FromFiles differ only in how they get the files and the device's
// state.
func (d *Device) start() error {
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	d.wake = wake
	// The queues read the max frame from here; a link watch, if the
	// device has one, keeps it current.
	d.link.maxFrame.Store(int32(d.info.MaxFrame))
	n := len(d.fds)
	d.rx = make([]rxQueue, n)
	d.tx = make([]txQueue, n)
	d.queues = make([]Queue, n)
	for i, fd := range d.fds {
		d.rx[i].init(d, fd)
		d.tx[i].init(d, fd)
		d.queues[i].init(d, &d.rx[i], &d.tx[i])
		d.ctrs = append(d.ctrs, &d.rx[i].ctr, &d.tx[i].ctr)
	}
	return nil
}

// undo reverts a failed open. The netlink handle works from any thread:
// its socket stays in the device's namespace.
func (d *Device) undo() {
	for _, fd := range d.fds {
		unix.Close(fd)
	}
	d.fds = nil
	if d.wake >= 0 {
		unix.Close(d.wake)
		d.wake = -1
	}
	if d.watch != nil {
		d.watch.Stop()
		d.watch = nil
	}
	if d.nl == nil {
		return
	}
	if !d.created {
		_ = d.restore() // best effort: the open error is what matters
	}
	d.nl.Close()
	d.nl = nil
}

// restore gives an existing device back its MTU and down state.
func (d *Device) restore() error {
	if !d.setUp && d.origMTU == 0 {
		return nil
	}
	link, err := d.nl.LinkByName(d.dev)
	if err != nil {
		if isNotFound(err) {
			return nil // deleted meanwhile: nothing to restore
		}
		return err
	}
	var errs []error
	if d.origMTU != 0 {
		if err := d.nl.LinkSetMTU(link, d.origMTU); err != nil {
			errs = append(errs, fmt.Errorf("restore MTU %d: %w", d.origMTU, err))
		}
	}
	if d.setUp {
		if err := d.nl.LinkSetDown(link); err != nil {
			errs = append(errs, fmt.Errorf("set down: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Info describes the port. Offloads are those the kernel accepted;
// MaxFrame follows the device's MTU if it has no vnet header.
func (d *Device) Info() port.Info {
	info := d.info
	info.MaxFrame = int(d.link.maxFrame.Load())
	return info
}

// ErrNoDevice is Open's error for a device to adopt that does not exist.
var ErrNoDevice = errors.New("no such device")

// Persist makes the device outlive its files (TUNSETPERSIST) if the
// program dies, so that the next program can adopt it (Config.Adopt)
// with its addresses and routes; Close still removes it, unless Keep.
func (d *Device) Persist() error { return d.setPersist(false) }

// Keep is Persist, and Close then leaves the device in its namespace,
// up, with its addresses and routes, for the next program to adopt.
// Packets sent to it meanwhile wait in its queue, up to its length, or
// are dropped.
func (d *Device) Keep() error { return d.setPersist(true) }

func (d *Device) setPersist(keep bool) error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.done {
		return fmt.Errorf("tun %s: persist: %w", d.info.Name, errClosed)
	}
	if !d.persist {
		if err := unix.IoctlSetInt(d.fds[0], unix.TUNSETPERSIST, 1); err != nil {
			return fmt.Errorf("tun %s: persist: %w", d.info.Name, err)
		}
	}
	d.persist, d.kept = true, keep
	return nil
}

// Created reports whether Open created or adopted the device (and Close removes it)
// rather than attaching to an existing one or running over files
// (FromFiles).
func (d *Device) Created() bool { return d.created }

// Stats returns the device's counters, summed over its queues.
func (d *Device) Stats() Stats { return statsOf(d.ctrs) }

// RxQueue returns receive queue i, or nil if there is no such queue.
func (d *Device) RxQueue(i int) port.RxQueue {
	if i < 0 || i >= len(d.rx) {
		return nil
	}
	return &d.rx[i]
}

// TxQueue returns transmit queue i, or nil if there is no such queue.
func (d *Device) TxQueue(i int) port.TxQueue {
	if i < 0 || i >= len(d.tx) {
		return nil
	}
	return &d.tx[i]
}

// Queue returns queue i for callers that do not run an engine, or nil
// if there is no such queue.
func (d *Device) Queue(i int) *Queue {
	if i < 0 || i >= len(d.queues) {
		return nil
	}
	return &d.queues[i]
}

// Close closes every queue's file. A device Open created is removed by
// that, which Close verifies; an existing one is left as Open found it;
// the files of FromFiles are closed and nothing else is done. Queue calls
// blocked in Read or Receive return an error matching port.ErrDown, and
// Close waits for Queue calls in progress. Close is idempotent. A device
// handed to an engine is closed by the engine (CloseInto).
func (d *Device) Close() error { return d.CloseInto(nil) }

// CloseInto is Close for the engine that ran the device (port.Port): its
// workers must have stopped. On the system-call path no buffers are held
// between calls, so c is not used. On the io_uring path the requests
// still in flight are cancelled and every buffer lent to the kernel is
// taken back into c (if nil, into a cache made for it); rings a worker
// attached must have been detached by it.
func (d *Device) CloseInto(c *buffer.Cache) error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.done {
		return nil
	}
	d.done = true
	d.closed.Store(true)
	d.watch.Stop()
	var errs []error
	// The eventfd stays readable: every blocked poll and any that starts
	// before the lock below returns.
	if _, err := unix.Write(d.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		errs = append(errs, fmt.Errorf("wake readers: %w", err))
	}
	d.ioMu.Lock()
	defer d.ioMu.Unlock()
	if err := d.stopUring(c); err != nil {
		errs = append(errs, err)
	}
	if d.persist && !d.kept && len(d.fds) > 0 {
		// An adopted device goes as one Open created.
		if err := unix.IoctlSetInt(d.fds[0], unix.TUNSETPERSIST, 0); err != nil {
			errs = append(errs, fmt.Errorf("clear persist: %w", err))
		}
	}
	for i, fd := range d.fds {
		var err error
		if d.files != nil {
			err = d.files[i].Close()
		} else {
			err = unix.Close(fd)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("close queue %d: %w", i, err))
		}
	}
	d.fds, d.files = nil, nil
	unix.Close(d.wake)
	d.wake = -1
	if d.nl != nil {
		switch {
		case d.kept: // left as it is, for the next program
		case d.created:
			gone, err := waitGone(d.nl, d.dev, goneTimeout)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("check removal: %w", err))
			case !gone:
				errs = append(errs, fmt.Errorf("still exists %v after its last queue closed", goneTimeout))
			}
		default:
			if err := d.restore(); err != nil {
				errs = append(errs, err)
			}
		}
		d.nl.Close()
		d.nl = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tun %s: close: %w", d.info.Name, err)
	}
	return nil
}
