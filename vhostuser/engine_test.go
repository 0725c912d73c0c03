//go:build linux

package vhostuser

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/engine"
	"softnet.dev/program"
)

// Two guests on two ports of an engine whose program sends what one
// port receives out of the other: the worker polls the rings, sleeps
// when they are idle and wakes for a guest's kick.
func TestEngineBetweenGuests(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var ports []*Port
	for _, name := range []string{"a", "b"} {
		p, err := Listen(Config{Name: name, Socket: filepath.Join(dir, name+".sock")})
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
	waitRunning(t, ports[0], 1)
	waitRunning(t, ports[1], 0)
	b.postRx(0, 128, bufSize)

	// send transmits frames from a and kicks, as a driver does, only if
	// the port asked for kicks.
	var want [][]byte
	send := func(from, n int) {
		for i := from; i < from+n; i++ {
			fr := testFrame(60+i, byte(i))
			want = append(want, fr)
			a.transmit(i, fr)
		}
		if a.usedFlags(1)&usedNoNotify == 0 {
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
	send(0, 50)
	collect(50)
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
