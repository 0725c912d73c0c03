package uring

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrUnavailable is matched by the errors of New and Supported when the
// kernel has no io_uring or refuses it to this process.
var ErrUnavailable = errors.New("io_uring unavailable")

// disabledPath is the sysctl that turns io_uring off (Linux 6.6): 0
// allows it, 1 allows it to io_uring_group and privileged processes, 2
// forbids it.
const disabledPath = "/proc/sys/kernel/io_uring_disabled"

// Options set up a Ring.
type Options struct {
	// Entries is the submission queue size; the kernel rounds it up to a
	// power of two and clamps it. Zero means 64.
	Entries uint32
	// CQEntries is the completion queue size; zero means twice Entries.
	// Multishot requests post many completions per submission, so a
	// ring serving them wants it larger.
	CQEntries uint32
	// SingleIssuer promises that only the calling OS thread will submit
	// and wait, for the ring's whole life: the ring is set up with
	// IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, or, on a
	// kernel without them, IORING_SETUP_COOP_TASKRUN.
	SingleIssuer bool
}

// Ring is an io_uring instance. It is not safe for concurrent use: one
// goroutine prepares, submits and reaps.
type Ring struct {
	fd       int
	flags    uint32 // setup flags the kernel accepted
	features uint32

	ringMem, sqeMem []byte

	sqHead, sqTail *uint32
	sqFlags        *uint32
	sqMask         uint32
	sqEntries      uint32
	sqes           []SQE
	sqLocal        uint32 // tail including prepared, unpublished entries

	cqHead, cqTail *uint32
	cqMask         uint32
	cqEntries      uint32
	cqes           []CQE
	cqLocal        uint32 // head including seen, unpublished entries

	arg getEventsArg
	ts  unix.Timespec
}

