package buffer

import (
	"fmt"
	"unsafe"

	"softnet.dev/drop"
)

// Cache is a per-worker buffer cache (the kernel's napi_alloc_cache). One
// goroutine owns it: every method except those documented otherwise must be
// called only by the owner. It holds a LIFO stack per class and an inbound
// list on which other caches push the buffers they free on its behalf.
type Cache struct {
	pool     *Pool
	index    uint16
	half     int
	headroom uint32
	stacks   []stack
	ctr      counters
	pub      published
	debug    *debugState
	closed   bool
	deferMax uint32
	kick     func()
	dropHook func(*Buf, drop.Reason) // SetDropHook

	inbound []inbound // per class; written by other caches
}

type stack struct {
	bufs     []*Buf // len is the cache size; [0:n] are free, n-1 is the warmest
	n        int
	chain    uint32 // id+1 of the first buffer of a drained inbound list
	chainLen int    // buffers in chain and in the waiting lists
	waiting  [waitingChains]uint32
	nwaiting int
}

// waitingChains is how many drained lists may wait behind the current
// chain. With none, the owner could take its inbound list only once the
// chain was used up, and remote frees arriving meanwhile would overflow
// DeferMax and stay with the freers.
const waitingChains = 3

// NewCache registers a cache for one worker. kick, if not nil, is called
// (from a freeing goroutine, at most once per fill) when the cache's
// inbound list reaches half of Config.DeferMax, so that a sleeping owner
// wakes up and drains it; it must not block.
func (p *Pool) NewCache(kick func()) (*Cache, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := int(p.ncaches.Load())
	if i >= len(p.caches) {
		return nil, ErrTooManyCaches
	}
	c := &Cache{
		pool:     p,
		index:    uint16(i),
		half:     p.cfg.CacheSize / 2,
		headroom: uint32(p.cfg.Headroom),
		stacks:   make([]stack, len(p.classes)),
		debug:    p.debug,
		pub:      newPublished(),
	}
	c.deferMax = uint32(p.cfg.DeferMax)
	c.kick = kick
	c.inbound = make([]inbound, len(p.classes))
	size := p.cfg.CacheSize
	if p.cfg.Knobs.Uncached() {
		size, c.half = 0, 0
	}
	for i := range c.stacks {
		c.stacks[i].bufs = make([]*Buf, size)
	}
	p.caches[i].Store(c)
	p.ncaches.Store(int32(i + 1))
	return c, nil
}

// Pool returns the cache's pool.
func (c *Cache) Pool() *Pool { return c.pool }

// Get returns a buffer of the class with empty data and the pool's
// headroom, or ErrExhausted (the caller drops with drop.NoMem) or
// ErrClass.
func (c *Cache) Get(class Class) (*Buf, error) {
	if int(class) < len(c.stacks) {
		// A drained chain of remote frees goes first: left behind the
		// stack it would keep the inbound list from being taken again,
		// and remote frees would pile up until freers keep the buffers.
		if st := &c.stacks[class]; uint(st.n-1) < uint(len(st.bufs)) && st.chain == 0 && c.debug == nil {
			st.n--
			b := st.bufs[st.n]
			b.win, b.state = window(c.headroom, 0), ownedState(c.index, class)
			c.ctr.n[ctrHits]++
			return b, nil
		}
	}
	return c.getSlow(class)
}

func (c *Cache) getSlow(class Class) (*Buf, error) {
	if int(class) >= len(c.stacks) {
		return nil, ErrClass
	}
	st := &c.stacks[class]
	var b *Buf
	switch {
	case st.chain != 0 || st.n == 0 && c.Drain() > 0 && st.chain != 0:
		c.ctr.n[ctrHits]++
		b = c.popChain(st, class)
	case st.n > 0:
		c.ctr.n[ctrHits]++
		st.n--
		b = st.bufs[st.n]
	case len(st.bufs) == 0: // knob.PoolUncached
		var one [1]*Buf
		if c.pool.classes[class].depot.take(one[:], 1) == 0 {
			c.ctr.n[ctrExhausted]++
			return nil, ErrExhausted
		}
		c.ctr.n[ctrMisses]++
		c.ctr.n[ctrRefills]++
		b = one[0]
	case c.refill(st, class, 1) > 0:
		c.ctr.n[ctrMisses]++
		st.n--
		b = st.bufs[st.n]
	default:
		c.ctr.n[ctrExhausted]++
		return nil, ErrExhausted
	}
	c.prepare(b)
	return b, nil
}

