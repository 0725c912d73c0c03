package vxlan

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// golang.org/x/sys/unix defines Mmsghdr but wraps neither call.

// recvmmsg receives up to len(msgs) datagrams without blocking and
// returns how many; each message's Len is its datagram's length.
func recvmmsg(fd int, msgs []unix.Mmsghdr) (int, error) {
	for {
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), unix.MSG_DONTWAIT, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	}
}

// sendmmsg sends the datagrams of msgs in order, without blocking, and
// returns how many were sent. As sendmmsg(2) says, an error after the
// first message is not reported: the call returns the count, and the
// next call, starting at the message that failed, gets the error.
func sendmmsg(fd int, msgs []unix.Mmsghdr) (int, error) {
	for {
		n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), unix.MSG_DONTWAIT, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	}
}