// New sets up a ring.
func New(opt Options) (*Ring, error) {
	if opt.Entries == 0 {
		opt.Entries = 64
	}
	if opt.CQEntries == 0 {
		opt.CQEntries = 2 * opt.Entries
	}
	base := uint32(setupClamp | setupSubmitAll)
	attempts := []uint32{base}
	if opt.SingleIssuer {
		attempts = []uint32{
			base | setupSingleIssuer | setupDeferTaskrun | setupTaskrunFlag,
			base | setupSingleIssuer | setupDeferTaskrun,
			base | setupCoopTaskrun | setupTaskrunFlag,
			base,
		}
	}
	var p params
	var fd int
	var errno unix.Errno
	for _, flags := range attempts {
		p = params{flags: flags | 1<<3, cqEntries: opt.CQEntries} // IORING_SETUP_CQSIZE
		fd, errno = setup(opt.Entries, &p)
		if errno != unix.EINVAL {
			break // EINVAL: a flag this kernel lacks; try fewer
		}
	}
	if errno != 0 {
		return nil, setupError(errno)
	}
	r := &Ring{fd: fd, flags: p.flags, features: p.features}
	if err := r.mapRings(&p); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// setupError explains why io_uring_setup failed.
func setupError(errno unix.Errno) error {
	switch errno {
	case unix.ENOSYS:
		return fmt.Errorf("%w: io_uring_setup: the kernel has no io_uring (%w)", ErrUnavailable, errno)
	case unix.EPERM, unix.EACCES:
		if b, err := os.ReadFile(disabledPath); err == nil {
			if v := strings.TrimSpace(string(b)); v != "0" {
				return fmt.Errorf("%w: io_uring_setup: %s is %s (%w)", ErrUnavailable, disabledPath, v, errno)
			}
		}
		return fmt.Errorf("%w: io_uring_setup refused, by a seccomp or LSM policy perhaps (%w)", ErrUnavailable, errno)
	}
	return fmt.Errorf("io_uring_setup: %w", errno)
}

func (r *Ring) mapRings(p *params) error {
	if r.features&featSingleMmap == 0 {
		return fmt.Errorf("%w: kernel lacks IORING_FEAT_SINGLE_MMAP (older than 5.4)", ErrUnavailable)
	}
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(CQE{})))
	var err error
	r.ringMem, err = unix.Mmap(r.fd, offSQRing, max(sqSize, cqSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap rings: %w", err)
	}
	r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(SQE{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap SQEs: %w", err)
	}
	m := r.ringMem
	r.sqHead = (*uint32)(unsafe.Pointer(&m[p.sqOff.head]))
	r.sqTail = (*uint32)(unsafe.Pointer(&m[p.sqOff.tail]))
	r.sqFlags = (*uint32)(unsafe.Pointer(&m[p.sqOff.flags]))
	r.sqMask = *(*uint32)(unsafe.Pointer(&m[p.sqOff.ringMask]))
	r.sqEntries = *(*uint32)(unsafe.Pointer(&m[p.sqOff.ringEntries]))
	r.sqes = unsafe.Slice((*SQE)(unsafe.Pointer(&r.sqeMem[0])), r.sqEntries)
	// An identity index array: SQE i is always at slot i, so submitting
	// only moves the tail.
	array := unsafe.Slice((*uint32)(unsafe.Pointer(&m[p.sqOff.array])), r.sqEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	r.sqLocal = atomic.LoadUint32(r.sqTail)
	r.cqHead = (*uint32)(unsafe.Pointer(&m[p.cqOff.head]))
	r.cqTail = (*uint32)(unsafe.Pointer(&m[p.cqOff.tail]))
	r.cqMask = *(*uint32)(unsafe.Pointer(&m[p.cqOff.ringMask]))
	r.cqEntries = *(*uint32)(unsafe.Pointer(&m[p.cqOff.ringEntries]))
	r.cqes = unsafe.Slice((*CQE)(unsafe.Pointer(&m[p.cqOff.cqes])), r.cqEntries)
	r.cqLocal = atomic.LoadUint32(r.cqHead)
	return nil
}

// FD returns the ring's file descriptor.
func (r *Ring) FD() int { return r.fd }

// SingleIssuer reports whether the ring runs completion work only when
// its thread enters it (DEFER_TASKRUN).
func (r *Ring) SingleIssuer() bool { return r.flags&setupDeferTaskrun != 0 }

// Mode names the task-work mode the kernel accepted, for logs.
func (r *Ring) Mode() string {
	switch {
	case r.flags&setupDeferTaskrun != 0:
		return "single-issuer,defer-taskrun"
	case r.flags&setupCoopTaskrun != 0:
		return "coop-taskrun"
	}
	return "default"
}

// SQEntries and CQEntries return the queue sizes the kernel chose.
func (r *Ring) SQEntries() uint32 { return r.sqEntries }
func (r *Ring) CQEntries() uint32 { return r.cqEntries }

// sqSpace is the number of free submission slots: tail and head are free
// running 32-bit counters, so their difference is right across wrap.
func sqSpace(head, tail, entries uint32) uint32 { return entries - (tail - head) }

// cqReady is the number of completions between head and tail.
func cqReady(head, tail uint32) uint32 { return tail - head }

// SQSpace returns the number of SQEs GetSQE can still hand out.
func (r *Ring) SQSpace() uint32 { return sqSpace(atomic.LoadUint32(r.sqHead), r.sqLocal, r.sqEntries) }

// GetSQE returns the next submission entry, zeroed, or nil if the queue
// is full (submit first). It is published by the next Submit.
func (r *Ring) GetSQE() *SQE {
	if sqSpace(atomic.LoadUint32(r.sqHead), r.sqLocal, r.sqEntries) == 0 {
		return nil
	}
	e := &r.sqes[r.sqLocal&r.sqMask]
	*e = SQE{}
	r.sqLocal++
	return e
}

// Prepared returns the number of entries prepared and not yet taken by
// the kernel.
func (r *Ring) Prepared() uint32 { return r.sqLocal - atomic.LoadUint32(r.sqHead) }

// Unprepare drops the entries prepared and not taken by the kernel, as
// after a Submit that failed (io_uring_enter refuses the whole call, for
// example when the kernel cannot allocate requests): a caller that
// cannot let them go out later, when whatever they name may have been
// closed, gives them up. The kernel reads the queue only when the ring
// is entered (this package sets up no SQPOLL thread), so moving the
// published tail back is safe.
func (r *Ring) Unprepare() {
	r.sqLocal = atomic.LoadUint32(r.sqHead)
	atomic.StoreUint32(r.sqTail, r.sqLocal)
}

// Submit publishes the prepared entries and submits them, without
// waiting; it also runs pending completion work, so that completions are
// visible after it. It returns the number submitted.
func (r *Ring) Submit() (int, error) { return r.enter(0, -1) }

// SubmitAndWait submits like Submit and then waits until at least
// minComplete completions are ready, or timeout passes (a negative
// timeout waits without bound). A timeout is not an error.
func (r *Ring) SubmitAndWait(minComplete uint32, timeout time.Duration) (int, error) {
	return r.enter(minComplete, timeout)
}

func (r *Ring) enter(minComplete uint32, timeout time.Duration) (int, error) {
	atomic.StoreUint32(r.sqTail, r.sqLocal)
	r.publishCQ()
	flags := uintptr(enterGetEvents)
	var argp unsafe.Pointer
	argsz := uintptr(0)
	if minComplete > 0 && timeout >= 0 {
		if r.features&featExtArg == 0 {
			return 0, errors.New("io_uring_enter: kernel lacks IORING_FEAT_EXT_ARG for a timed wait")
		}
		r.ts = unix.NsecToTimespec(timeout.Nanoseconds())
		r.arg = getEventsArg{ts: uint64(uintptr(unsafe.Pointer(&r.ts)))}
		argp, argsz = unsafe.Pointer(&r.arg), unsafe.Sizeof(r.arg)
		flags |= enterExtArg
	}
	submitted := 0
	for {
		n := r.Prepared()
		ret, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), uintptr(minComplete), flags, uintptr(argp), argsz)
		switch errno {
		case 0:
			submitted += int(ret)
			return submitted, nil
		case unix.EINTR:
			// A signal (Go's preemption) interrupted the wait before
			// anything was submitted; submit and wait again.
			continue
		case unix.ETIME:
			return submitted, nil
		}
		return submitted, fmt.Errorf("io_uring_enter: %w", errno)
	}
}