// GetBulk fills out with buffers of the class, all or nothing: on error
// out is untouched and no buffer was taken. It drains the inbound list
// first so that buffers freed remotely are reused while still warm.
func (c *Cache) GetBulk(out []*Buf, class Class) error {
	if int(class) >= len(c.stacks) {
		return ErrClass
	}
	c.Drain()
	st := &c.stacks[class]
	// Take up the drained chain first (see Get); a bulk get touches every
	// buffer anyway.
	for st.chain != 0 && st.n < len(st.bufs) {
		st.bufs[st.n] = c.popChain(st, class)
		st.n++
	}
	k := len(out)
	if st.n < k {
		if !c.getBulkMiss(out, st, class) {
			c.ctr.n[ctrExhausted]++
			return ErrExhausted
		}
		c.ctr.n[ctrMisses]++
		c.ctr.n[ctrBulkExtra] += uint64(len(out) - 1)
		return nil
	}
	c.ctr.n[ctrHits]++
	c.ctr.n[ctrBulkExtra] += uint64(k - 1)
	st.n -= k
	src := st.bufs[st.n : st.n+k]
	if c.debug != nil {
		copy(out, src)
		for _, b := range out {
			c.prepare(b)
		}
		return nil
	}
	// One copy, so that the pointer stores pay for one write-barrier
	// check instead of one each.
	copy(out, src)
	win, state := window(c.headroom, 0), ownedState(c.index, class) // hoisted: the stores through b could alias c
	for _, b := range out {
		b.win, b.state = win, state
	}
	return nil
}

// getBulkMiss serves a bulk get that the stack cannot: it refills the
// stack, or for a request larger than the cache takes the remainder
// straight from the depot, in one locked operation either way.
func (c *Cache) getBulkMiss(out []*Buf, st *stack, class Class) bool {
	k := len(out)
	if need := k - st.n; need > len(st.bufs)-st.n {
		if c.pool.classes[class].depot.take(out[st.n:], need) == 0 {
			return false
		}
		c.ctr.n[ctrRefills]++
		k = st.n
		for _, b := range out[k:] {
			c.prepare(b)
		}
	} else if c.refill(st, class, k) < k {
		return false
	}
	st.n -= k
	copy(out[:k], st.bufs[st.n:st.n+k])
	for _, b := range out[:k] {
		c.prepare(b)
	}
	return true
}

// refill brings the stack to at least need buffers (need ≤ the cache
// size): first from the chain of drained remote frees, then from the
// depot in one operation, taking half a cache or more. It returns the
// number now on the stack, or 0 if need cannot be met.
func (c *Cache) refill(st *stack, class Class, need int) int {
	for st.n < need && st.chain != 0 {
		st.bufs[st.n] = c.popChain(st, class)
		st.n++
	}
	if st.n >= need {
		return st.n
	}
	want := min(max(c.half, need-st.n), len(st.bufs)-st.n)
	got := c.pool.classes[class].depot.take(st.bufs[st.n:st.n+want], need-st.n)
	if got == 0 {
		return 0
	}
	st.n += got
	c.ctr.n[ctrRefills]++
	return st.n
}

func (c *Cache) prepare(b *Buf) {
	if c.debug != nil {
		c.debug.taken(c, b)
	}
	c.ready(b)
}

func (c *Cache) ready(b *Buf) {
	b.win, b.state = window(c.headroom, 0), ownedState(c.index, b.Class())
}

// Consume frees a buffer whose packet was delivered (napi_consume_skb).
// A buffer this cache handed out returns to its stack; one from another
// cache goes to that cache's inbound list.
func (c *Cache) Consume(b *Buf) {
	if c.pushOne(b) || c.release(b) {
		c.ctr.n[ctrConsumed]++
	}
}

// Drop frees a buffer whose packet was lost, counting the reason
// (kfree_skb_reason). Each holder of a shared buffer that drops its
// reference counts one drop.
func (c *Cache) Drop(b *Buf, reason drop.Reason) {
	if c.dropHook != nil {
		c.dropHook(b, reason)
	}
	if c.pushOne(b) || c.release(b) {
		c.ctr.drops[min(reason, drop.NumReasons-1)]++
	}
}

