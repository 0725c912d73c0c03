package memport

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// An eventfd is a pair queue's doorbell: a transmitter writes it only when
// the receiving worker armed the queue before going to sleep, so a busy
// pair makes no system calls at all.

// newEventFD returns a nonblocking eventfd with a zero count.
func newEventFD() (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("eventfd: %w", err)
	}
	return fd, nil
}

// one is the 8-byte count an eventfd write adds. Package-level so that
// signalling allocates nothing.
var one = func() (b [8]byte) {
	binary.NativeEndian.PutUint64(b[:], 1)
	return b
}()

// signalFD makes fd readable. EAGAIN (the count at its maximum) means it
// already is.
func signalFD(fd int) { _, _ = unix.Write(fd, one[:]) }

// resetFD reads fd's count back to zero, into buf (the caller's, so that
// it does not escape per call). EAGAIN means it was zero already.
func resetFD(fd int, buf *[8]byte) { _, _ = unix.Read(fd, buf[:]) }

func closeFD(fd int) error { return unix.Close(fd) }
