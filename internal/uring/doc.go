// Package uring is a small io_uring binding on golang.org/x/sys/unix, with
// what softnet's TUN ports and vhost-user calls need and no more: a ring (Ring) with its
// submission and completion queues mapped from the kernel, registered
// files, a registered eventfd, feature probing (Probe), provided-buffer
// rings (BufRing), and preparation of NOP, READ_MULTISHOT, READ, WRITE,
// WRITEV and ASYNC_CANCEL requests.
//
// # Memory ordering
//
// The queues are shared with the kernel without locks. The kernel's rules
// (io_uring(7), include/uapi/linux/io_uring.h): the SQ tail, the CQ head
// and a buffer ring's tail are written by user space with release
// semantics after the entries they publish; the SQ head and the CQ tail
// are read with acquire semantics before the entries they cover. Go's
// sync/atomic loads and stores are sequentially consistent, which is
// stronger, so every shared index goes through them and entries are plain
// memory. A buffer ring's tail is 16 bits wide and Go has no 16-bit atomic
// store: it shares a 32-bit word with the first entry's buffer id, which
// only user space writes, so the pair is stored as one 32-bit word.
//
// # Threads
//
// A ring set up with SingleIssuer (IORING_SETUP_SINGLE_ISSUER and
// IORING_SETUP_DEFER_TASKRUN) accepts submissions and waits only from the
// OS thread that created it: its goroutine must be locked to that thread
// (runtime.LockOSThread) for the ring's life, and completions are
// processed only when that thread enters the ring. A ring without it
// works from any thread, at the cost of the kernel interrupting the
// submitting thread to run completion work.
//
// # Availability
//
// New fails with an error matching ErrUnavailable when the kernel has no
// io_uring (ENOSYS), when /proc/sys/kernel/io_uring_disabled forbids it,
// or when setup is refused (EPERM, for example by a seccomp filter); the
// error says which. Probe reports which operations the kernel supports.
//
// Preparing and submitting requests and reaping completions allocate
// nothing.
package uring
