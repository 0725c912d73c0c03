package endpoint

import (
	"net/netip"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/engine"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/program"
)

// rig is an engine with a generator port feeding a table.
type rig struct {
	pool  *buffer.Pool
	gen   *memport.Generator
	table *Table
	eng   *engine.Engine
}

// genDst is where memport's generator sends IPv4 flows.
func genDst() netip.AddrPort {
	_, dst := memport.FlowAddrs(0, false)
	return dst
}

func newRig(t testing.TB, workers int, count uint64, tcfg Config, sizes ...int) *rig {
	t.Helper()
	if len(sizes) == 0 {
		sizes = []int{200}
	}
	pool, err := buffer.NewPool(buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 4096 * workers}, {Room: 65536, Count: 512}}, Debug: tcfg.Debug})
	if err != nil {
		t.Fatal(err)
	}
	gen, err := memport.NewGenerator("gen", memport.GenConfig{Queues: workers, Flows: 4 * workers, Sizes: sizes, Layer: packet.L3, Bulk: true, Count: count, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	tcfg.Pool, tcfg.Workers = pool, workers
	table, err := NewTable(tcfg)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Config{
		Pool: pool, Workers: workers, Programs: []program.Program{table},
		Consumers: []engine.Consumer{table}, Pollers: []engine.Poller{table},
	}, gen, table)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{pool: pool, gen: gen, table: table, eng: eng}
	t.Cleanup(func() { r.close(t) })
	return r
}

func (r *rig) close(t testing.TB) {
	t.Helper()
	if r.eng == nil {
		return
	}
	if err := r.eng.Close(); err != nil {
		t.Error(err)
	}
	r.eng = nil
	if ps := r.pool.Stats(); ps.RemoteFrees > 0 {
		// Lent buffers are freed by their owning worker only.
		t.Logf("pool remote frees: %d", ps.RemoteFrees)
	}
	if err := r.pool.Close(); err != nil {
		t.Errorf("leak check: %v", err)
	}
}

func (r *rig) start(t testing.TB) {
	t.Helper()
	if err := r.eng.Start(); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) bind(t testing.TB, f Flow, o Options) *Endpoint {
	t.Helper()
	e, err := r.table.Bind(f, o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// eventually polls cond for up to 30 s: generous for a loaded machine,
// and a passing test never waits it out.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
