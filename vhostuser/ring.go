//go:build linux

package vhostuser

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"softnet.dev/port"
)

// The split virtqueue (virtio 1.x, "Split Virtqueues"): a descriptor
// table, the driver's available ring and the device's used ring, all in
// guest memory and all little-endian.
const (
	descLen = 16 // struct virtq_desc: addr u64, len u32, flags u16, next u16

	descNext     = 1 // VIRTQ_DESC_F_NEXT
	descWrite    = 2 // VIRTQ_DESC_F_WRITE: device-writable
	descIndirect = 4 // VIRTQ_DESC_F_INDIRECT, not offered

	usedNoNotify      = 1 // VIRTQ_USED_F_NO_NOTIFY: the device polls, no kicks please
	availNoInterrupt  = 1 // VIRTQ_AVAIL_F_NO_INTERRUPT: the driver polls, no calls
	maxQueueSize      = 32768
	usedElemLen       = 8 // struct virtq_used_elem: id u32, len u32
	ringHeaderLen     = 4 // flags u16, idx u16
	ringEventLen      = 2 // used_event / avail_event, with EVENT_IDX
	availAlign        = 2
	usedAlign         = 4
	descAlign         = 16
	maxBytesPerPacket = 65535 + 14 + 4 + 12 // a GSO frame with a VLAN tag and the largest vnet header
)

// walkError says what is wrong with a descriptor chain. Each is a
// counted drop: the guest is not trusted.
type walkError uint8

const (
	walkOK        walkError = iota
	walkBadIndex            // a head or next index past the queue size
	walkTooLong             // more descriptors than the queue has: a loop, or forged chains
	walkBadMemory           // a buffer outside the guest's memory table
	walkBadFlags            // indirect (not negotiated) or the wrong direction
	walkTooBig              // more bytes than any packet has (from the guest)
	numWalkErrors
)

var walkErrorNames = [numWalkErrors]string{"ok", "bad_index", "too_long", "bad_memory", "bad_flags", "too_big"}

func (e walkError) String() string { return walkErrorNames[e] }

// split is a started ring's view of guest memory, and the device's
// indices. Only the ring's worker uses it while the ring runs.
type split struct {
	num   uint16 // a power of two
	desc  []byte
	avail []byte
	used  []byte
	mem   *memTable

	lastAvail uint16 // the next available entry to take
	// availSeen is the driver's available index as last read: entries
	// up to it may be taken without reading the index, which the driver
	// writes from another CPU, again (a cache miss each time).
	availSeen uint16
	usedIdx   uint16 // the next used entry to fill
	usedFlags uint16
	// broken: the guest corrupted the ring, which is left alone until
	// it restarts.
	broken bool
	// noNotify: the driver was told not to kick (setNoNotify).
	noNotify bool

	// From the negotiated features (setFeatures).
	hdrLen    int  // the virtio-net header's length
	mergeable bool // a packet may span receive chains
	eventIdx  bool // VIRTIO_RING_F_EVENT_IDX
	// inOrder: VIRTIO_F_IN_ORDER, the device uses the driver's chains in
	// the order it made them available (as it always does), and a batch
	// of chains completes with one used entry, the batch's last: the
	// driver knows the chains before it from that order (the virtio
	// spec's in-order rule). Only where the driver needs no lengths: the
	// chains of packets from the guest.
	inOrder   bool
	fromGuest port.Offloads
	toGuest   port.Offloads

	// Scratch space: the buffers of the chains of one packet, and the
	// heads and lengths of those chains.
	segs  [][]byte
	heads []uint16
	lens  []uint32
}

