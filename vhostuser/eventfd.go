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
//   - a call is written non-blocking, and a call that finds the counter
//     saturated fails and is counted (cCallsFailed), as the guest has a
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
// counter saturated, can still make a call block: Linux has no write
// that cannot block on an eventfd (pwritev2's RWF_NOWAIT is refused
// with EOPNOTSUPP for eventfds, as of 6.18). docs/design.md says so.
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
// allocates nothing.
var eight = func() (b [8]byte) {
	binary.NativeEndian.PutUint64(b[:], 1)
	return b
}()

// signalFD adds one to an eventfd of the port's own (wakeFD), which is
// non-blocking and never saturates.
func signalFD(fd int) { _, _ = unix.Write(fd, eight[:]) }

// callGuest adds one to the guest's call eventfd, and reports whether it
// did: a counter the guest does not drain saturates (EAGAIN).
func callGuest(fd int) bool {
	_, err := unix.Write(fd, eight[:])
	return err == nil
}
