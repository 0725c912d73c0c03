package afxdp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is one of a socket's four rings, mapped from the kernel: entries
// between a producer and a consumer index that the kernel and the port
// share, one side each. The port's side keeps its own index in local and
// publishes it with one store per burst; it reads the kernel's index
// only when what it last read (other) does not suffice, as package
// ring's SPSC rings do.
type ring struct {
	mem        []byte
	prod, cons *atomic.Uint32
	flags      *atomic.Uint32
	size, mask uint32
	local      uint32 // the port's index: producer or consumer
	other      uint32 // the kernel's, as last read
	descOff    uintptr
}

// mapRing maps the ring at page offset pgoff of socket fd, with n entries
// of entry bytes laid out as off says.
func mapRing(fd int, off unix.XDPRingOffset, pgoff int64, n, entry int) (*ring, error) {
	size := int(off.Desc) + n*entry
	mem, err := unix.Mmap(fd, pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap ring: %w", err)
	}
	base := unsafe.Pointer(unsafe.SliceData(mem))
	r := &ring{
		mem:     mem,
		prod:    (*atomic.Uint32)(unsafe.Add(base, off.Producer)),
		cons:    (*atomic.Uint32)(unsafe.Add(base, off.Consumer)),
		flags:   (*atomic.Uint32)(unsafe.Add(base, off.Flags)),
		size:    uint32(n),
		mask:    uint32(n - 1),
		descOff: uintptr(off.Desc),
	}
	return r, nil
}

func (r *ring) unmap() error {
	if r == nil || r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	return err
}

// free returns how many entries a producer may write now, at least want
// if that many are free: the kernel's consumer index is read only when
// the cached one shows fewer.
func (r *ring) free(want uint32) uint32 {
	n := r.size - (r.local - r.other)
	if n < want {
		r.other = r.cons.Load()
		n = r.size - (r.local - r.other)
	}
	return n
}

// submit publishes k entries written after the producer index.
func (r *ring) submit(k uint32) {
	r.local += k
	r.prod.Store(r.local)
}

// ready returns how many entries a consumer may read now, reading the
// kernel's producer index only if the cached one shows fewer than want.
func (r *ring) ready(want uint32) uint32 {
	n := r.other - r.local
	if n < want {
		r.other = r.prod.Load()
		n = r.other - r.local
	}
	return n
}

// release gives k read entries back to the kernel.
func (r *ring) release(k uint32) {
	r.local += k
	r.cons.Store(r.local)
}

// pending reports whether the kernel produced entries not yet read.
func (r *ring) pending() bool { return r.prod.Load() != r.local }

// needWakeup reports whether the kernel asks for a system call to move
// the ring on (XDP_RING_NEED_WAKEUP).
func (r *ring) needWakeup() bool { return r.flags.Load()&unix.XDP_RING_NEED_WAKEUP != 0 }

// desc returns the descriptor of entry i of a receive or transmit ring.
func (r *ring) desc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(r.mem)), r.descOff+uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// addr returns the address of entry i of a fill or completion ring.
func (r *ring) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(r.mem)), r.descOff+uintptr(i&r.mask)*8))
}