// newSplit checks a ring's size and addresses against the memory table
// and returns its view of them, or the reason it cannot run.
func newSplit(mem *memTable, num uint32, a vringAddr, base uint16) (*split, string) {
	switch {
	case num == 0 || num > maxQueueSize || num&(num-1) != 0:
		return nil, "queue size is not a power of two up to 32768"
	case a.Desc%descAlign != 0 || a.Avail%availAlign != 0 || a.Used%usedAlign != 0:
		return nil, "ring addresses misaligned"
	}
	r := &split{num: uint16(num), mem: mem, lastAvail: base, availSeen: base}
	r.desc = mem.user(a.Desc, uint64(num)*descLen)
	r.avail = mem.user(a.Avail, ringHeaderLen+2*uint64(num)+ringEventLen)
	r.used = mem.user(a.Used, ringHeaderLen+usedElemLen*uint64(num)+ringEventLen)
	if r.desc == nil || r.avail == nil || r.used == nil {
		return nil, "ring outside the memory table"
	}
	if uintptr(unsafe.Pointer(&r.used[0]))%usedAlign != 0 {
		// The region's offsets moved it off its alignment in this
		// mapping; its index could not be stored atomically.
		return nil, "used ring misaligned in the mapping"
	}
	// The used index continues from where the ring left it (vhost's
	// vhost_vq_init_access does the same), so a restarted back-end
	// does not hand back entries twice.
	r.usedIdx = load16(r.used, 2)
	r.usedFlags = load16(r.used, 0)
	if r.usedIdx != base {
		// A front-end that connects to a new back-end without knowing
		// where the old one stopped gives a base that is not where the
		// ring is: DPDK's virtio-user in server mode, reconnected to
		// after a switch restart, says 0. Every entry up to the used
		// index was handled; those after it are taken (again) from
		// there: a packet from the guest may be sent twice, a buffer
		// toward it is filled anew. DPDK's vhost library does the same
		// (vhost_user_set_vring_addr); QEMU gives the used index as
		// the base itself.
		r.lastAvail, r.availSeen = r.usedIdx, r.usedIdx
	}
	r.segs = make([][]byte, 0, num)
	r.heads = make([]uint16, num)
	r.lens = make([]uint32, num)
	return r, ""
}

// load16 reads the u16 at b[off] with one atomic 32-bit load of the
// aligned word around it, if that word lies inside b, so that it reads
// what the guest published (Go has no 16-bit atomics); else it reads
// plainly.
func load16(b []byte, off int) uint16 {
	p := uintptr(unsafe.Pointer(&b[off]))
	start := uintptr(unsafe.Pointer(&b[0]))
	aligned := p &^ 3
	if aligned >= start && aligned+4 <= start+uintptr(len(b)) {
		w := atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[aligned-start])))
		return uint16(w >> ((p - aligned) * 8))
	}
	return binary.LittleEndian.Uint16(b[off:])
}

// availIdx is the driver's available index.
func (r *split) availIdx() uint16 { return load16(r.avail, 2) }

// availFlags are the driver's flags (VIRTQ_AVAIL_F_NO_INTERRUPT).
func (r *split) availFlags() uint16 { return load16(r.avail, 0) }

// pending returns how many entries the driver made available that the
// device did not take, and false if the driver's index is more than a
// ring ahead, which no honest driver makes.
func (r *split) pending() (uint16, bool) {
	r.availSeen = r.availIdx()
	n := r.availSeen - r.lastAvail
	return n, n <= r.num
}

// available is pending for a device that wants want entries: it reads
// the driver's index only if fewer are known to wait (availSeen), so
// that a burst reads it about once. An index that is more than a ring
// ahead is never kept: the ring breaks.
func (r *split) available(want uint16) (uint16, bool) {
	if n := r.availSeen - r.lastAvail; n >= want && n <= r.num {
		return n, true
	}
	return r.pending()
}

// availHead returns the head of available entry i (free running).
func (r *split) availHead(i uint16) uint16 {
	return binary.LittleEndian.Uint16(r.avail[ringHeaderLen+2*int(i&(r.num-1)):])
}

// putUsed fills used entry i (free running); publishUsed makes it
// visible.
func (r *split) putUsed(i uint16, id uint16, n uint32) {
	e := r.used[ringHeaderLen+usedElemLen*int(i&(r.num-1)):]
	binary.LittleEndian.PutUint32(e, uint32(id))
	binary.LittleEndian.PutUint32(e[4:], n)
}

// publishUsed stores the used flags and index in one atomic store
// (the used ring is 4-aligned), after the entries it covers: the
// driver sees the index only with its entries.
func (r *split) publishUsed() {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&r.used[0])), uint32(r.usedFlags)|uint32(r.usedIdx)<<16)
}

