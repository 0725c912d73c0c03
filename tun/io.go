package tun

import "fmt"

// IO is how a device's queues move packets.
type IO uint8

const (
	// IOAuto uses io_uring if the kernel supports what the queues need
	// (multishot read, Linux 6.7) and lets this process use it, and the
	// system calls otherwise.
	IOAuto IO = iota
	// IOSyscall reads one packet per read(2) and writes one per write(2)
	// or writev(2).
	IOSyscall
	// IOUring reads through a multishot read into a ring of buffers lent
	// from the polling worker's cache, and submits a burst's writes with
	// one io_uring_enter; Open fails if the kernel cannot do it.
	IOUring
)

var ioNames = [...]string{IOAuto: "auto", IOSyscall: "syscall", IOUring: "uring"}

func (m IO) String() string {
	if int(m) < len(ioNames) {
		return ioNames[m]
	}
	return fmt.Sprintf("io(%d)", m)
}

// UnmarshalText sets m from its name: "auto", "syscall" or "uring"
// (encoding.TextUnmarshaler, so that flags and configuration files take
// it as text).
func (m *IO) UnmarshalText(text []byte) error {
	for i, n := range ioNames {
		if string(text) == n {
			*m = IO(i)
			return nil
		}
	}
	return fmt.Errorf("unknown I/O mode %q: want auto, syscall or uring", text)
}
