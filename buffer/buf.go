package buffer

import (
	"sync/atomic"
	"unsafe"
)

// Class is the index of a size class in Config.Classes.
type Class uint8

// free is the owner of a buffer that is in a stack, the depot or an
// inbound list. Folding the state into the owner lets the free path check
// "in use by this cache" with one compare.
const free = 0xFFFF

// The fields of Buf.state: the owner in the low 16 bits, then the class,
// then the flags. Packing them lets the bulk free path check "owned by this
// cache and of this class" with one compare and lets Get reset all three
// with one store.
const (
	stateOwnerMask  = 0xFFFF
	stateClassShift = 16
	stateFlagsShift = 24
	stateOwnerClass = 1<<stateFlagsShift - 1
)

// ownedState is the state of a fresh buffer of the class handed out by the
// cache with the given index: no flags.
func ownedState(owner uint16, class Class) uint32 {
	return uint32(owner) | uint32(class)<<stateClassShift
}

// Buf is the metadata of one packet buffer: a window [head, head+len) into
// a fixed frame of a slab. It holds no Go pointers: the frame address is a
// uintptr into memory the GC does not manage, which is what keeps the
// metadata array out of the GC's scan. A *Buf is stable for the life of
// its pool.
//
// A Buf has one owner at a time. The owner may read and write its data and
// window; after Ref, every holder must treat both as read-only.
type Buf struct {
	addr uintptr // frame start, inside an mmap'd slab
	// win is the data window: its offset in the frame in the low 32 bits
	// and its length in the high 32, so that Get resets it with one store.
	// While the buffer is free it holds the inbound-list link instead
	// (see link), which keeps Buf at 32 bytes, two to a cache line.
	win  uint64
	size uint32 // frame size
	id   uint32 // index in the pool's metadata array
	refs atomic.Int32
	// state packs the index of the Cache that handed the buffer out (or
	// free), its class and its flags, the per-packet flags of the
	// datapath's own (0 on Get). See ownedState.
	state uint32
}

// window packs a data window for Buf.win.
func window(head, n uint32) uint64 { return uint64(n)<<32 | uint64(head) }

// link is the inbound-list link of a free buffer: id+1 of the next
// buffer, 0 at the end.
func (b *Buf) link() uint32 { return uint32(b.win) }

func (b *Buf) setLink(next uint32) { b.win = uint64(next) }

func (b *Buf) head() uint32    { return uint32(b.win) }
func (b *Buf) dataLen() uint32 { return uint32(b.win >> 32) }

func (b *Buf) owner() uint16 { return uint16(b.state) }

func (b *Buf) setOwner(owner uint16) {
	b.state = b.state&^stateOwnerMask | uint32(owner)
}

// maxFrame is larger than any frame Config allows (room up to 1 MiB plus
// headroom up to 4 KiB).
const maxFrame = 1 << 24

// slice returns the n bytes at offset off of the frame, which the callers
// keep inside it. Masking n with maxFrame-1 changes nothing, since no
// frame is that long, but tells the compiler so: the slice expression
// then needs no bound check, where unsafe.Slice would check for overflow
// on every call. Frame and Bytes are on every packet's path.
func (b *Buf) slice(off, n uint32) []byte {
	n &= maxFrame - 1
	return (*[maxFrame]byte)(unsafe.Add(nil, b.addr+uintptr(off)))[:n:n]
}

func (b *Buf) frame() []byte { return b.slice(0, b.size) }

// Bytes returns the data window. It aliases the frame: valid until the
// buffer is freed.
func (b *Buf) Bytes() []byte { return b.slice(b.head(), b.dataLen()) }

// Frame returns the whole frame, headroom included, for a device to read
// into before SetData describes what it wrote.
func (b *Buf) Frame() []byte { return b.frame() }

// Len returns the length of the data.
func (b *Buf) Len() int { return int(b.dataLen()) }

// Headroom returns the free space before the data.
func (b *Buf) Headroom() int { return int(b.head()) }

// Tailroom returns the free space after the data.
func (b *Buf) Tailroom() int { return int(b.size - b.head() - b.dataLen()) }

// ID returns the buffer's index in its pool, usable as a device buffer id
// (see Cache.Build).
func (b *Buf) ID() uint32 { return b.id }

// Class returns the buffer's size class.
func (b *Buf) Class() Class { return Class(b.state >> stateClassShift) }

// Flags returns the packet's flags: eight bits that the port which
// received it leaves for the port that sends it (package tun's
// FlagVnetHdr: "a virtio-net header precedes the data in the headroom").
// Get clears them.
func (b *Buf) Flags() uint8 { return uint8(b.state >> stateFlagsShift) }

// SetFlags sets the packet's flags.
func (b *Buf) SetFlags(m uint8) {
	b.state = b.state&stateOwnerClass | uint32(m)<<stateFlagsShift
}

// SetData sets the data window to frame[off:off+n]. It reports false, and
// changes nothing, if the window does not fit the frame; callers treat a
// false from device-provided lengths as a drop.HdrTrunc or PktTooBig.
func (b *Buf) SetData(off, n int) bool {
	if off < 0 || n < 0 || off > int(b.size) || n > int(b.size)-off {
		return false
	}
	b.win = window(uint32(off), uint32(n))
	return true
}

// Prepend grows the data by n bytes at the front (skb_push) and returns the
// new leading bytes, or false if the headroom is smaller than n.
func (b *Buf) Prepend(n int) ([]byte, bool) {
	if n < 0 || n > int(b.head()) {
		return nil, false
	}
	b.win = window(b.head()-uint32(n), b.dataLen()+uint32(n))
	return b.Bytes()[:n], true
}

// Append grows the data by n bytes at the end (skb_put) and returns the new
// trailing bytes, or false if the tailroom is smaller than n.
func (b *Buf) Append(n int) ([]byte, bool) {
	if n < 0 || n > b.Tailroom() {
		return nil, false
	}
	b.win += uint64(n) << 32
	return b.Bytes()[b.dataLen()-uint32(n):], true
}

// TrimFront removes n bytes from the front of the data (skb_pull), or
// reports false if the data is shorter than n.
func (b *Buf) TrimFront(n int) bool {
	if n < 0 || n > int(b.dataLen()) {
		return false
	}
	b.win = window(b.head()+uint32(n), b.dataLen()-uint32(n))
	return true
}

// Truncate shortens the data to n bytes, or reports false if n is negative
// or longer than the data.
func (b *Buf) Truncate(n int) bool {
	if n < 0 || n > int(b.dataLen()) {
		return false
	}
	b.win = window(b.head(), uint32(n))
	return true
}

// Ref adds a reference for another holder (skb_get). From then on the
// buffer is shared: every holder frees it once with Consume or Drop, the
// last one returns it, and nobody may change its data or window.
//
// While a buffer has a single reference, freeing it costs no atomic
// read-modify-write; only shared buffers pay for one.
func (b *Buf) Ref() { b.refs.Add(1) }

// Refs returns the number of references.
func (b *Buf) Refs() int { return int(b.refs.Load()) }

// unref drops one reference and reports whether it was the last.
func (b *Buf) unref() bool {
	// A plain load suffices to see that nobody else holds a reference:
	// others could only have been added by this holder.
	if b.refs.Load() == 1 {
		return true
	}
	if b.refs.Add(-1) != 0 {
		return false
	}
	b.refs.Store(1)
	return true
}
