package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/program"
)

type tapped struct {
	port int
	tx   bool
	data string
}

type recorder struct {
	mu    sync.Mutex
	taps  []tapped
	drops []string
}

func (r *recorder) Tapped(_, port int, tx bool, b *buffer.Buf) {
	r.mu.Lock()
	r.taps = append(r.taps, tapped{port, tx, string(b.Bytes())})
	r.mu.Unlock()
}

func (r *recorder) Dropped(_, port int, reason drop.Reason, b *buffer.Buf) {
	r.mu.Lock()
	r.drops = append(r.drops, reason.String()+"@"+string(rune('0'+port)))
	r.mu.Unlock()
}

func (r *recorder) snapshot() ([]tapped, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]tapped(nil), r.taps...), append([]string(nil), r.drops...)
}

// tapFunc is a Tap that cannot be compared.
type tapFunc func(worker, port int, tx bool, b *buffer.Buf)

func (f tapFunc) Tapped(worker, port int, tx bool, b *buffer.Buf) { f(worker, port, tx, b) }

// A tap sees a port's received and transmitted packets; a drop monitor
// sees drops with their reason and port; detached, neither sees more.
func TestTapAndDropMonitor(t *testing.T) {
	fwd, err := program.NewL3Forwarder(program.L3Config{
		Routes:  []program.Route{{Prefix: netip.MustParsePrefix("198.19.0.0/16"), Port: 1}},
		Unknown: program.DropUnknown,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, packet.L3, 1, []program.Program{fwd}, "a", "b")
	rec := &recorder{}
	if err := r.e.SetTap(0, rec); err != nil {
		t.Fatal(err)
	}
	if err := r.e.SetTap(1, rec); err != nil {
		t.Fatal(err)
	}
	if err := r.e.SetTap(2, rec); !errors.Is(err, ErrNoPort) {
		t.Errorf("a tap on a missing port: %v", err)
	}
	if err := r.e.SetTap(0, &recorder{}); !errors.Is(err, ErrTapBusy) {
		t.Errorf("a second tap on a port: %v", err)
	}
	if err := r.e.SetTap(0, nil); err == nil {
		t.Error("a nil tap was accepted")
	}
	if err := r.e.SetTap(0, tapFunc(nil)); err == nil {
		t.Error("a tap ClearTap cannot compare was accepted")
	}
	r.e.SetDropMonitor(rec)
	if err := r.e.Start(); err != nil {
		t.Fatal(err)
	}
	good := udp("198.18.0.1:1000", "198.19.0.1:2000", "hello")
	nowhere := udp("198.18.0.1:1000", "198.20.0.1:2000", "nowhere")
	r.send(0, good, nowhere, good[:24])
	r.recv(1, 1, 10*time.Second)
	st := r.stats(func(s Stats) bool { return s.Ports[0].Drops.Total() == 2 })
	taps, drops := rec.snapshot()
	want := []tapped{{0, false, string(good)}, {0, false, string(nowhere)}, {0, false, string(good[:24])}, {1, true, string(good)}}
	if len(taps) != len(want) {
		t.Fatalf("tapped %d packets, want %d: %+v", len(taps), len(want), taps)
	}
	for i := range want {
		if taps[i] != want[i] {
			t.Errorf("tap %d: port %d tx %v %x, want port %d tx %v", i, taps[i].port, taps[i].tx, taps[i].data, want[i].port, want[i].tx)
		}
	}
	var counted []string
	for reason, n := range st.Ports[0].Drops {
		for range n {
			counted = append(counted, drop.Reason(reason).String()+"@0")
		}
	}
	slices.Sort(counted)
	seen := slices.Sorted(slices.Values(drops))
	if !slices.Equal(seen, counted) || !slices.Contains(seen, "NO_ROUTE@0") {
		t.Errorf("drops seen: %v; counted: %v", drops, counted)
	}
	if r.e.ClearTap(0, &recorder{}) || !r.e.ClearTap(0, rec) || r.e.ClearTap(0, rec) {
		t.Error("ClearTap cleared another's tap, or not its own once")
	}
	if !r.e.ClearTap(1, rec) {
		t.Error("ClearTap did not clear the tap of port 1")
	}
	r.e.SetDropMonitor(nil)
	r.send(0, good, nowhere)
	r.recv(1, 1, 10*time.Second)
	r.stats(func(s Stats) bool { return s.Ports[0].Drops.Total() == 3 })
	if taps2, drops2 := rec.snapshot(); len(taps2) != len(taps) || len(drops2) != len(drops) {
		t.Errorf("detached, still saw %d taps and %d drops", len(taps2)-len(taps), len(drops2)-len(drops))
	}
}

// countingTap counts what it sees.
type countingTap struct{ seen atomic.Uint64 }

func (c *countingTap) Tapped(int, int, bool, *buffer.Buf) { c.seen.Add(1) }

// Two captures install and clear their taps on two port indexes while
// the ports behind the indexes are removed and added again under
// traffic: a tap is never replaced by the other's install nor cleared by
// the other's clear (only by the port's removal), a tap never outlives
// its holder on a live port, and every buffer comes home.
func TestTapsDoNotStealEachOther(t *testing.T) {
	const rounds = 60
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := memport.NewSink("sink", memport.SinkConfig{Layer: packet.L3, Queues: 2})
	if err != nil {
		t.Fatal(err)
	}
	toSink := program.Func{ProgramName: "to-sink", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(0)
		}
	}}
	e, err := New(Config{Pool: pool, Workers: 2, Programs: []program.Program{toSink}}, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	// state is the port behind index i now (nil if none): a removed
	// port's state never comes back, so the same state before and after
	// SetTap is the one SetTap saw.
	state := func(i int) *portState { return e.set.Load().port(i) }

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var installs [2]int
	errs := make(chan error, 2)
	for g := range 2 {
		mine := &countingTap{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(format string, args ...any) {
				errs <- fmt.Errorf("capture %d: "+format, append([]any{g}, args...)...)
			}
			rnd := rand.New(rand.NewPCG(uint64(g), 22))
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				i := 1 + rnd.IntN(2)
				before := state(i)
				err := e.SetTap(i, mine)
				after := state(i)
				switch {
				case errors.Is(err, ErrTapBusy) || errors.Is(err, ErrNoPort):
					// Not ours: a clear of ours must not take it.
					if e.ClearTap(i, mine) {
						fail("cleared a tap it did not hold on index %d after %v", i, err)
						return
					}
					continue
				case err != nil:
					fail("SetTap(%d): %v", i, err)
					return
				case before == nil || before != after:
					// The port changed under the install: take ours off
					// wherever it went; a removed port's state is gone.
					e.ClearTap(i, mine)
					continue
				}
				installs[g]++
				for range 1 + rnd.IntN(8) {
					// RemovePort drops a removed port's tap, after the
					// port left the set.
					if ref := before.tap.Load(); (ref == nil || ref.Tap != mine) && state(i) == before {
						fail("its tap on index %d was replaced or cleared by the other: %v", i, ref)
						return
					}
					runtime.Gosched()
				}
				cleared := e.ClearTap(i, mine)
				if !cleared && state(i) == before {
					fail("could not clear its own tap on index %d", i)
					return
				}
				if ref := before.tap.Load(); cleared && ref != nil && ref.Tap == mine {
					fail("its tap on index %d is still there after ClearTap", i)
					return
				}
			}
		}()
	}
	for round := range rounds {
		var added []int
		for k := range 2 {
			g, err := memport.NewGenerator(fmt.Sprint("g", round, "-", k), memport.GenConfig{Layer: packet.L3, Queues: 2, Flows: 2, Count: 500})
			if err != nil {
				t.Fatal(err)
			}
			i, err := e.AddPort(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			added = append(added, i)
		}
		runtime.Gosched()
		for _, i := range added {
			if err := e.RemovePort(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if installs[0] == 0 || installs[1] == 0 {
		t.Errorf("installs on a steady port: %v; the race was not exercised", installs)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Close(); err != nil {
		t.Fatalf("leak check: %v", err)
	}
}
