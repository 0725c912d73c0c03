package afxdp

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
)

// A UMEM is the memory AF_XDP sockets receive into and send from. Here
// it is one class's slab of the port's buffer pool, registered once and
// shared by every socket of every port on that pool and class
// (XDP_SHARED_UMEM): a received frame is already a worker's buffer, and
// a buffer of that class is sent without a copy. Each socket has its own
// fill and completion rings, since each is bound to its own queue.
//
// The kernel settles a UMEM's mode with its first socket: zero-copy
// (the driver's) or copy, and multi-buffer or not; later sockets inherit
// it. So there is a UMEM per pool, class and mode, kept while a socket
// uses it: a socket joins by naming any bound member (the kernel wants a
// bound socket's descriptor, and keeps the UMEM alive while any member
// is), and the last one to close frees it.
type umemKey struct {
	pool  *buffer.Pool
	class buffer.Class
	zc    bool
}

type umem struct {
	key     umemKey
	sg      bool   // multi-buffer (XDP_USE_SG)
	members []*xsk // bound sockets
}

var umems = struct {
	sync.Mutex
	m map[umemKey]*umem
}{m: map[umemKey]*umem{}}

// bindResult is how a socket was bound.
type bindResult struct {
	zc, sg bool
}

// bind binds s to queue s.queue of the interface ifindex (in the
// calling thread's namespace), on the shared UMEM of pool's class, in
// the mode zc allows. A socket joins an existing UMEM of a mode it may
// use, zero-copy first; failing that it registers the slab as a new
// UMEM. So in ZeroCopyAuto a NIC's port opened after veth ports joins
// their copy-mode UMEM: ZeroCopyOn gives it a zero-copy one.
func bind(s *xsk, ifindex int, pool *buffer.Pool, class buffer.Class, zc ZeroCopy) (bindResult, error) {
	umems.Lock()
	defer umems.Unlock()
	// A zero-copy driver checks that an unaligned frame does not cross
	// into a page that is not contiguous in DMA space, and skips a fill
	// entry that does without returning it: such frames would be lost
	// one by one. Zero-copy takes aligned frames only.
	frameOK := aligned(pool.Slab(class).Frame)
	var modes []bool
	switch {
	case zc == ZeroCopyOn && !frameOK:
		return bindResult{}, fmt.Errorf("zero-copy needs UMEM frames of 2048 or 4096 bytes, not the pool's %d (a class whose room plus the pool's headroom is one of them)", pool.Slab(class).Frame)
	case zc == ZeroCopyOn:
		modes = []bool{true}
	case zc == ZeroCopyOff || !frameOK:
		zc, modes = ZeroCopyOff, []bool{false}
	default:
		modes = []bool{true, false}
	}
	var joinErr error
	for _, mode := range modes {
		u := umems.m[umemKey{pool, class, mode}]
		if u == nil {
			continue
		}
		sa := &unix.SockaddrXDP{Flags: unix.XDP_SHARED_UMEM, Ifindex: uint32(ifindex), QueueID: uint32(s.queue), SharedUmemFD: uint32(u.members[0].fd)}
		err := unix.Bind(s.fd, sa)
		if err == nil {
			u.members = append(u.members, s)
			return bindResult{zc: mode, sg: u.sg}, nil
		}
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return bindResult{}, bindError(err, s.queue)
		}
		joinErr = err // a zero-copy UMEM on a driver without it
	}
	if zc == ZeroCopyOn && joinErr != nil {
		return bindResult{}, fmt.Errorf("queue %d: the driver has no zero-copy AF_XDP: %w", s.queue, joinErr)
	}
	return register(s, ifindex, pool, class, zc)
}

// register makes the slab of pool's class a new UMEM on s and binds s.
// In ZeroCopyAuto the kernel chooses (zero-copy where the driver has
// it) and the socket says what it chose.
func register(s *xsk, ifindex int, pool *buffer.Pool, class buffer.Class, zc ZeroCopy) (bindResult, error) {
	slab := pool.Slab(class)
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(slab.Mem)))),
		Len:  uint64(len(slab.Mem)),
		Size: uint32(slab.Frame),
	}
	if !aligned(slab.Frame) {
		// Frames of any size at any offset; the pool's are a multiple of
		// 64 bytes (2176 for its default MTU class).
		reg.Flags = unix.XDP_UMEM_UNALIGNED_CHUNK_FLAG
	}
	// The kernel checks the structure's size against its own; the
	// tx_metadata_len field (Linux 6.8) is left zero.
	if err := setsockopt(s.fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return bindResult{}, fmt.Errorf("register %d frames of %d bytes as the UMEM: %w", len(slab.Mem)/slab.Frame, slab.Frame, err)
	}
	flags := uint16(unix.XDP_USE_NEED_WAKEUP | unix.XDP_USE_SG)
	switch zc {
	case ZeroCopyOn:
		flags |= unix.XDP_ZEROCOPY
	case ZeroCopyOff:
		flags |= unix.XDP_COPY
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex), QueueID: uint32(s.queue)}
	err := unix.Bind(s.fd, sa)
	sg := err == nil
	if err != nil && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)) {
		// A kernel before 6.6 knows no XDP_USE_SG, and a zero-copy
		// driver may not do multi-buffer: frames longer than a UMEM
		// frame are then dropped by the kernel (counted as PKT_TOO_BIG).
		sa.Flags &^= unix.XDP_USE_SG
		err = unix.Bind(s.fd, sa)
	}
	if err != nil {
		if zc == ZeroCopyOn && errors.Is(err, unix.EOPNOTSUPP) {
			return bindResult{}, fmt.Errorf("queue %d: the driver has no zero-copy AF_XDP: %w", s.queue, err)
		}
		return bindResult{}, bindError(err, s.queue)
	}
	isZC, err := s.zeroCopy()
	if err != nil {
		return bindResult{}, err
	}
	// No UMEM of this mode existed, or bind would have joined it.
	key := umemKey{pool, class, isZC}
	umems.m[key] = &umem{key: key, sg: sg, members: []*xsk{s}}
	return bindResult{zc: isZC, sg: sg}, nil
}

// unbind closes s, leaving its UMEM to the other members; the last one
// frees it. Under the lock, so that no socket joins through a descriptor
// being closed.
func unbind(s *xsk) error {
	umems.Lock()
	defer umems.Unlock()
	for k, u := range umems.m {
		if i := slices.Index(u.members, s); i >= 0 {
			u.members = slices.Delete(u.members, i, i+1)
			if len(u.members) == 0 {
				delete(umems.m, k)
			}
			break
		}
	}
	return s.close()
}

// aligned reports whether frames of this size can be the kernel's
// aligned chunks: a power of two no larger than a page.
func aligned(frame int) bool {
	return frame&(frame-1) == 0 && frame <= os.Getpagesize()
}

func bindError(err error, queue int) error {
	switch {
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("queue %d: bind: %w (another AF_XDP socket is bound to this queue)", queue, err)
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("queue %d: bind: %w (no such queue on the interface?)", queue, err)
	}
	return fmt.Errorf("queue %d: bind: %w", queue, err)
}
