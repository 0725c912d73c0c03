package uring

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxBufRingEntries is the largest provided-buffer ring the kernel takes.
const MaxBufRingEntries = 1 << 15

// ringBuf is struct io_uring_buf.
type ringBuf struct {
	addr uint64
	len  uint32
	bid  uint16
	resv uint16 // in entry 0: the ring's tail
}

// BufRing is a provided-buffer ring (IORING_REGISTER_PBUF_RING): user
// space adds buffers at the tail, the kernel takes one from the head for
// each completion of a request with SQEBufferSelect in the ring's group,
// and the completion names it by id (CQE.BufID). The kernel's head is not
// visible, so the user counts what it lent: never more than Entries
// buffers may be in the ring.
type BufRing struct {
	ring    *Ring
	group   uint16
	mem     []byte
	bufs    []ringBuf
	mask    uint16
	tail    uint16 // including added, unpublished buffers
	tailw   *uint32
	entries int
}

// NewBufRing registers an empty ring of entries buffers (a power of two,
// at most MaxBufRingEntries) as buffer group group.
func (r *Ring) NewBufRing(group uint16, entries int) (*BufRing, error) {
	if entries < 1 || entries > MaxBufRingEntries || entries&(entries-1) != 0 {
		return nil, fmt.Errorf("buffer ring of %d entries: want a power of two up to %d", entries, MaxBufRingEntries)
	}
	// Page-aligned memory of our own, which the kernel maps in: an
	// anonymous mapping is, and the GC never sees it.
	size := entries * int(unsafe.Sizeof(ringBuf{}))
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap buffer ring: %w", err)
	}
	b := &BufRing{ring: r, group: group, mem: mem, mask: uint16(entries - 1), entries: entries}
	b.bufs = unsafe.Slice((*ringBuf)(unsafe.Pointer(&mem[0])), entries)
	b.tailw = (*uint32)(unsafe.Pointer(&mem[12])) // entry 0's bid and the tail
	reg := bufReg{ringAddr: uint64(uintptr(unsafe.Pointer(&mem[0]))), ringEntries: uint32(entries), bgid: group}
	if _, errno := register(r.fd, registerPbufRing, unsafe.Pointer(&reg), 1); errno != 0 {
		_ = unix.Munmap(mem)
		return nil, fmt.Errorf("io_uring_register pbuf ring (Linux 5.19): %w", errno)
	}
	return b, nil
}

// Group returns the ring's buffer group id, for SQE.BufGroup.
func (b *BufRing) Group() uint16 { return b.group }

// Entries returns the ring's size.
func (b *BufRing) Entries() int { return b.entries }

// Add places a buffer of n bytes at p, with id bid, after the ones added
// before. It is given to the kernel by the next Publish.
func (b *BufRing) Add(p unsafe.Pointer, n uint32, bid uint16) {
	e := &b.bufs[b.tail&b.mask]
	e.addr, e.len, e.bid = uint64(uintptr(p)), n, bid
	b.tail++
}

// Publish makes every added buffer available to the kernel.
func (b *BufRing) Publish() {
	var w uint32
	h := (*[2]uint16)(unsafe.Pointer(&w))
	h[0], h[1] = b.bufs[0].bid, b.tail
	atomic.StoreUint32(b.tailw, w)
}

// Close unregisters the ring and frees its memory. The buffers in it are
// the caller's: after Close (and after every request that could pick one
// has completed) the kernel uses none of them.
func (b *BufRing) Close() error {
	if b.mem == nil {
		return nil
	}
	var err error
	if b.ring.fd >= 0 {
		reg := bufReg{bgid: b.group}
		if _, errno := register(b.ring.fd, unregisterPbufRing, unsafe.Pointer(&reg), 1); errno != 0 {
			err = fmt.Errorf("io_uring_register unregister pbuf ring: %w", errno)
		}
	}
	_ = unix.Munmap(b.mem)
	b.mem, b.bufs = nil, nil
	return err
}
