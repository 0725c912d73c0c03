package engine

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/drop"
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
	if err := r.e.SetTap(2, rec); err == nil {
		t.Error("a tap on a missing port was accepted")
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
	r.e.SetTap(1, nil)
	r.e.SetDropMonitor(nil)
	r.send(0, good, nowhere)
	r.recv(1, 1, 10*time.Second)
	r.stats(func(s Stats) bool { return s.Ports[0].Drops.Total() == 3 })
	if taps2, drops2 := rec.snapshot(); len(taps2) != len(taps) || len(drops2) != len(drops) {
		t.Errorf("detached, still saw %d taps and %d drops", len(taps2)-len(taps), len(drops2)-len(drops))
	}
}