// SetDropHook makes Drop and DropBulk show every buffer to f, with its
// reason, before it is freed, on the cache's own goroutine: the place for
// a drop monitor to look at what is lost. The engine sets it on its
// workers' caches for its DropMonitors; a program that polls port queues
// with a cache of its own sets it to see its own drops, which the
// counters only count. f must not keep b or block. Set it before the
// cache is used; nil removes it. Without a hook a drop costs one more
// compare.
func (c *Cache) SetDropHook(f func(b *Buf, r drop.Reason)) { c.dropHook = f }

// ConsumeBulk consumes every buffer of bufs. Consecutive buffers owned by
// the same other cache are pushed to it with one CAS.
func (c *Cache) ConsumeBulk(bufs []*Buf) {
	c.ctr.n[ctrConsumed] += c.releaseBulk(bufs)
}

// DropBulk drops every buffer of bufs with one reason.
func (c *Cache) DropBulk(bufs []*Buf, reason drop.Reason) {
	if c.dropHook != nil {
		for _, b := range bufs {
			c.dropHook(b, reason)
		}
	}
	c.ctr.drops[min(reason, drop.NumReasons-1)] += c.releaseBulk(bufs)
}

// release drops one reference to b and, if it was the last, frees it. It
// reports whether the call counts as a free (false for a misuse, which is
// counted as such).
func (c *Cache) release(b *Buf) bool {
	if !c.valid(b) {
		return false
	}
	if b.unref() {
		if owner := c.free(b); owner != c.index {
			c.pushRemote(b, b, 1, owner)
		}
	}
	return true
}

// releaseBulk releases every buffer and returns how many counted as
// frees. Runs of buffers that need only a push go through pushRun's
// tight loop; the rest, one at a time, through the general path.
func (c *Cache) releaseBulk(bufs []*Buf) uint64 {
	var rc remoteChain
	counted := uint64(0)
	for len(bufs) > 0 {
		if k := c.pushRun(bufs); k > 0 {
			counted += uint64(k)
			bufs = bufs[k:]
			continue
		}
		b := bufs[0]
		bufs = bufs[1:]
		if !c.valid(b) {
			continue
		}
		counted++
		if b.unref() {
			if owner := c.free(b); owner != c.index {
				rc.add(c, b, owner)
			}
		}
	}
	rc.flush(c)
	return counted
}

// pushOne is pushRun for one buffer.
func (c *Cache) pushOne(b *Buf) bool {
	if !c.pool.sole(b, c.index) || c.debug != nil {
		return false
	}
	st := &c.stacks[b.Class()]
	if st.n >= len(st.bufs) {
		return false
	}
	b.setOwner(free)
	st.bufs[st.n] = b
	st.n++
	return true
}

// pushRun frees the leading buffers of bufs that are the common case, an
// unshared buffer of this cache of the first one's class with room on its
// stack, and returns how many it freed. Its loop makes no calls and
// carries nothing but its index, so that everything else stays in
// registers.
func (c *Cache) pushRun(bufs []*Buf) int {
	if c.debug != nil {
		return 0
	}
	base, size, owner := c.pool.metaBase, c.pool.metaSize, c.index
	first := bufs[0]
	// A buffer of another cache, the remote free of a TX completion,
	// leaves before the setup below: the freeing worker runs this per
	// burst, and with the setup the deferred-free bench lost a fifth.
	if uintptr(unsafe.Pointer(first))-base >= size || first.owner() != owner {
		return 0
	}
	class := first.Class()
	freed := ownedState(free, class)
	// The class's part of the metadata array: a buffer inside it is this
	// pool's and of this class, so the loop checks both with one compare.
	ci := &c.pool.classes[class]
	base += uintptr(ci.first) * unsafe.Sizeof(Buf{})
	size = uintptr(ci.n) * unsafe.Sizeof(Buf{})
	st := &c.stacks[class]
	dst := st.bufs[st.n:]
	bufs = bufs[:min(len(bufs), len(dst))]
	i := 0
	for ; i < len(bufs); i++ {
		b := bufs[i]
		// pool.sole and the class, spelled out: nothing is reloaded.
		if uintptr(unsafe.Pointer(b))-base >= size {
			break
		}
		if b.owner() != owner {
			break
		}
		if b.refs.Load() != 1 {
			break
		}
		b.state = freed
	}
	// One copy, so that the pointer stores pay for one write-barrier
	// check instead of one each.
	copy(dst, bufs[:i])
	st.n += i
	return i
}

