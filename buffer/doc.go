// Package buffer is softnet's packet-buffer allocator, modelled on the Linux
// kernel's sk_buff life cycle.
//
// A program makes one Pool (NewPool; the zero Config is usable), one Cache
// per goroutine that takes buffers (Pool.NewCache), and then takes buffers
// with Cache.Get or Cache.GetBulk and frees each with Cache.Consume or
// Cache.Drop. Pool.Close at the end is a leak check.
//
// A Pool owns all memory up front: for each size class, one slab of
// fixed-size frames and one array of Buf metadata that holds no Go
// pointers, so that the garbage collector has nothing to scan however many
// buffers there are. The pool never grows past the capacity given in
// Config. On Unix systems a slab is anonymous memory from mmap, outside the
// Go heap, which the kernel backs only as frames are touched; elsewhere it
// is one []byte on the Go heap, resident from the start.
//
// Workers allocate through a Cache, which one goroutine owns (the kernel's
// per-CPU napi_alloc_cache). A Cache is a LIFO stack per class with no
// atomics. On a miss it takes half a cache from the pool's shared depot in
// one locked operation; when full it returns its coldest half the same
// way. GetBulk takes N buffers in one call, all or nothing.
//
// A buffer freed by a Cache that did not allocate it is not put into the
// freer's stack: it is pushed with one CAS onto the owning Cache's inbound
// list (the kernel's skb_attempt_defer_free). The owner detaches the whole
// list with one atomic swap in Drain, which it calls at the top of each
// poll round and which runs before every bulk get and on every miss. When
// the list reaches half of Config.DeferMax the freer kicks the owner once,
// through the hook given to NewCache; past DeferMax the freer keeps the
// buffer.
//
// Every buffer ends in Consume (it was delivered) or Drop (it was lost,
// with a drop.Reason). Counters are per Cache, plain, and made visible to
// other goroutines by Cache.Publish; Pool.Stats sums the published values.
// Pool.Close reports every buffer that was not returned.
//
// No method allocates Go memory per buffer: a warm Get and Consume touch
// only the owner's stack, and GetBulk and ConsumeBulk touch the shared
// structures once per call. `softnet bench alloc` measures them against
// make and sync.Pool.
package buffer
