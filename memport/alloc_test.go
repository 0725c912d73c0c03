package memport

import (
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/packet"
)

// The per-packet paths allocate nothing in steady state.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	c := newCache(t, pool)
	bufs := make([]*buffer.Buf, 64)

	a, b := mustPair(t, PairConfig{})
	pairBufs := fill(t, c, 64, 64)
	tx, rx := a.TxQueue(0), b.RxQueue(0)

	bulk := mustGen(t, GenConfig{Bulk: true, Flows: 8, Layer: packet.L3})
	single := mustGen(t, GenConfig{Flows: 8, Sizes: []int{64, 1500}, Layer: packet.L2})
	mixed := mustGen(t, GenConfig{Bulk: true, Sizes: []int{64, 1500, 9000}, Layer: packet.L3})
	headersOnly := mustGen(t, GenConfig{Bulk: true, Flows: 8, Sizes: []int{1500, 9000}, Layer: packet.L3, HeadersOnly: true})
	toLight := mustGen(t, GenConfig{Bulk: true, Flows: 8, Layer: packet.L3})
	toFull := mustGen(t, GenConfig{Bulk: true, Flows: 8, Layer: packet.L3})
	light := mustSink(t, SinkConfig{Validate: ValidateLight, Layer: packet.L3})
	full := mustSink(t, SinkConfig{Validate: ValidateFull, Layer: packet.L3})

	cases := []struct {
		name string
		f    func()
	}{
		{"pair transmit+receive", func() {
			if n, err := tx.Transmit(c, pairBufs); n != 64 || err != nil {
				t.Fatalf("Transmit = %d, %v", n, err)
			}
			if n, err := rx.Receive(c, pairBufs); n != 64 || err != nil {
				t.Fatalf("Receive = %d, %v", n, err)
			}
		}},
		{"generator bulk", func() {
			n, _ := bulk.RxQueue(0).Receive(c, bufs)
			c.ConsumeBulk(bufs[:n])
		}},
		{"generator single", func() {
			n, _ := single.RxQueue(0).Receive(c, bufs)
			c.ConsumeBulk(bufs[:n])
		}},
		{"generator mixed classes", func() {
			n, _ := mixed.RxQueue(0).Receive(c, bufs[:8])
			c.ConsumeBulk(bufs[:n])
		}},
		{"generator headers only", func() {
			n, _ := headersOnly.RxQueue(0).Receive(c, bufs[:8])
			c.ConsumeBulk(bufs[:n])
		}},
		{"sink light inline", func() {
			n, _ := toLight.RxQueue(0).Receive(c, bufs)
			light.TxQueue(0).Transmit(c, bufs[:n])
		}},
		{"sink full inline", func() {
			n, _ := toFull.RxQueue(0).Receive(c, bufs)
			full.TxQueue(0).Transmit(c, bufs[:n])
		}},
	}
	for _, tc := range cases {
		tc.f() // warm up: first Receive classifies, first flows grow tables
		if n := testing.AllocsPerRun(200, tc.f); n != 0 {
			t.Errorf("%s: %v allocs per run", tc.name, n)
		}
	}
	if light.Stats().Bad != 0 || full.Stats().Bad != 0 || full.Stats().Lost != 0 {
		t.Errorf("sinks: light %+v, full %+v", light.Stats(), full.Stats())
	}
	c.ConsumeBulk(pairBufs)
	if err := a.CloseInto(c); err != nil {
		t.Fatal(err)
	}
	if err := b.CloseInto(c); err != nil {
		t.Fatal(err)
	}
	leakCheck(t, pool)
}
