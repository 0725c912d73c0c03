package afxdp

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// xsk is one AF_XDP socket: bound to one queue of the interface, with
// its receive and transmit rings and the fill and completion rings of
// its share of the UMEM.
type xsk struct {
	fd    int
	queue int
	rx    *ring // descriptors the kernel received into UMEM frames
	tx    *ring // descriptors of frames to send
	fill  *ring // frames lent to the kernel to receive into
	comp  *ring // frames the kernel has sent
}

// newXSK opens a socket in the calling thread's namespace and maps its
// rings; bind (umem.go) attaches it to the UMEM and the queue.
func newXSK(queue int, cfg *Config) (s *xsk, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) {
			err = fmt.Errorf("%w (a kernel without CONFIG_XDP_SOCKETS)", err)
		}
		return nil, fmt.Errorf("queue %d: AF_XDP socket: %w", queue, err)
	}
	s = &xsk{fd: fd, queue: queue}
	defer func() {
		if err != nil {
			s.close()
			err = fmt.Errorf("queue %d: %w", queue, err)
		}
	}()
	for _, r := range []struct {
		opt, n int
		name   string
	}{
		{unix.XDP_UMEM_FILL_RING, cfg.FillRing, "fill"},
		{unix.XDP_UMEM_COMPLETION_RING, cfg.CompletionRing, "completion"},
		{unix.XDP_RX_RING, cfg.RxRing, "rx"},
		{unix.XDP_TX_RING, cfg.TxRing, "tx"},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, r.opt, r.n); err != nil {
			return nil, fmt.Errorf("%s ring of %d: %w", r.name, r.n, err)
		}
	}
	// One wakeup sends the whole transmit ring, not the kernel's default
	// of 32 frames (XDP_MAX_TX_SKB_BUDGET, Linux 6.17; before it, a
	// burst of 64 takes two calls).
	_ = unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, cfg.TxRing)
	var off unix.XDPMmapOffsets
	if err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return nil, fmt.Errorf("ring offsets: %w", err)
	}
	desc, addr := int(unsafe.Sizeof(unix.XDPDesc{})), 8
	if s.fill, err = mapRing(fd, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, cfg.FillRing, addr); err != nil {
		return nil, err
	}
	if s.comp, err = mapRing(fd, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, cfg.CompletionRing, addr); err != nil {
		return nil, err
	}
	if s.rx, err = mapRing(fd, off.Rx, unix.XDP_PGOFF_RX_RING, cfg.RxRing, desc); err != nil {
		return nil, err
	}
	if s.tx, err = mapRing(fd, off.Tx, unix.XDP_PGOFF_TX_RING, cfg.TxRing, desc); err != nil {
		return nil, err
	}
	return s, nil
}

// close unmaps the rings and closes the socket, which unbinds it: the
// kernel no longer touches any frame it was lent.
func (s *xsk) close() error {
	errs := []error{s.rx.unmap(), s.tx.unmap(), s.fill.unmap(), s.comp.unmap()}
	if s.fd >= 0 {
		errs = append(errs, unix.Close(s.fd))
		s.fd = -1
	}
	return errors.Join(errs...)
}

// zeroCopy reports whether the socket's UMEM is the driver's.
func (s *xsk) zeroCopy() (bool, error) {
	var opts struct{ Flags uint32 }
	if err := getsockopt(s.fd, unix.XDP_OPTIONS, unsafe.Pointer(&opts), unsafe.Sizeof(opts)); err != nil {
		return false, fmt.Errorf("XDP_OPTIONS: %w", err)
	}
	return opts.Flags&unix.XDP_OPTIONS_ZEROCOPY != 0, nil
}

// stats returns the kernel's counters of the socket.
func (s *xsk) stats() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	err := getsockopt(s.fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st))
	return st, err
}

// kickTx asks the kernel to send what the transmit ring holds (a
// sendto with nothing to send, as the AF_XDP API has it).
func (s *xsk) kickTx() unix.Errno {
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// kickFill tells a zero-copy driver that the fill ring has frames again
// (a recvfrom with nowhere to receive into).
func (s *xsk) kickFill() unix.Errno {
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

func getsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

func setsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0)
	if e != 0 {
		return e
	}
	return nil
}
