package memport_test

import (
	"fmt"

	"softnet.dev/buffer"
	"softnet.dev/memport"
	"softnet.dev/packet"
)

// A worker moves a generator's packets into a sink that validates them
// and frees them into the worker's cache.
func Example() {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		panic(err)
	}
	cache, _ := pool.NewCache(nil)
	gen, err := memport.NewGenerator("gen", memport.GenConfig{
		Flows: 4, Sizes: []int{64, 1500}, Count: 1000, Bulk: true, Layer: packet.L3,
	})
	if err != nil {
		panic(err)
	}
	sink, err := memport.NewSink("sink", memport.SinkConfig{Validate: memport.ValidateFull, Layer: packet.L3})
	if err != nil {
		panic(err)
	}
	rx, tx := gen.RxQueue(0), sink.TxQueue(0)
	bufs := make([]*buffer.Buf, 64)
	for rx.Arm() {
		n, _ := rx.Receive(cache, bufs)
		tx.Transmit(cache, bufs[:n])
	}
	g, s := gen.Stats(), sink.Stats()
	fmt.Printf("generated %d packets, %d bytes\n", g.Packets, g.Bytes)
	fmt.Printf("sink: %d valid, %d bad, %d lost, %d reordered\n", s.Packets, s.Bad, s.Lost, s.Reordered)
	gen.CloseInto(cache)
	sink.CloseInto(cache)
	fmt.Println("leak check:", pool.Close())
	// Output:
	// generated 1000 packets, 782000 bytes
	// sink: 1000 valid, 0 bad, 0 lost, 0 reordered
	// leak check: <nil>
}