// remoteChain links consecutive buffers bound for the same other cache so
// that they are pushed with one CAS.
type remoteChain struct {
	first, last *Buf
	n           uint32
	owner       uint16
}

func (rc *remoteChain) add(c *Cache, b *Buf, owner uint16) {
	if rc.first != nil && rc.owner != owner {
		rc.flush(c)
	}
	if rc.first == nil {
		rc.first, rc.owner = b, owner
	} else {
		rc.last.setLink(b.id + 1)
	}
	rc.last = b
	rc.n++
}

func (rc *remoteChain) flush(c *Cache) {
	if rc.first != nil {
		c.pushRemote(rc.first, rc.last, rc.n, rc.owner)
		*rc = remoteChain{}
	}
}

// valid checks that b is an in-use buffer of this pool; anything else is a
// misuse that is counted (and reported in debug mode) instead of
// corrupting the pool.
func (c *Cache) valid(b *Buf) bool {
	if !c.pool.owns(b) {
		c.ctr.n[ctrForeign]++
		if c.debug != nil {
			c.debug.reportForeign()
		}
		return false
	}
	if b.owner() == free {
		c.ctr.n[ctrDoubleFree]++
		if c.debug != nil {
			c.debug.reportDoubleFree(b)
		}
		return false
	}
	return true
}

// free marks b free and, if this cache owned it, pushes it on the stack.
// It returns the cache that owned it.
func (c *Cache) free(b *Buf) (owner uint16) {
	owner = b.owner()
	b.setOwner(free)
	if c.debug != nil {
		c.debug.freed(b)
	}
	if owner == c.index {
		c.push(b)
	}
	return owner
}

// push puts a free buffer on its class stack, first flushing the coldest
// half of a full stack to the depot in one operation.
func (c *Cache) push(b *Buf) {
	class := b.Class()
	st := &c.stacks[class]
	if len(st.bufs) == 0 { // knob.PoolUncached
		c.pool.classes[class].depot.put([]*Buf{b})
		c.ctr.n[ctrFlushes]++
		return
	}
	if st.n == len(st.bufs) {
		c.pool.classes[class].depot.put(st.bufs[:c.half])
		st.n = copy(st.bufs, st.bufs[c.half:st.n])
		clear(st.bufs[st.n:])
		c.ctr.n[ctrFlushes]++
	}
	st.bufs[st.n] = b
	st.n++
}

// Close returns every buffer the cache holds to the depot and seals its
// inbound lists, so that later remote frees stay with their freers. A
// closed cache still works, straight from the depot. Close is idempotent.
func (c *Cache) Close() {
	if c.closed {
		return
	}
	c.closed = true
	for i := range c.stacks {
		st := &c.stacks[i]
		h := c.inbound[i].head.Swap(packHead(sealed, 0))
		if uint32(h) != 0 {
			c.ctr.n[ctrDrains]++
			c.ctr.n[ctrDrained] += h >> 32
		}
		free := st.bufs[:st.n:st.n]
		for _, top := range append([]uint32{st.chain, uint32(h)}, st.waiting[:st.nwaiting]...) {
			for top != 0 {
				b := &c.pool.meta[top-1]
				top = b.link()
				free = append(free, b)
			}
		}
		st.chain, st.chainLen = 0, 0
		c.pool.classes[i].depot.put(free)
		clear(st.bufs[:st.n])
		st.n = 0
	}
	c.Publish()
}

// Build describes, without copying, a packet that a device wrote into the
// frame of the buffer with the given id (napi_build_skb): the device was
// lent the frame (Frame, ID) and reports back only the id, offset and
// length. Both come from outside and are checked: the id must name a
// buffer this cache handed out, and the window must fit its frame.
func (c *Cache) Build(id uint32, off, n int) (*Buf, error) {
	b := c.pool.lookup(id)
	if b == nil || b.owner() != c.index {
		return nil, fmt.Errorf("%w: buffer %d is not in use by this cache", ErrBadBuild, id)
	}
	if !b.SetData(off, n) {
		return nil, fmt.Errorf("%w: window [%d, %d+%d) outside the %d-byte frame of buffer %d", ErrBadBuild, off, off, n, b.size, id)
	}
	return b, nil
}
