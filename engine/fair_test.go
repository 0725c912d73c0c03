package engine

import (
	"fmt"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/program"
)

// A port that always has packets (a generator at full rate) gets one
// budget per round like every other: a well-behaved port's packets are
// all forwarded while it floods, and no burst from it exceeds the budget,
// so it never holds more of the pool than one batch.
func TestFloodingPortDoesNotStarveOthers(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 1024}}})
	if err != nil {
		t.Fatal(err)
	}
	flood, err := memport.NewGenerator("flood", memport.GenConfig{Layer: packet.L3, Sizes: []int{100}})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := memport.NewSink("sink", memport.SinkConfig{Layer: packet.L3})
	if err != nil {
		t.Fatal(err)
	}
	calm, wire, err := memport.NewPair("calm", "calm-wire", memport.PairConfig{RingSize: 256, Layer: packet.L3})
	if err != nil {
		t.Fatal(err)
	}
	// The flood goes to the sink, the calm port's packets back to it.
	route := program.Func{ProgramName: "route", F: func(b *program.Batch) {
		for i := range b.Bufs {
			if b.Ingress == 0 {
				b.Verdicts[i] = program.RedirectVerdict(1)
			} else {
				b.Verdicts[i] = program.TxVerdict
			}
		}
	}}
	const budget = 16
	e, err := New(Config{Pool: pool, Batch: budget, Programs: []program.Program{route}}, []port.Port{flood, sink, calm}...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pool.NewCache(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
		if err := wire.CloseInto(c); err != nil {
			t.Error(err)
		}
		c.Close()
		if err := pool.Close(); err != nil {
			t.Errorf("pool leak check: %v", err)
		}
	}()
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	const rounds, burst = 20, 50
	got := 0
	bufs := make([]*buffer.Buf, 64)
	deadline := time.Now().Add(20 * time.Second)
	for r := range rounds {
		out := make([]*buffer.Buf, burst)
		if err := c.GetBulk(out, 0); err != nil {
			t.Fatal(err)
		}
		pkt := udp("198.18.1.1:7", "198.18.2.1:7", "well-behaved")
		for _, b := range out {
			d, _ := b.Append(len(pkt))
			copy(d, pkt)
		}
		if n, err := wire.TxQueue(0).Transmit(c, out); err != nil || n != burst {
			t.Fatalf("burst %d: sent %d, %v", r, n, err)
		}
		for want := (r + 1) * burst; got < want; {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d packets came back while the other port flooded", got, want)
			}
			n, err := wire.RxQueue(0).Receive(c, bufs)
			if err != nil {
				t.Fatal(err)
			}
			got += n
			c.ConsumeBulk(bufs[:n])
			c.Drain()
			if n == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	e.Stop()
	s := e.Stats()
	if s.Ports[0].RxPackets < rounds*burst {
		t.Errorf("the flood sent only %d packets: it was not flooding", s.Ports[0].RxPackets)
	}
	if s.Ports[2].Drops.Total() != 0 || s.Ports[2].TxDropped != 0 {
		t.Errorf("calm port lost packets: %+v", s.Ports[2])
	}
	for bucket, n := range s.Workers[0].BatchSizes {
		var lo int
		if _, err := fmt.Sscanf(bucket, "%d", &lo); err != nil {
			t.Fatalf("batch size bucket %q: %v", bucket, err)
		}
		if lo > budget {
			t.Errorf("%d bursts of %s packets, over the budget of %d", n, bucket, budget)
		}
	}
}
