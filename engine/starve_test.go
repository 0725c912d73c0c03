package engine

import (
	"sync"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/program"
)

// holder is a consumer that keeps what it is given, as packets stuck in
// a slow TX queue would.
type holder struct {
	mu   sync.Mutex
	bufs []*buffer.Buf
}

func (h *holder) Deliver(_ int, _ *buffer.Cache, bufs []*buffer.Buf) {
	h.mu.Lock()
	h.bufs = append(h.bufs, bufs...)
	h.mu.Unlock()
}

func (h *holder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.bufs)
}

func (h *holder) take() []*buffer.Buf {
	h.mu.Lock()
	defer h.mu.Unlock()
	bufs := h.bufs
	h.bufs = nil
	return bufs
}

// A worker whose port has packets but whose pool is empty waits for
// buffers instead of polling again at once (which, with a readable TUN
// file, spins); it resumes when they come home as remote frees.
func TestStarvedWorkerWaitsForBuffers(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 256}}})
	if err != nil {
		t.Fatal(err)
	}
	gen, err := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Sizes: []int{100}})
	if err != nil {
		t.Fatal(err)
	}
	deliver := program.Func{ProgramName: "hold", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.DeliverVerdict(0)
		}
	}}
	h := &holder{}
	e, err := New(Config{Pool: pool, Programs: []program.Program{deliver}, Consumers: []Consumer{h}}, gen)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	freer, err := pool.NewCache(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		e.Stop()
		freer.ConsumeBulk(h.take())
		freer.Close()
		if err := e.Close(); err != nil {
			t.Error(err)
		}
		if err := pool.Close(); err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for gen.Stats().AllocFailures == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the worker never found the pool empty")
		}
		time.Sleep(time.Millisecond)
	}
	s1 := e.Stats().Workers[0]
	const hold = 100 * time.Millisecond
	time.Sleep(hold)
	s2 := e.Stats().Workers[0]
	if s2.Starved == 0 {
		t.Error("no starved round counted")
	}
	// Spinning would be millions of rounds; waiting is one per
	// starveWait at most (and a publish may trail by publishEvery).
	if rounds, most := s2.Rounds-s1.Rounds, uint64(2*hold/starveWait+publishEvery); rounds > most {
		t.Fatalf("%d rounds in %v without buffers, want at most %d", rounds, hold, most)
	}
	// Freed on this goroutine, the buffers go home as remote frees, and
	// the worker takes packets again.
	freer.ConsumeBulk(h.take())
	deadline = time.Now().Add(20 * time.Second)
	for h.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the worker did not resume when buffers came back")
		}
		time.Sleep(time.Millisecond)
	}
}
