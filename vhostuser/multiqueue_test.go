//go:build linux

package vhostuser

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/engine"
	"softnet.dev/memport"
	"softnet.dev/program"
)

// TestFewerPairsThanWorkers: an engine of two workers between an
// in-memory port and a vhost-user port of two queue pairs, whose guest
// starts both pairs but enables only the first (a Linux guest with one
// vCPU does). Each worker transmits on its own queue of the port, and
// both workers' packets reach the guest on the one ring it enabled, with
// none dropped while the two workers share it. When the guest enables
// the second pair, the second worker's packets go there, and what the
// guest sends on either pair is forwarded; when it disables the pair
// again, they come back to the first. (The second worker's packets used
// to drop as DEV_READY.)
func TestFewerPairsThanWorkers(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	vp, err := Listen(Config{Name: "vm", Socket: filepath.Join(t.TempDir(), "vm.sock"), Queues: 2, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	host, sw, err := memport.NewPair("host", "sw", memport.PairConfig{Queues: 2})
	if err != nil {
		t.Fatal(err)
	}
	cross := program.Func{ProgramName: "cross", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1 - b.Ingress)
		}
	}}
	eng, err := engine.New(engine.Config{Pool: pool, Workers: 2, Programs: []program.Program{cross}}, sw, vp)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := pool.NewCache(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		eng.Stop()
		if err := eng.Close(); err != nil {
			t.Error(err)
		}
		if err := host.CloseInto(c); err != nil {
			t.Error(err)
		}
		c.Close()
		if err := pool.Close(); err != nil {
			t.Errorf("leak check: %v", err)
		}
	})
	f := newTestFrontend(t, vp.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	f.configureRing(2, 0)
	f.configureRing(3, 0)
	waitRunning(t, vp, 0)
	f.postRxOn(0, 0, testNum, bufSize)

	// send has the host send n frames on each of its queues, so that
	// worker q forwards those of queue q, and returns them.
	seed := 0
	send := func(n int) (sent [2][]string) {
		for q := range 2 {
			bufs := make([]*buffer.Buf, n)
			for i := range bufs {
				fr := testFrame(60+seed%200, byte(seed))
				seed++
				bufs[i] = bufWith(t, c, fr)
				sent[q] = append(sent[q], string(fr))
			}
			if got, err := host.TxQueue(q).Transmit(c, bufs); got != n || err != nil {
				t.Fatalf("host queue %d: Transmit = %d, %v", q, got, err)
			}
		}
		return sent
	}
	// expect waits until the guest's receive ring r has the frames want,
	// in any order (the workers run at once).
	expect := func(what string, r int, want []string) {
		t.Helper()
		var got []string
		deadline := time.Now().Add(10 * time.Second)
		for len(got) < len(want) && time.Now().Before(deadline) {
			_, frames := f.receivedOn(r)
			for _, fr := range frames {
				got = append(got, string(fr))
			}
			time.Sleep(time.Millisecond)
		}
		slices.Sort(got)
		want = slices.Sorted(slices.Values(want))
		if !slices.Equal(got, want) {
			t.Fatalf("%s: ring %d has %d frames, want %d; port %+v", what, r, len(got), len(want), vp.Stats())
		}
	}

	sent := send(50)
	expect("one pair enabled", 0, append(sent[0], sent[1]...))
	if s := vp.Stats(); s.TxDrops.Total() != 0 || s.TxPackets != 100 {
		t.Fatalf("port %+v: want 100 sent, none dropped", s)
	}

	f.enableRing(2, true)
	f.enableRing(3, true)
	f.postRxOn(2, 0, testNum, bufSize)
	sent = send(25)
	expect("both pairs enabled, worker 0", 0, sent[0])
	expect("both pairs enabled, worker 1", 2, sent[1])
	// The guest sends on both pairs; worker q polls pair q's ring and
	// forwards out of the host's queue q.
	for q := range 2 {
		fr := testFrame(100, byte(q))
		f.transmitOn(2*q+1, 0, fr)
		signalFD(f.kick[2*q+1])
		var got []*buffer.Buf
		deadline := time.Now().Add(10 * time.Second)
		for len(got) == 0 && time.Now().Before(deadline) {
			bufs := make([]*buffer.Buf, 4)
			n, err := host.RxQueue(q).Receive(c, bufs)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, bufs[:n]...)
			time.Sleep(time.Millisecond)
		}
		if len(got) != 1 || string(got[0].Bytes()) != string(fr) {
			t.Fatalf("the guest's frame on ring %d: the host's queue %d got %d frames", 2*q+1, q, len(got))
		}
		c.ConsumeBulk(got)
	}

	f.enableRing(2, false)
	sent = send(20)
	expect("the second pair disabled again", 0, append(sent[0], sent[1]...))
	if s := vp.Stats(); s.TxDrops.Total() != 0 || s.TxPackets != 190 || s.BadChains != 0 || s.BrokenRings != 0 {
		t.Errorf("port %+v: want 190 sent, none dropped or refused", s)
	}
	for i := range 2 {
		if err := eng.Err(i); err != nil {
			t.Errorf("port %d: %v", i, err)
		}
	}
}
