package uring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Setup flags (IORING_SETUP_*).
const (
	setupClamp        = 1 << 4
	setupSubmitAll    = 1 << 7
	setupCoopTaskrun  = 1 << 8
	setupTaskrunFlag  = 1 << 9
	setupSingleIssuer = 1 << 12
	setupDeferTaskrun = 1 << 13
)

// Features (IORING_FEAT_*).
const (
	featSingleMmap = 1 << 0
	featExtArg     = 1 << 8
)

// SQ ring flags (IORING_SQ_*).
const sqTaskrun = 1 << 2

// Enter flags (IORING_ENTER_*).
const (
	enterGetEvents = 1 << 0
	enterExtArg    = 1 << 3
)

// Register opcodes (IORING_REGISTER_*).
const (
	registerFiles      = 2
	unregisterFiles    = 3
	registerEventfd    = 4
	registerProbe      = 8
	registerPbufRing   = 22
	unregisterPbufRing = 23
)

// mmap offsets (IORING_OFF_*).
const (
	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000
)

// Opcodes (enum io_uring_op) used here.
const (
	OpNop           uint8 = 0
	OpWritev        uint8 = 2
	OpAsyncCancel   uint8 = 14
	OpRead          uint8 = 22
	OpWrite         uint8 = 23
	OpReadMultishot uint8 = 49
)

// SQE flags (IOSQE_*).
const (
	SQEFixedFile    uint8 = 1 << 0
	SQEBufferSelect uint8 = 1 << 5
)

// CQE flags (IORING_CQE_F_*).
const (
	CQEBuffer      uint32 = 1 << 0 // the upper 16 bits hold the buffer id
	CQEMore        uint32 = 1 << 1 // a multishot request stays armed
	cqeBufferShift        = 16
)

// Cancel flags (IORING_ASYNC_CANCEL_*).
const (
	CancelAll uint32 = 1 << 0
	CancelAny uint32 = 1 << 2
)

// sqRingOffsets is struct io_sqring_offsets.
type sqRingOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// cqRingOffsets is struct io_cqring_offsets.
type cqRingOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// params is struct io_uring_params.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqRingOffsets
	cqOff                                                                  cqRingOffsets
}

// SQE is struct io_uring_sqe (64 bytes). The fields that unions share in
// the kernel's definition are named after the use this package makes of
// them.
type SQE struct {
	Opcode      uint8
	Flags       uint8
	IOPrio      uint16
	FD          int32
	Off         uint64
	Addr        uint64
	Len         uint32
	OpFlags     uint32 // rw_flags, cancel_flags, poll32_events, ...
	UserData    uint64
	BufGroup    uint16 // buf_index / buf_group
	Personality uint16
	FileIndex   uint32
	Addr3       uint64
	_           uint64
}

// CQE is struct io_uring_cqe (16 bytes).
type CQE struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// BufID returns the provided buffer a completion used, if it used one.
func (c *CQE) BufID() (uint16, bool) {
	return uint16(c.Flags >> cqeBufferShift), c.Flags&CQEBuffer != 0
}

// getEventsArg is struct io_uring_getevents_arg.
type getEventsArg struct {
	sigmask   uint64
	sigmaskSz uint32
	minWaitUs uint32
	ts        uint64
}

// bufReg is struct io_uring_buf_reg.
type bufReg struct {
	ringAddr    uint64
	ringEntries uint32
	bgid        uint16
	flags       uint16
	resv        [3]uint64
}

// probeHdr is struct io_uring_probe, followed by probeOp entries.
type probeHdr struct {
	lastOp, opsLen uint8
	resv           uint16
	resv2          [3]uint32
}

// probeOp is struct io_uring_probe_op.
type probeOp struct {
	op, resv uint8
	flags    uint16
	resv2    uint32
}

const opSupported = 1 // IO_URING_OP_SUPPORTED

// Sizes the kernel ABI fixes; a mistake here is a build failure.
var (
	_ [64 - unsafe.Sizeof(SQE{})]struct{}
	_ [unsafe.Sizeof(SQE{}) - 64]struct{}
	_ [16 - unsafe.Sizeof(CQE{})]struct{}
	_ [120 - unsafe.Sizeof(params{})]struct{}
	_ [unsafe.Sizeof(params{}) - 120]struct{}
	_ [40 - unsafe.Sizeof(bufReg{})]struct{}
	_ [24 - unsafe.Sizeof(getEventsArg{})]struct{}
)

func setup(entries uint32, p *params) (int, unix.Errno) {
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
	return int(fd), errno
}

func register(fd int, opcode uintptr, arg unsafe.Pointer, nr uintptr) (int, unix.Errno) {
	for {
		r, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(fd), opcode, uintptr(arg), nr, 0, 0)
		if errno != unix.EINTR {
			return int(r), errno
		}
	}
}
