package tun

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/engine"
	"softnet.dev/internal/netnstest"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/program"
)

// A TX ring whose writes never complete (the test's hook: the kernel
// takes nothing and answers nothing) fails its port with an error that
// the engine logs and reports, and the process lives on: before, the
// ring's flush returned success with every slot in flight and the next
// write indexed an empty free list, a worker panic. The buffers of the
// writes still in flight are not reused: the pool counts them in use and
// its leak check reports them.
func TestTxRingNeverCompletes(t *testing.T) {
	requireUring(t)
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ns := netnstest.New(t)
	name := devName("snk")
	d := openDev(t, Config{Name: name, NetNS: ns.Name, Offload: true})
	exec(t, ns, "ip", "link", "set", name, "up")
	deadline := time.Now().Add(testTimeout)
	for d.link.down.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if d.link.down.Load() {
		t.Fatalf("the link watch did not see the link come up in %v", testTimeout)
	}
	u := d.tx[0].ur
	u.stall = true
	// More packets than the ring has slots, all toward the device.
	gen, err := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Flows: 4, Count: 4 * txEntries})
	if err != nil {
		t.Fatal(err)
	}
	toDev := program.Func{ProgramName: "to-dev", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	var log bytes.Buffer
	e, err := engine.New(engine.Config{
		Pool: pool, Workers: 1, Programs: []program.Program{toDev},
		Log: slog.New(slog.NewTextHandler(&log, nil)),
	}, gen, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	for e.Err(1) == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	portErr := e.Err(1)
	if !errors.Is(portErr, port.ErrDown) || !strings.Contains(portErr.Error(), "not completed") {
		t.Fatalf("port error %v, want port.ErrDown for writes not completed", portErr)
	}
	for gen.Stats().Packets < 4*txEntries && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	e.Stop()
	st := e.Stats()
	if !st.Ports[1].Down || st.Ports[1].Err == "" {
		t.Errorf("the stuck port's stats: %+v", st.Ports[1])
	}
	if got := st.Ports[0].RxPackets; got != 4*txEntries {
		t.Errorf("the generator's packets: %d handled, want %d: the worker stopped", got, 4*txEntries)
	}
	if !strings.Contains(log.String(), "port down") {
		t.Errorf("the failure is not logged:\n%s", log.String())
	}
	if u.inFlight() == 0 {
		t.Fatal("no write in flight: the hook did not hold any")
	}
	stuck := 0 // buffers of the writes in flight
	for _, b := range u.held {
		if b != nil {
			stuck++
		}
	}
	if err := e.Close(); err != nil {
		t.Errorf("engine close: %v", err)
	}
	if got := pool.Stats().InUse; got != stuck {
		t.Errorf("%d buffers in use after close, want the %d of the writes in flight", got, stuck)
	}
	if err := pool.Close(); err == nil {
		t.Error("the leak check does not report the buffers the kernel holds")
	}
}
