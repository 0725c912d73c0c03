package engine

import (
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/endpoint"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/program"
)

// A round that lends a burst to an endpoint, with the application
// releasing on the worker's goroutine and the poller taking the buffers
// back, allocates nothing; every buffer comes home through the refill
// ring.
func TestWorkerRoundWithEndpointAllocatesNothing(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 4096}}})
	if err != nil {
		t.Fatal(err)
	}
	gen, err := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Bulk: true, Flows: 4, Sizes: []int{1500}})
	if err != nil {
		t.Fatal(err)
	}
	table, err := endpoint.NewTable(endpoint.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	_, dst := memport.FlowAddrs(0, false)
	ep, err := table.Bind(endpoint.UDP(dst), endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Pool: pool, Programs: []program.Program{table}, Consumers: []Consumer{table}, Pollers: []Poller{table}}, gen, table)
	if err != nil {
		t.Fatal(err)
	}
	w := e.workers[0]
	w.adopt(e.set.Load()) // what run does first
	views := make([]endpoint.View, DefaultBatch)
	round := func() {
		w.cache.Drain()
		w.runPollers()
		if w.round() != DefaultBatch {
			t.Fatal("a round moved less than a full batch")
		}
		n, err := ep.Receive(views)
		if err != nil || n != DefaultBatch {
			t.Fatalf("received %d, %v", n, err)
		}
		if err := ep.Release(views[:n]...); err != nil {
			t.Fatal(err)
		}
	}
	round()
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Errorf("%v allocations per round", n)
	}
	w.runPollers()
	w.publish()
	s := ep.Stats()
	if s.Lent == 0 || s.Refilled != s.Lent {
		t.Errorf("endpoint %+v", s)
	}
	if ps := pool.Stats(); ps.RemoteFrees != 0 {
		t.Errorf("%d remote frees", ps.RemoteFrees)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
}
