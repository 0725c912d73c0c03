package uring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// PrepNop prepares a request that does nothing and completes with 0.
func (e *SQE) PrepNop(userData uint64) {
	e.Opcode, e.UserData = OpNop, userData
}

// PrepReadMultishot prepares a multishot read (Linux 6.7) of fd into
// buffers of group: one completion per read, each naming its buffer,
// with CQEMore while the request stays armed. fd is a registered file
// index if fixed.
func (e *SQE) PrepReadMultishot(fd int, fixed bool, group uint16, userData uint64) {
	e.Opcode, e.FD, e.UserData = OpReadMultishot, int32(fd), userData
	e.Flags = SQEBufferSelect
	if fixed {
		e.Flags |= SQEFixedFile
	}
	e.BufGroup = group
}

// PrepRead prepares a read of len(p) bytes at most into p, which must
// stay valid until the request completes.
func (e *SQE) PrepRead(fd int, p []byte, userData uint64) {
	e.Opcode, e.FD, e.UserData = OpRead, int32(fd), userData
	e.Addr, e.Len = uint64(uintptr(unsafe.Pointer(&p[0]))), uint32(len(p))
}

// PrepWrite prepares a write of n bytes at p; fd is a registered file
// index if fixed.
func (e *SQE) PrepWrite(fd int, fixed bool, p unsafe.Pointer, n int, userData uint64) {
	e.Opcode, e.FD, e.UserData = OpWrite, int32(fd), userData
	e.Addr, e.Len = uint64(uintptr(p)), uint32(n)
	if fixed {
		e.Flags |= SQEFixedFile
	}
}

// PrepWritev prepares a gathering write of iov. The iovec array must stay
// valid until Submit returns (IORING_FEAT_SUBMIT_STABLE), the data until
// the request completes.
func (e *SQE) PrepWritev(fd int, fixed bool, iov []unix.Iovec, userData uint64) {
	e.Opcode, e.FD, e.UserData = OpWritev, int32(fd), userData
	e.Addr, e.Len = uint64(uintptr(unsafe.Pointer(&iov[0]))), uint32(len(iov))
	if fixed {
		e.Flags |= SQEFixedFile
	}
}

// PrepCancel prepares the cancellation of the request with user data
// target, or with flags CancelAny of every request. It completes with the
// number cancelled (CancelAll, CancelAny), 0, -ENOENT if nothing matched
// or -EALREADY if the request was running.
func (e *SQE) PrepCancel(target uint64, flags uint32, userData uint64) {
	e.Opcode, e.UserData = OpAsyncCancel, userData
	e.Addr, e.OpFlags = target, flags
	e.FD = -1
}
