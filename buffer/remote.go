package buffer

import (
	"math"
	"softnet.dev/internal/cacheline"
	"sync/atomic"
)

// inbound is one class's deferred-free list of a cache (the kernel's
// sd->defer_list): a stack of buffers linked by Buf.link, pushed by other
// caches with one CAS and detached whole by the owner with one swap.
// Push-and-take-all needs no ABA protection: nobody pops a single node.
//
// The head word packs the length (high 32 bits) with id+1 of the top
// buffer (low 32 bits), so that the bound and the kick are decided in the
// same CAS that links the buffers. The padding keeps each head on a cache
// line of its own.
type inbound struct {
	_    cacheline.Pad
	head atomic.Uint64
	_    [cacheline.Size - 8]byte
}

const sealed = math.MaxUint32 // length of a closed cache's list: always full

func packHead(n, top uint32) uint64 { return uint64(n)<<32 | uint64(top) }

// pushRemote hands the chain first..last of n free buffers of one class
// (linked through next) to the cache that owned them. If that cache's list
// is full or sealed the buffers stay in this cache instead.
func (c *Cache) pushRemote(first, last *Buf, n uint32, owner uint16) {
	dst := c.pool.caches[owner].Load()
	in := &dst.inbound[first.Class()]
	for {
		old := in.head.Load()
		count := uint32(old >> 32)
		if count == sealed || count+n > dst.deferMax {
			c.keep(first, n)
			return
		}
		last.setLink(uint32(old))
		if in.head.CompareAndSwap(old, packHead(count+n, first.id+1)) {
			c.ctr.n[ctrRemoteFrees] += uint64(n)
			if half := dst.deferMax / 2; count < half && count+n >= half && dst.kick != nil {
				c.ctr.n[ctrKicks]++
				dst.kick()
			}
			return
		}
	}
}

// keep takes a chain the owner could not accept into this cache, which
// becomes the buffers' owner at their next Get.
func (c *Cache) keep(b *Buf, n uint32) {
	for ; n > 0; n-- {
		next := b.link()
		c.push(b)
		c.ctr.n[ctrRemoteKept]++
		b = c.pool.lookup(next - 1)
	}
}

// Drain takes each class's inbound list with one atomic swap
// (skb_defer_free_flush) and returns the number of buffers taken. The
// owner calls it at the top of each poll round; GetBulk and misses call
// it too. It costs one load per class when the lists are empty.
//
// The buffers are not walked here: a detached list becomes the class's
// chain (or waits behind it), from which gets pop one buffer at a time
// before they use the stack. Walking would take a cache miss per buffer in
// a dependent chain; popping takes the same miss where the buffer is about
// to be written anyway, overlapped with the caller's own work.
func (c *Cache) Drain() int {
	n := 0
	for i := range c.stacks {
		st := &c.stacks[i]
		// A sealed list has no top either: it stays sealed.
		if uint32(c.inbound[i].head.Load()) == 0 || st.chain != 0 && st.nwaiting == waitingChains {
			continue
		}
		h := c.inbound[i].head.Swap(0)
		if st.chain == 0 {
			st.chain = uint32(h)
		} else {
			st.waiting[st.nwaiting] = uint32(h)
			st.nwaiting++
		}
		st.chainLen += int(h >> 32)
		n += int(h >> 32)
		c.ctr.n[ctrDrains]++
	}
	c.ctr.n[ctrDrained] += uint64(n)
	return n
}

// popChain takes the top buffer of the class's chain; the chain must not
// be empty.
func (c *Cache) popChain(st *stack, class Class) *Buf {
	b := &c.pool.meta[st.chain-1]
	// Write before reading the link: the line arrives owned (one coherence
	// miss instead of a shared read and then an upgrade at the write that
	// follows). The value is the one already there.
	b.state = ownedState(free, class)
	st.chain = b.link()
	st.chainLen--
	if st.chain == 0 && st.nwaiting > 0 {
		st.chain = st.waiting[0]
		st.nwaiting--
		copy(st.waiting[:], st.waiting[1:st.nwaiting+1])
	}
	return b
}

// pending returns the number of buffers waiting on the list.
func (in *inbound) pending() int {
	n := uint32(in.head.Load() >> 32)
	if n == sealed {
		return 0
	}
	return int(n)
}
