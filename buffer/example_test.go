package buffer_test

import (
	"fmt"

	"softnet.dev/buffer"
	"softnet.dev/drop"
)

// A worker takes a buffer from its own cache, fills it, and frees it with
// Consume when the packet was delivered or Drop when it was lost.
func Example() {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		panic(err)
	}
	cache, err := pool.NewCache(nil)
	if err != nil {
		panic(err)
	}
	b, err := cache.Get(buffer.ClassMTU)
	if err != nil {
		return // drop.NoMem
	}
	payload, _ := b.Append(5)
	copy(payload, "hello")
	hdr, _ := b.Prepend(3) // encapsulate in the headroom, without a copy
	copy(hdr, "IP:")
	fmt.Printf("%s (%d bytes, %d headroom left)\n", b.Bytes(), b.Len(), b.Headroom())
	cache.Consume(b)

	b, _ = cache.Get(buffer.ClassMTU)
	cache.Drop(b, drop.NoRoute)

	cache.Publish()
	s := pool.Stats()
	fmt.Println("in use:", s.InUse, "consumed:", s.Consumed, "dropped NO_ROUTE:", s.Drops[drop.NoRoute])
	fmt.Println("leak check:", pool.Close())
	// Output:
	// IP:hello (8 bytes, 125 headroom left)
	// in use: 0 consumed: 1 dropped NO_ROUTE: 1
	// leak check: <nil>
}

// A buffer freed by a worker that did not allocate it goes back to its
// owner's inbound list; the owner takes the whole list at the top of its
// next poll.
func ExampleCache_Drain() {
	pool, _ := buffer.NewPool(buffer.Config{})
	kicked := make(chan struct{}, 1)
	rx, _ := pool.NewCache(func() {
		select {
		case kicked <- struct{}{}:
		default:
		}
	})
	tx, _ := pool.NewCache(nil)

	burst := make([]*buffer.Buf, 64)
	if err := rx.GetBulk(burst, buffer.ClassMTU); err != nil {
		return
	}
	tx.ConsumeBulk(burst) // transmit completion on another worker
	<-kicked              // the list reached half of DeferMax
	fmt.Println("drained:", rx.Drain())
	fmt.Println("leak check:", pool.Close())
	// Output:
	// drained: 64
	// leak check: <nil>
}

// Build wraps a frame that a device filled, given only the buffer id and
// the window it reports, as io_uring provided buffers and AF_XDP rings do.
func ExampleCache_Build() {
	pool, _ := buffer.NewPool(buffer.Config{})
	cache, _ := pool.NewCache(nil)
	b, _ := cache.Get(buffer.ClassMTU)
	id, frame := b.ID(), b.Frame() // lent to the device

	n := copy(frame[buffer.DefaultHeadroom:], "from the wire")
	pkt, err := cache.Build(id, buffer.DefaultHeadroom, n)
	fmt.Printf("%q %v\n", pkt.Bytes(), err)

	_, err = cache.Build(id, 0, len(frame)+1) // a lying device
	fmt.Println(err)
	cache.Consume(pkt)
	fmt.Println("leak check:", pool.Close())
	// Output:
	// "from the wire" <nil>
	// buffer: invalid build: window [0, 0+2177) outside the 2176-byte frame of buffer 0
	// leak check: <nil>
}
