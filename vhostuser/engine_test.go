//go:build linux

package vhostuser

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/engine"
	"softnet.dev/program"
)

// Two guests on two ports of an engine whose program sends what one
// port receives out of the other: the worker polls the rings, sleeps
// when they are idle and wakes for a guest's kick. A third, hostile,
// guest sends descriptor chains that loop, point outside its memory or
// past its ring, then corrupts its ring's index: each is a counted drop,
// the engine lives and the other two keep exchanging packets.
func TestEngineBetweenGuests(t *testing.T) {
	t.Run("flags", func(t *testing.T) { testEngineBetweenGuests(t, 0) })
	t.Run("event-idx", func(t *testing.T) { testEngineBetweenGuests(t, featEventIdx) })
}

func testEngineBetweenGuests(t *testing.T, extra uint64) {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var ports []*Port
	for _, name := range []string{"a", "b", "h"} {
		p, err := Listen(Config{Name: name, Socket: filepath.Join(dir, name+".sock"), Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, p)
	}
	cross := program.Func{ProgramName: "cross", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1 - min(b.Ingress, 1))
		}
	}}
	eng, err := engine.New(engine.Config{Pool: pool, Programs: []program.Program{cross}}, ports[0], ports[1], ports[2])
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		eng.Stop()
		if err := eng.Close(); err != nil {
			t.Error(err)
		}
		if err := pool.Close(); err != nil {
			t.Errorf("leak check: %v", err)
		}
	})
	a, b, h := newTestFrontend(t, ports[0].Socket()), newTestFrontend(t, ports[1].Socket()), newTestFrontend(t, ports[2].Socket())
	a.setup(featVersion1 | featMrgRxbuf | extra)
	b.setup(featVersion1 | featMrgRxbuf | extra)
	h.setup(featVersion1 | featMrgRxbuf | extra)
	waitRunning(t, ports[0], 1)
	waitRunning(t, ports[1], 0)
	waitRunning(t, ports[2], 1)
	b.postRx(0, 128, bufSize)

	// send transmits frames from a and kicks, as a driver does, only if
	// the port asked for kicks: by clearing the flag, or with event
	// indexes by an avail_event among the entries just published.
	var want [][]byte
	send := func(from, n int) {
		old := a.availIdx[1]
		for i := from; i < from+n; i++ {
			fr := testFrame(60+i, byte(i))
			want = append(want, fr)
			a.transmit(i, fr)
		}
		kick := a.usedFlags(1)&usedNoNotify == 0
		if extra&featEventIdx != 0 {
			event := binary.LittleEndian.Uint16(a.mem[a.usedOff(1)+4+8*testNum:])
			kick = a.availIdx[1]-event-1 < a.availIdx[1]-old
		}
		if kick {
			signalFD(a.kick[1])
		}
	}
	var got [][]byte
	collect := func(n int) {
		deadline := time.Now().Add(10 * time.Second)
		for len(got) < n && time.Now().Before(deadline) {
			_, frames := b.received()
			for _, f := range frames {
				got = append(got, append([]byte(nil), f...))
			}
			time.Sleep(time.Millisecond)
		}
		if len(got) != n {
			t.Fatalf("guest b received %d frames, want %d; port a %+v, port b %+v", len(got), n, ports[0].Stats(), ports[1].Stats())
		}
	}
	// The hostile guest, between a's packets.
	hostile := func() {
		hb := guestBase + uint64(h.bufOff(1, 0))
		h.setDesc(1, 0, hb, 40, descNext, 1)
		h.setDesc(1, 1, hb, 40, descNext, 0) // a loop
		h.setDesc(1, 2, guestBase+memSize-4, 64, 0, 0)
		h.offer(1, 0)
		h.offer(1, 2)
		h.offer(1, testNum+5)
		signalFD(h.kick[1])
	}
	send(0, 25)
	hostile()
	send(25, 25)
	collect(50)
	deadline := time.Now().Add(10 * time.Second)
	for ports[2].Stats().BadChains < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if s := ports[2].Stats(); s.BadChains != 3 || s.RxDrops.Total() != 3 || s.RxPackets != 0 {
		t.Errorf("hostile guest's port: %+v; want 3 bad chains, each a drop", s)
	}
	// A runaway available index: the ring is given up, the port stays.
	h.setAvailIdx(1, h.availIdx[1]+testNum+1)
	signalFD(h.kick[1])
	for ports[2].Stats().BrokenRings == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if s := ports[2].Stats(); s.BrokenRings != 1 {
		t.Errorf("hostile guest's port: %d rings given up, want 1", s.BrokenRings)
	}
	for i := range ports {
		if err := eng.Err(i); err != nil {
			t.Errorf("port %d failed: %v", i, err)
		}
	}
	// Idle long enough for the worker to sleep; a kick wakes it.
	time.Sleep(100 * time.Millisecond)
	if eng.Stats().Workers[0].Sleeps == 0 {
		t.Error("the worker never slept")
	}
	send(50, 10)
	collect(60)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d: got %d bytes, want %d", i, len(got[i]), len(want[i]))
		}
	}
}

// A guest whose front-end gave its transmit ring no kick descriptor
// (VHOST_USER_VRING_NOFD) never kicks: the engine's worker, asleep when
// the guest sends, must still forward its packets, and sleeps between
// them.
func TestEngineNoKickRing(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var ports []*Port
	for _, name := range []string{"a", "b"} {
		p, err := Listen(Config{Name: name, Socket: filepath.Join(dir, name+".sock"), Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, p)
	}
	cross := program.Func{ProgramName: "cross", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1 - b.Ingress)
		}
	}}
	eng, err := engine.New(engine.Config{Pool: pool, Programs: []program.Program{cross}}, ports[0], ports[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		eng.Stop()
		if err := eng.Close(); err != nil {
			t.Error(err)
		}
		if err := pool.Close(); err != nil {
			t.Errorf("leak check: %v", err)
		}
	})
	a, b := newTestFrontend(t, ports[0].Socket()), newTestFrontend(t, ports[1].Socket())
	a.setup(featVersion1 | featMrgRxbuf)
	b.setup(featVersion1 | featMrgRxbuf)
	a.must(reqSetVringKick, u64Payload(1|vringNoFD))
	waitRunning(t, ports[0], 1)
	waitRunning(t, ports[1], 0)
	b.postRx(0, 64, bufSize)
	waitFor(t, func() bool { return eng.Stats().Workers[0].Sleeps > 0 }, "sleep of the worker")
	got := 0
	for i := range 5 {
		time.Sleep(20 * time.Millisecond) // long enough for the worker to fall asleep again
		a.transmit(i, testFrame(64, byte(i)))
		waitFor(t, func() bool {
			_, frames := b.received()
			got += len(frames)
			return got == i+1
		}, fmt.Sprintf("packet %d from the guest that does not kick", i))
	}
}
