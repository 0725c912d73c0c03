package memport

import (
	"fmt"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/packet"
)

const benchBurst = 64

// perPacket reports the time per packet of a benchmark that moves
// benchBurst packets per iteration.
func perPacket(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchBurst), "ns/pkt")
}

func benchSetup(b *testing.B) (*buffer.Pool, *buffer.Cache) {
	pool := newPool(b, buffer.Config{})
	c := newCache(b, pool)
	b.Cleanup(func() { leakCheck(b, pool) })
	return pool, c
}

// BenchmarkGenerator: 64-byte IPv4 packets, one GetBulk per burst of 64,
// freed with ConsumeBulk.
func BenchmarkGenerator(b *testing.B) {
	for _, bulk := range []bool{true, false} {
		name := "bulk"
		if !bulk {
			name = "single"
		}
		b.Run(name, func(b *testing.B) {
			benchGenerate(b, GenConfig{Bulk: bulk, Flows: 16, Layer: packet.L3})
		})
	}
}

// BenchmarkGeneratorSize: bulk bursts of IPv4 packets by size, with the
// payload written or not (HeadersOnly). Only the former grows with size.
func BenchmarkGeneratorSize(b *testing.B) {
	for _, size := range []int{64, 1500, 65000} {
		for _, hdrOnly := range []bool{false, true} {
			b.Run(fmt.Sprintf("size=%d/headers-only=%v", size, hdrOnly), func(b *testing.B) {
				benchGenerate(b, GenConfig{Bulk: true, Flows: 16, Sizes: []int{size}, Layer: packet.L3, HeadersOnly: hdrOnly})
			})
		}
	}
}

// benchGenerate receives bursts from a generator made with cfg and frees
// them at once.
func benchGenerate(b *testing.B, cfg GenConfig) {
	_, c := benchSetup(b)
	rx := mustGen(b, cfg).RxQueue(0)
	bufs := make([]*buffer.Buf, benchBurst)
	b.ReportAllocs()
	for b.Loop() {
		n, _ := rx.Receive(c, bufs)
		c.ConsumeBulk(bufs[:n])
	}
	perPacket(b)
}

// BenchmarkSinkLight: a generator's bursts into a Light, Inline sink. The
// sink's own cost is this less BenchmarkGenerator/bulk.
func BenchmarkSinkLight(b *testing.B) {
	for _, v := range []struct {
		name string
		v    Validation
	}{{"light", ValidateLight}, {"full", ValidateFull}} {
		b.Run(v.name, func(b *testing.B) {
			_, c := benchSetup(b)
			g := mustGen(b, GenConfig{Bulk: true, Flows: 16, Layer: packet.L3})
			s := mustSink(b, SinkConfig{Validate: v.v, Layer: packet.L3})
			rx, tx := g.RxQueue(0), s.TxQueue(0)
			bufs := make([]*buffer.Buf, benchBurst)
			b.ReportAllocs()
			for b.Loop() {
				n, _ := rx.Receive(c, bufs)
				tx.Transmit(c, bufs[:n])
			}
			perPacket(b)
			if st := s.Stats(); st.Bad != 0 || st.Lost != 0 {
				b.Fatalf("sink %+v", st)
			}
		})
	}
}

// BenchmarkPair: a burst of 64 through one direction and out again, on one
// goroutine: the cost of the rings and the accounting.
func BenchmarkPair(b *testing.B) {
	_, c := benchSetup(b)
	x, y := mustPair(b, PairConfig{})
	b.Cleanup(func() {
		_ = x.CloseInto(c)
		_ = y.CloseInto(c)
	})
	bufs := make([]*buffer.Buf, benchBurst)
	if err := c.GetBulk(bufs, buffer.ClassMTU); err != nil {
		b.Fatal(err)
	}
	for _, buf := range bufs {
		buf.Append(64)
	}
	tx, rx := x.TxQueue(0), y.RxQueue(0)
	b.ReportAllocs()
	for b.Loop() {
		tx.Transmit(c, bufs)
		rx.Receive(c, bufs)
	}
	perPacket(b)
	c.ConsumeBulk(bufs)
}
