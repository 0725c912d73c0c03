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

// Buf is the metadata of one packet buffer: a window [head, head+len) into
// a fixed frame of a slab. It holds no Go pointers: the frame address is a
// uintptr into memory the GC does not manage, which is what keeps the
// metadata array out of the GC's scan. A *Buf is stable for the life of
// its pool.
//
// A Buf has one owner at a time. The owner may read and write its data and
// window; after Ref, every holder must treat both as read-only.
type Buf struct {
	addr  uintptr // frame start, inside an mmap'd slab
	head  uint32  // data offset in the frame
	len   uint32  // data length
	size  uint32  // frame size
	id    uint32  // index in the pool's metadata array
	next  uint32  // inbound-list link: id+1 of the next buffer, 0 ends
	refs  atomic.Int32
	owner uint16 // index of the Cache that handed it out, or free
	class Class
	mark  uint8 // per-packet flags of the datapath's own; 0 on Get
}

func (b *Buf) frame() []byte {
	return unsafe.Slice((*byte)(unsafe.Add(nil, b.addr)), b.size)
}

// Bytes returns the data window. It aliases the frame: valid until the
// buffer is freed.
func (b *Buf) Bytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Add(nil, b.addr+uintptr(b.head))), b.len)
}

// Frame returns the whole frame, headroom included, for a device to read
// into before SetData describes what it wrote.
func (b *Buf) Frame() []byte { return b.frame() }

// Len returns the length of the data.
func (b *Buf) Len() int { return int(b.len) }

// Headroom returns the free space before the data.
func (b *Buf) Headroom() int { return int(b.head) }

// Tailroom returns the free space after the data.
func (b *Buf) Tailroom() int { return int(b.size - b.head - b.len) }

// ID returns the buffer's index in its pool, usable as a device buffer id
// (see Cache.Build).
func (b *Buf) ID() uint32 { return b.id }

// Class returns the buffer's size class.
func (b *Buf) Class() Class { return b.class }

// Mark returns the packet's mark: flags the datapath defines for itself
// (such as "a virtio-net header precedes the data in the headroom"), like
// the kernel's skb->mark. Get clears it.
func (b *Buf) Mark() uint8 { return b.mark }

// SetMark sets the packet's mark.
func (b *Buf) SetMark(m uint8) { b.mark = m }

// SetData sets the data window to frame[off:off+n]. It reports false, and
// changes nothing, if the window does not fit the frame; callers treat a
// false from device-provided lengths as a drop.HdrTrunc or PktTooBig.
func (b *Buf) SetData(off, n int) bool {
	if off < 0 || n < 0 || off > int(b.size) || n > int(b.size)-off {
		return false
	}
	b.head, b.len = uint32(off), uint32(n)
	return true
}

// Prepend grows the data by n bytes at the front (skb_push) and returns the
// new leading bytes, or false if the headroom is smaller than n.
func (b *Buf) Prepend(n int) ([]byte, bool) {
	if n < 0 || n > int(b.head) {
		return nil, false
	}
	b.head -= uint32(n)
	b.len += uint32(n)
	return b.Bytes()[:n], true
}

// Append grows the data by n bytes at the end (skb_put) and returns the new
// trailing bytes, or false if the tailroom is smaller than n.
func (b *Buf) Append(n int) ([]byte, bool) {
	if n < 0 || n > b.Tailroom() {
		return nil, false
	}
	b.len += uint32(n)
	return b.Bytes()[b.len-uint32(n):], true
}

// TrimFront removes n bytes from the front of the data (skb_pull), or
// reports false if the data is shorter than n.
func (b *Buf) TrimFront(n int) bool {
	if n < 0 || n > int(b.len) {
		return false
	}
	b.head += uint32(n)
	b.len -= uint32(n)
	return true
}

// Truncate shortens the data to n bytes, or reports false if n is negative
// or longer than the data.
func (b *Buf) Truncate(n int) bool {
	if n < 0 || n > int(b.len) {
		return false
	}
	b.len = uint32(n)
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