// TaskWork reports whether the kernel has queued completion work that
// only entering the ring runs (IORING_SQ_TASKRUN), on a ring set up with
// IORING_SETUP_TASKRUN_FLAG: one load, so that a poller that finds
// nothing to do makes no system call. On a ring without the flag it
// always reports true, and the caller enters as before.
func (r *Ring) TaskWork() bool {
	if r.flags&setupTaskrunFlag == 0 {
		return true
	}
	return atomic.LoadUint32(r.sqFlags)&sqTaskrun != 0
}

// Ready returns the number of completions waiting to be seen.
func (r *Ring) Ready() uint32 { return cqReady(r.cqLocal, atomic.LoadUint32(r.cqTail)) }

// CQE returns the i-th completion not yet seen, for i < Ready().
func (r *Ring) CQE(i uint32) *CQE { return &r.cqes[(r.cqLocal+i)&r.cqMask] }

// Seen marks n completions seen; their slots are given back to the kernel
// at the next Submit or Publish.
func (r *Ring) Seen(n uint32) { r.cqLocal += n }

// publishCQ releases the seen completion slots to the kernel.
func (r *Ring) publishCQ() {
	if atomic.LoadUint32(r.cqHead) != r.cqLocal {
		atomic.StoreUint32(r.cqHead, r.cqLocal)
	}
}

// RegisterFiles registers fds: requests with SQEFixedFile name them by
// index, which saves the kernel a file lookup per request.
func (r *Ring) RegisterFiles(fds []int) error {
	a := make([]int32, len(fds))
	for i, fd := range fds {
		a[i] = int32(fd)
	}
	if _, errno := register(r.fd, registerFiles, unsafe.Pointer(&a[0]), uintptr(len(a))); errno != 0 {
		return fmt.Errorf("io_uring_register files: %w", errno)
	}
	return nil
}

// UnregisterFiles gives up the files RegisterFiles registered. Close
// gives them up too, but only once the kernel has torn the ring down,
// later and asynchronously: a device whose last reference the ring
// held goes away only then.
func (r *Ring) UnregisterFiles() error {
	if _, errno := register(r.fd, unregisterFiles, nil, 0); errno != 0 {
		return fmt.Errorf("io_uring_register unregister files: %w", errno)
	}
	return nil
}

// RegisterEventfd makes the kernel signal fd when completions are
// posted, and on a DEFER_TASKRUN ring also when completion work is
// queued for the ring's thread: a thread sleeping in epoll wakes on it.
func (r *Ring) RegisterEventfd(fd int) error {
	v := int32(fd)
	if _, errno := register(r.fd, registerEventfd, unsafe.Pointer(&v), 1); errno != 0 {
		return fmt.Errorf("io_uring_register eventfd: %w", errno)
	}
	return nil
}

// Close unmaps the queues and closes the ring, which cancels whatever is
// still in flight (asynchronously: cancel and reap first to know when the
// kernel is done with buffers). Close is idempotent.
func (r *Ring) Close() error {
	for _, m := range []*[]byte{&r.sqeMem, &r.ringMem} {
		if *m != nil {
			_ = unix.Munmap(*m)
			*m = nil
		}
	}
	r.sqes, r.cqes = nil, nil
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	if err != nil {
		return fmt.Errorf("close io_uring: %w", err)
	}
	return nil
}
