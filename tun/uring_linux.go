package tun

import (
	"errors"
	"fmt"

	"softnet.dev/buffer"
	"softnet.dev/internal/uring"
)

// uringOps are the operations io_uring queues use, with the kernel that
// brought each.
var uringOps = []struct {
	op   uint8
	name string
}{
	{uring.OpReadMultishot, "READ_MULTISHOT (Linux 6.7)"},
	{uring.OpWrite, "WRITE (Linux 5.6)"},
	{uring.OpWritev, "WRITEV (Linux 5.1)"},
	{uring.OpAsyncCancel, "ASYNC_CANCEL (Linux 5.5)"},
}

// uringCheck says whether this process can run io_uring queues now. A
// variable, so that a test can have io_uring refused without turning it
// off for the whole machine.
var uringCheck = checkUring

// checkUring sets up a ring each time rather than trusting an earlier
// answer: io_uring_disabled may have changed since.
func checkUring() error {
	r, err := uring.New(uring.Options{Entries: 2})
	if err != nil {
		return err
	}
	defer r.Close()
	p, err := r.Probe()
	if err != nil {
		return fmt.Errorf("%w: %w", uring.ErrUnavailable, err)
	}
	for _, o := range uringOps {
		if !p.Has(o.op) {
			return fmt.Errorf("%w: kernel lacks IORING_OP_%s", uring.ErrUnavailable, o.name)
		}
	}
	return nil
}

// chooseIO settles the device's I/O path before anything is opened.
func (d *Device) chooseIO(m IO) error {
	switch m {
	case IOSyscall:
		d.io = IOSyscall
	case IOUring:
		if err := uringCheck(); err != nil {
			return fmt.Errorf("io=uring: %w", err)
		}
		d.io = IOUring
	default:
		d.io = IOUring
		if err := uringCheck(); err != nil {
			d.io, d.ioWhy = IOSyscall, err
		}
	}
	return nil
}

// IO returns the I/O path the queues use and, if Config.IO was IOAuto
// and the queues use system calls, why io_uring was not usable.
func (d *Device) IO() (IO, error) { return d.io, d.ioWhy }

// startUring puts every queue on the io_uring path. RX queues join
// their worker's ring when it attaches them (internal/attach.Queue) or,
// failing that, get a ring of their own at the first Receive; TX rings
// are set up the same way: on the thread that will use them.
func (d *Device) startUring() error {
	if d.io != IOUring {
		return nil
	}
	for i := range d.rx {
		d.rx[i].uring = true
		d.tx[i].ur = newTxUring()
	}
	return nil
}

// stopUring tears every queue's own rings down, taking back every buffer
// lent to the kernel into c, or, if c is nil, into a cache of their pool
// made for the purpose. Queues on a worker's ring must have been
// detached.
func (d *Device) stopUring(c *buffer.Cache) error {
	var errs []error
	for i := range d.rx {
		rq, tq := &d.rx[i], &d.tx[i]
		if err := rq.closeRing(c); err != nil {
			errs = append(errs, fmt.Errorf("rx queue %d: %w", i, err))
		}
		if tq.ur != nil {
			if err := withCache(c, tq.ur.pool, func(c *buffer.Cache) error { return tq.ur.close(tq, c) }); err != nil {
				errs = append(errs, fmt.Errorf("tx queue %d: %w", i, err))
			}
		}
	}
	return errors.Join(errs...)
}

// withCache runs f with c, or with a temporary cache of pool if c is nil
// (Close's c may be); with neither, nothing was ever lent.
func withCache(c *buffer.Cache, pool *buffer.Pool, f func(*buffer.Cache) error) error {
	if c == nil {
		if pool == nil {
			return f(nil)
		}
		tmp, err := pool.NewCache(nil)
		if err != nil {
			return fmt.Errorf("cache to take buffers back: %w", err)
		}
		defer tmp.Close()
		c = tmp
	}
	return f(c)
}
