package endpoint_test

import (
	"context"
	"fmt"

	"softnet.dev/buffer"
	"softnet.dev/endpoint"
	"softnet.dev/engine"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/program"
)

// An application bound to a UDP flow receives lent views, reads the
// payload in place and releases them; the worker frees them.
func Example() {
	pool, _ := buffer.NewPool(buffer.Config{})
	gen, _ := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Sizes: []int{128}, Count: 3})
	table, _ := endpoint.NewTable(endpoint.Config{Pool: pool})
	_, dst := memport.FlowAddrs(0, false)
	ep, _ := table.Bind(endpoint.UDP(dst), endpoint.Options{})
	eng, _ := engine.New(engine.Config{
		Pool:      pool,
		Programs:  []program.Program{table},
		Consumers: []engine.Consumer{table},
		Pollers:   []engine.Poller{table},
	}, gen, table)
	eng.Start()
	views := make([]endpoint.View, 8)
	for got := 0; got < 3; {
		ep.Wait(context.Background())
		n, _ := ep.Receive(views)
		for _, v := range views[:n] {
			fmt.Println(v.Dst, len(v.Payload), "bytes")
		}
		ep.Release(views[:n]...)
		got += n
	}
	ep.Close()
	eng.Close()
	fmt.Println("leak check:", pool.Close())
	// Output:
	// 198.19.255.254:9 100 bytes
	// 198.19.255.254:9 100 bytes
	// 198.19.255.254:9 100 bytes
	// leak check: <nil>
}
