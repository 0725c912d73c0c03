package engine

import (
	"net/netip"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/program"
)

// A worker's round — receive a burst, run the programs, transmit, free —
// allocates nothing once the tables are warm.
func TestWorkerRoundAllocatesNothing(t *testing.T) {
	fwd, err := program.NewL3Forwarder(program.L3Config{
		Routes: []program.Route{{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Port: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	redirect := program.Func{ProgramName: "redirect", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	// The policer, each way, at a rate the rounds never reach: what
	// passes it goes the same way as without it.
	pol := program.NewPolicer()
	huge := program.Limit{Rate: program.MaxRate, Burst: program.MaxBurst}
	for port := range 2 {
		if err := pol.SetLimits(port, huge, huge); err != nil {
			t.Fatal(err)
		}
	}
	for name, progs := range map[string][]program.Program{
		"redirect":     {redirect},
		"l3-forwarder": {fwd},
		"policed":      {pol, redirect},
	} {
		t.Run(name, func(t *testing.T) {
			pool, err := buffer.NewPool(buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 4096}}})
			if err != nil {
				t.Fatal(err)
			}
			gen, err := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Bulk: true, Flows: 4})
			if err != nil {
				t.Fatal(err)
			}
			sink, err := memport.NewSink("sink", memport.SinkConfig{Layer: packet.L3, Validate: memport.ValidateLight})
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Pool: pool, Programs: progs}
			if name == "policed" {
				cfg.Egress = pol
			}
			e, err := New(cfg, gen, sink)
			if err != nil {
				t.Fatal(err)
			}
			w := e.workers[0]
			w.adopt(e.set.Load()) // what run does first
			round := func() {
				w.cache.Drain()
				if w.round() != DefaultBatch {
					t.Fatal("a round moved less than a full batch")
				}
			}
			round() // learn the flows' sources
			if n := testing.AllocsPerRun(200, round); n != 0 {
				t.Errorf("%v allocations per round", n)
			}
			if s := sink.Stats(); s.Bad != 0 || s.Lost != 0 || s.Packets == 0 {
				t.Errorf("sink %+v", s)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if err := pool.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
