package program

import (
	"sync"
	"sync/atomic"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
)

// fakeClock makes p's time the value of *now, in nanoseconds.
func fakeClock(p *Policer, now *atomic.Int64) { p.clock = func() int64 { return now.Load() * 16 } }

// sized returns a fill of an n-byte packet.
func sized(n int) func([]byte) int { return func([]byte) int { return n } }

func TestPolicerIngressBurstThenRate(t *testing.T) {
	e := newPktEnv(t)
	p := NewPolicer()
	var now atomic.Int64
	fakeClock(p, &now)
	// 8 kbit/s (1000 bytes a second) with a burst of 1000 bytes.
	if err := p.SetLimits(1, Limit{Rate: 8000, Burst: 8000}, Limit{}); err != nil {
		t.Fatal(err)
	}
	b := e.batch(packet.L3, 1, 0, sized(300), sized(300), sized(300), sized(300), sized(300))
	b.Verdicts[0] = DropVerdict(drop.Filter) // decided before: not policed, takes no tokens
	p.Run(b)
	// A full bucket of 1000 bytes: 300, 600 and 900 leave it not empty,
	// so the fourth passes and takes it below empty.
	police := DropVerdict(drop.PoliceIngress)
	wantVerdicts(t, b, DropVerdict(drop.Filter), PassVerdict, PassVerdict, PassVerdict, PassVerdict)
	b.Reset(5)
	p.Run(b)
	wantVerdicts(t, b, police, police, police, police, police)
	// 1.2 s later the 1200 bytes taken have come back: the bucket is
	// full again, and four pass again.
	now.Store(1_200_000_000)
	b.Reset(5)
	p.Run(b)
	wantVerdicts(t, b, PassVerdict, PassVerdict, PassVerdict, PassVerdict, police)
	// Another port's packets are not this port's limit's business.
	other := e.batch(packet.L3, 2, 0, sized(1500), sized(1500))
	p.Run(other)
	wantVerdicts(t, other, PassVerdict, PassVerdict)
}

// Over time, what passes is the rate, whatever the packets' sizes: one
// larger than the burst (a GSO packet) passes as well.
func TestPolicerLongRunRate(t *testing.T) {
	e := newPktEnv(t)
	p := NewPolicer()
	var now atomic.Int64
	fakeClock(p, &now)
	const rate = 10_000_000 // bit/s
	if err := p.SetLimits(0, Limit{}, Limit{Rate: rate, Burst: 8 * 1000}); err != nil {
		t.Fatal(err)
	}
	bufs := make([]*buffer.Buf, 0, 4)
	for _, n := range []int{1400, 60, 1500, 2000} {
		bufs = append(bufs, e.pkt(sized(n)))
	}
	list := make([]*buffer.Buf, len(bufs))
	passed := 0
	// 10 s of 400 µs rounds, each offering 4960 bytes: ten times the rate.
	for now.Load() < 10e9 {
		copy(list, bufs)
		n, reason := p.Admit(0, list)
		if reason != drop.PoliceEgress {
			t.Fatalf("reason %v", reason)
		}
		for _, b := range list[:n] {
			passed += b.Len()
		}
		now.Add(400_000)
	}
	got := float64(passed*8) / 10
	if got < 0.995*rate || got > 1.005*rate {
		t.Fatalf("passed %.0f bit/s, want %d", got, rate)
	}
}

// Admit keeps what passes in its order at the front.
func TestPolicerEgressKeepsOrder(t *testing.T) {
	e := newPktEnv(t)
	p := NewPolicer()
	var now atomic.Int64
	fakeClock(p, &now)
	if err := p.SetLimits(3, Limit{}, Limit{Rate: 8000, Burst: 8000}); err != nil {
		t.Fatal(err)
	}
	// The 900 takes the bucket below empty; the rest wait for it.
	a, big, c := e.pkt(sized(100)), e.pkt(sized(900)), e.pkt(sized(50))
	list := []*buffer.Buf{a, big, c, a}
	n, _ := p.Admit(3, list)
	if n != 2 || list[0] != a || list[1] != big {
		t.Fatalf("kept %d: %v", n, list)
	}
	now.Store(1_000_000_000) // full again less 0 debt
	list = []*buffer.Buf{c, big, a, c, big}
	n, _ = p.Admit(3, list)
	if n != 3 || list[0] != c || list[1] != big || list[2] != a {
		t.Fatalf("kept %d: %v", n, list)
	}
	if n, _ := p.Admit(4, list); n != len(list) {
		t.Fatalf("a port without limit kept %d of %d", n, len(list))
	}
}

