package txthread

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
	"softnet.dev/buffer"
	"softnet.dev/engine"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/program"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Packets a worker transmits through a wrapped port reach it, and their
// buffers come back to the worker as deferred remote frees.
func TestTransmitOnItsOwnGoroutine(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gen, _ := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Count: 20000, Bulk: true})
	sink, _ := memport.NewSink("sink", memport.SinkConfig{Layer: packet.L3})
	wrapped, err := Wrap(sink, pool)
	if err != nil {
		t.Fatal(err)
	}
	toSink := program.Func{ProgramName: "to-sink", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	e, err := engine.New(engine.Config{Pool: pool, Programs: []program.Program{toSink}}, gen, wrapped)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for sink.Stats().Packets+e.Stats().Ports[1].TxDropped < 20000 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	e.Stop()
	st := e.Stats()
	dropped := st.Ports[1].TxDropped
	if s := sink.Stats(); s.Packets+dropped != 20000 || s.Bad != 0 {
		t.Fatalf("sink %+v, %d dropped at a full ring", s, dropped)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if s := pool.Stats(); s.RemoteFrees == 0 {
		t.Fatalf("no remote frees: %+v", s.CacheStats)
	}
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
}

// A device error on the TX goroutine reaches the worker at its next
// Transmit, so that the engine marks the port down.
func TestErrorReachesTheWorker(t *testing.T) {
	pool, _ := buffer.NewPool(buffer.Config{})
	c, _ := pool.NewCache(nil)
	a, b, err := memport.NewPair("a", "b", memport.PairConfig{Layer: packet.L3})
	if err != nil {
		t.Fatal(err)
	}
	w, err := Wrap(a, pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CloseInto(c); err != nil { // the peer goes away
		t.Fatal(err)
	}
	send := func() error {
		buf, err := c.Get(0)
		if err != nil {
			t.Fatal(err)
		}
		buf.Append(64)
		_, err = w.TxQueue(0).Transmit(c, []*buffer.Buf{buf})
		return err
	}
	var got error
	deadline := time.Now().Add(10 * time.Second)
	for got == nil && time.Now().Before(deadline) {
		got = send()
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(got, port.ErrDown) {
		t.Fatalf("error %v, want port.ErrDown", got)
	}
	if err := w.CloseInto(c); err != nil {
		t.Fatal(err)
	}
	c.Drain()
	c.Close()
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
}
