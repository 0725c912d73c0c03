//go:build linux

package vhostuser

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Kick and call descriptors come from the front-end, which is not
// trusted: it may send a pipe, a socket, a regular file or a device
// where an eventfd belongs, or an eventfd that blocks. A worker that
// blocks on one stops every port it serves. So:
//   - a descriptor that is not an eventfd is refused (RefusedNotEventfd);
//   - a kick is never read: its queue's epoll set watches it
//     edge-triggered, and Arm takes the edges from the set (rxQueue.Arm);
//   - a call is made non-blocking, and written through an io_uring that
//     never makes the worker wait for it (call.go): a call that finds
//     the counter saturated waits in the kernel, and the calls meanwhile
//     are not made and are counted (cCallsFailed), as the guest has a
//     notification pending then anyway.

// checkEventfd returns an error unless fd is an eventfd. An eventfd is an
// anonymous inode, which only its /proc link tells from a timerfd, an
// epoll set or a signalfd.
func checkEventfd(fd int) error {
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return fmt.Errorf("cannot tell what the descriptor is: %w", err)
	}
	if link != "anon_inode:[eventfd]" {
		return fmt.Errorf("%s is not an eventfd", link)
	}
	return nil
}

// takeCall checks that fd is an eventfd and makes it non-blocking for
// the calls.
//
// O_NONBLOCK is a flag of the open file description, which the
// front-end shares: setting it changes the front-end's own descriptor
// too. QEMU (event_notifier_init) and DPDK's virtio-user create their
// call eventfds with EFD_NONBLOCK already, so for them nothing changes.
// A front-end that clears the flag again later, while it keeps the
// counter saturated, would make a write(2) block: Linux has no write
// that cannot block on an eventfd (pwritev2's RWF_NOWAIT is refused
// with EOPNOTSUPP for eventfds, as of 6.18). So calls go through an
// io_uring (call.go), and the flag only spares the kernel a detour: an
// io_uring write to a blocking eventfd is retried from the poll and
// then on an io-wq thread.
func takeCall(fd int) error {
	if err := checkEventfd(fd); err != nil {
		return err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return fmt.Errorf("set O_NONBLOCK: %w", err)
	}
	return nil
}

// eight is the 8-byte count of one, package-level so that a signal
// allocates nothing, and so that it stays valid while a call's write
// waits in the kernel.
var eight = func() (b [8]byte) {
	binary.NativeEndian.PutUint64(b[:], 1)
	return b
}()

// signalFD adds one to an eventfd of the port's own (wakeFD), which is
// non-blocking and never saturates.
func signalFD(fd int) { _, _ = unix.Write(fd, eight[:]) }
