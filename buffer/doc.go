// Package buffer is softnet's packet-buffer allocator, modelled on the
// Linux kernel's sk_buff life cycle: one Pool that owns all its memory
// from the start, one Cache per goroutine that takes buffers, and every
// buffer freed either delivered (Consume) or lost with a drop.Reason.
//
//	pool, err := buffer.NewPool(buffer.Config{}) // default classes: 2 KiB and 64 KiB
//	if err != nil {
//		return err
//	}
//	c, _ := pool.NewCache(nil) // owned by this goroutine
//	b, err := c.Get(buffer.ClassMTU)
//	data, _ := b.Append(len(pkt)) // the headroom before it is for Prepend
//	copy(data, pkt)
//	c.Consume(b) // or c.Drop(b, drop.NoRoute)
//	err = pool.Close() // a leak check: every buffer must be back
//
// GetBulk takes a burst of buffers in one call, all or nothing. A buffer
// freed by another goroutine's cache goes home to its owner, which takes
// such frees back in Drain. Nothing allocates Go memory per buffer, and
// the garbage collector has nothing to scan in the pool.
//
// Design: docs/design.md, "The buffer pool" and the sections after it.
package buffer