// setNoNotify tells the driver not to kick the ring while the device
// polls it (on), or to kick for its next entry. Without event indexes it
// sets or clears VIRTQ_USED_F_NO_NOTIFY. With them (VIRTIO_RING_F_EVENT_IDX)
// asking is writing avail_event, the entry whose publication the driver
// kicks for, and not asking is leaving it behind: the driver then kicks
// once as it passes it, at most once per 65536 entries. Either way the
// atomic store of publishUsed comes after, so the ring is read again only
// once the driver can see the request.
func (r *split) setNoNotify(on bool) {
	if r.noNotify == on {
		return
	}
	r.noNotify = on
	if r.eventIdx {
		if !on {
			binary.LittleEndian.PutUint16(r.used[ringHeaderLen+usedElemLen*int(r.num):], r.lastAvail)
			r.publishUsed()
		}
		return
	}
	if on {
		r.usedFlags |= usedNoNotify
	} else {
		r.usedFlags &^= usedNoNotify
	}
	r.publishUsed()
}

// needCall reports whether the driver asked to be notified of the used
// entries from old to r.usedIdx: with event indexes, if used_event is
// among them (the virtio spec's vring_need_event); otherwise unless it
// set VIRTQ_AVAIL_F_NO_INTERRUPT. The used index was published before,
// with an atomic store, so what is read here is not older than it.
func (r *split) needCall(old uint16) bool {
	if r.eventIdx {
		event := load16(r.avail, ringHeaderLen+2*int(r.num))
		return r.usedIdx-event-1 < r.usedIdx-old
	}
	return r.availFlags()&availNoInterrupt == 0
}

// walk gathers the buffers of the descriptor chain at head into segs
// (appended, up to its capacity), and returns them and their total
// length. The guest is not trusted: every index, flag, length and
// address is checked, each descriptor is read once, and *budget, the
// descriptors the caller's packet may still read, bounds the walk: a
// packet's chains together read no more descriptors than the ring has
// (an honest driver's chains never share one), so a loop or chains
// forged to share descriptors end.
//
// writable says which buffers the chain must have. Device-readable (a
// packet from the guest): limit bounds the total, and a chain longer
// than that is walkTooBig. Device-writable (receive buffers for the
// guest): limit is what the packet still needs, and the chain's buffers
// past it are checked but not gathered, so that a chain of any length
// is used as far as the packet needs (Linux posts 17 pages per chain
// without mergeable buffers, more than any packet); total counts what
// was gathered.
func walk(desc []byte, num uint16, mem *memTable, head uint16, writable bool, limit int, budget *int, segs [][]byte) ([][]byte, int, walkError) {
	total := 0
	i := head
	want := uint16(0)
	if writable {
		want = descWrite
	}
	for {
		if i >= num || int(i)*descLen+descLen > len(desc) {
			return segs, total, walkBadIndex
		}
		if *budget <= 0 {
			return segs, total, walkTooLong
		}
		*budget--
		d := desc[int(i)*descLen : int(i)*descLen+descLen]
		addr := binary.LittleEndian.Uint64(d)
		length := binary.LittleEndian.Uint32(d[8:])
		flags := binary.LittleEndian.Uint16(d[12:])
		next := binary.LittleEndian.Uint16(d[14:])
		if flags&descIndirect != 0 || flags&descWrite != want {
			return segs, total, walkBadFlags
		}
		if length > 0 {
			if !writable && uint64(total)+uint64(length) > uint64(limit) {
				return segs, total, walkTooBig
			}
			b := mem.guest(addr, length)
			if b == nil {
				return segs, total, walkBadMemory
			}
			if !writable || total < limit {
				if len(segs) == cap(segs) {
					// The scratch space (the queue size) is full: only a
					// forged packet spans more buffers.
					return segs, total, walkTooLong
				}
				segs = append(segs, b)
				total += int(length)
			}
		}
		if flags&descNext == 0 {
			return segs, total, walkOK
		}
		i = next
	}
}

// gather copies the buffers segs into dst, which holds their total.
func gather(dst []byte, segs [][]byte) {
	off := 0
	for _, s := range segs {
		off += copy(dst[off:], s)
	}
}

// scatter copies src into the buffers segs from byte skip of their
// total on, and returns the bytes copied.
func scatter(segs [][]byte, skip int, src []byte) int {
	done := 0
	for _, s := range segs {
		if skip >= len(s) {
			skip -= len(s)
			continue
		}
		done += copy(s[skip:], src[done:])
		skip = 0
		if done == len(src) {
			break
		}
	}
	return done
}
