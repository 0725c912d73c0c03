package afxdp

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/engine"
	"softnet.dev/program"
)

// hoarder is a local consumer that keeps every buffer it is given until
// told to let go: an application that does not return what it was lent.
type hoarder struct {
	mu   sync.Mutex
	kept []*buffer.Buf
}

func (h *hoarder) Deliver(_ int, _ *buffer.Cache, bufs []*buffer.Buf) {
	h.mu.Lock()
	h.kept = append(h.kept, bufs...)
	h.mu.Unlock()
}

func (h *hoarder) release(c *buffer.Cache) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.kept)
	c.ConsumeBulk(h.kept)
	h.kept = nil
	return n
}

// When the UMEM's frames run out (an application holds them all), the
// fill ring runs dry and the kernel's misses count as NOMEM; once frames
// come home the port recovers by itself.
func TestOutOfFramesRecovers(t *testing.T) {
	r := newRig(t, 2, 0)
	pool := newPool(t, buffer.ClassConfig{Room: 2048, Count: 512})
	a := r.open(pool, r.guests[0], Config{})
	b := r.open(pool, r.guests[1], Config{})
	var hoard atomic.Bool
	h := &hoarder{}
	bridge := program.NewBridge(program.BridgeConfig{})
	hoardAll := program.Func{ProgramName: "hoard", F: func(bt *program.Batch) {
		if hoard.Load() {
			for i := range bt.Bufs {
				bt.Verdicts[i] = program.DeliverVerdict(0)
			}
		}
	}}
	e, err := engine.New(engine.Config{Pool: pool, Programs: []program.Program{hoardAll, bridge}, Consumers: []engine.Consumer{h}}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	c, err := pool.NewCache(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.release(c)
		if err := e.Close(); err != nil {
			t.Errorf("engine close: %v", err)
		}
		c.Close()
	})
	g1, g2 := r.guests[0], r.guests[1]
	r.ping(g1, g2.v4.Addr(), 2)

	hoard.Store(true)
	blast(t, g1, netip.AddrPortFrom(g2.v4.Addr(), 9), 100, 5000)
	waitFor(t, "the fill ring runs dry (NOMEM)", func() bool { return a.Stats().RxDrops[drop.NoMem] > 0 })
	s := a.Stats()
	t.Logf("hoarded %d buffers; port a: NOMEM %d, refills cut short %d, lent %d", len(h.kept), s.RxDrops[drop.NoMem], s.FillShort, s.Lent)
	if s.FillShort == 0 {
		t.Fatalf("no refill was cut short by the empty pool: %+v", s)
	}

	hoard.Store(false)
	h.release(c)
	r.ping(g1, g2.v4.Addr(), 3)
	r.ping(g2, g1.v6.Addr(), 3)
}