// Workers share a bucket: together they pass what one would, however
// their compare-and-swaps interleave. The clock stands still, so the
// bucket's burst is all there is.
func TestPolicerSharedByWorkers(t *testing.T) {
	e := newPktEnv(t)
	p := NewPolicer()
	var now atomic.Int64
	fakeClock(p, &now)
	const burst = 100_000 // bytes
	if err := p.SetLimits(0, Limit{Rate: 1_000_000, Burst: 8 * burst}, Limit{}); err != nil {
		t.Fatal(err)
	}
	const workers, size = 4, 100
	var batches []*Batch
	for range workers {
		batches = append(batches, e.batch(packet.L3, 0, 0, sized(size), sized(size), sized(size), sized(size)))
	}
	var passed atomic.Int64
	var wg sync.WaitGroup
	for _, b := range batches {
		wg.Go(func() {
			for range 200 { // 4 workers * 200 * 400 bytes: 3.2 bursts
				b.Reset(b.Len())
				p.Run(b)
				for _, v := range b.Verdicts[:b.Len()] {
					if v == PassVerdict {
						passed.Add(size)
					}
				}
			}
		})
	}
	wg.Wait()
	// The burst exactly: the thousandth packet empties the bucket.
	if got := passed.Load(); got != burst {
		t.Fatalf("workers passed %d bytes, want the burst %d", got, burst)
	}
}

func TestPolicerLimits(t *testing.T) {
	p := NewPolicer()
	var now atomic.Int64
	fakeClock(p, &now)
	in, out := Limit{Rate: 1e6, Burst: 1e5}, Limit{Rate: 2e6, Burst: 2e5}
	if err := p.SetLimits(7, in, out); err != nil {
		t.Fatal(err)
	}
	if gi, gout := p.Limits(7); gi != in || gout != out {
		t.Fatalf("Limits = %v %v", gi, gout)
	}
	// Changing one direction keeps the other's bucket, and its state.
	k := p.port(7).out
	k.full.Store(12345)
	if err := p.SetLimits(7, Limit{}, out); err != nil {
		t.Fatal(err)
	}
	if p.port(7).in != nil || p.port(7).out != k || k.full.Load() != 12345 {
		t.Fatal("SetLimits did not keep the unchanged bucket")
	}
	if err := p.SetLimits(7, Limit{}, Limit{}); err != nil || p.port(7) != nil {
		t.Fatalf("removing limits: %v, %v", err, p.port(7))
	}
	for _, bad := range []struct {
		port    int
		in, out Limit
	}{
		{-1, in, out}, {maxPort + 1, in, out},
		{0, Limit{Rate: 999, Burst: 1e5}, Limit{}},
		{0, Limit{}, Limit{Rate: 1e6}},
		{0, Limit{Rate: MaxRate + 1, Burst: 1e5}, Limit{}},
		{0, Limit{Rate: 1e6, Burst: MaxBurst + 1}, Limit{}},
	} {
		if err := p.SetLimits(bad.port, bad.in, bad.out); err == nil {
			t.Errorf("SetLimits(%d, %v, %v) accepted", bad.port, bad.in, bad.out)
		}
	}
	// The largest burst at the smallest rate does not overflow.
	if k := newBucket(Limit{Rate: MinRate, Burst: MaxBurst}); k.tau <= 0 {
		t.Fatalf("tau %d", k.tau)
	}
}

func TestPolicerAllocatesNothing(t *testing.T) {
	e := newPktEnv(t)
	p := NewPolicer()
	if err := p.SetLimits(1, Limit{Rate: 1e9, Burst: 1e6}, Limit{Rate: 1e9, Burst: 1e6}); err != nil {
		t.Fatal(err)
	}
	b := e.batch(packet.L3, 1, 0, sized(1500), sized(64), sized(2000), sized(1500))
	list := make([]*buffer.Buf, b.Len())
	n := testing.AllocsPerRun(100, func() {
		b.Reset(b.Len())
		p.Run(b)
		copy(list, b.Bufs)
		p.Admit(1, list)
	})
	if n != 0 {
		t.Fatalf("%v allocs per batch", n)
	}
}
