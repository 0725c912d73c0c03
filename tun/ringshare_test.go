package tun

import (
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/engine"
	"softnet.dev/internal/netnstest"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/program"
)

// Two devices on one worker share its io_uring: one descriptor for both,
// one buffer group whatever the number of queues. With a pool so small
// that the worker lends the kernel two buffers, a burst into one device
// runs the group dry: the loss is counted as NOMEM on that device, not
// on the idle one, and once the burst is over both devices' packets get
// through again: nothing stalls.
func TestSharedRingStarvesAndRecovers(t *testing.T) {
	requireUring(t)
	pool, err := buffer.NewPool(buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 64}, {Room: 65536, Count: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	var devs [2]*Device
	var nss [2]*netnstest.NS
	for i := range devs {
		nss[i] = netnstest.New(t)
		name := devName("snr")
		devs[i] = openDev(t, Config{Name: name, NetNS: nss[i].Name, Offload: true})
		addAddrs(t, nss[i], name, hostV4, netip.Addr{})
	}
	sink, err := memport.NewSink("sink", memport.SinkConfig{Layer: packet.L3})
	if err != nil {
		t.Fatal(err)
	}
	toSink := program.Func{ProgramName: "to-sink", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(2)
		}
	}}
	e, err := engine.New(engine.Config{
		Pool: pool, Workers: 1, Programs: []program.Program{toSink},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	// AddPort returns once the worker has attached the port's queues.
	for _, p := range []port.Port{devs[0], devs[1], sink} {
		if _, err := e.AddPort(p, nil); err != nil {
			t.Fatal(err)
		}
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			e.Close()
		}
	})
	if a, b := devs[0].RxQueue(0).FD(), devs[1].RxQueue(0).FD(); a < 0 || a != b {
		t.Fatalf("the queues' descriptors are %d and %d: not one ring", a, b)
	}
	if g := devs[0].rx[0].m.group; g != devs[1].rx[0].m.group || len(g.lent) != 2 {
		t.Fatalf("the queues do not share one group of two buffers")
	}
	sent := func(n int) uint64 {
		return e.Stats().Ports[2].TxPackets + uint64(n)
	}
	wait := func(want uint64, what string) {
		t.Helper()
		deadline := time.Now().Add(testTimeout)
		for e.Stats().Ports[2].TxPackets < want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d packets reached the sink, want %d", what, e.Stats().Ports[2].TxPackets, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	dst := netip.AddrPortFrom(peerV4, 4400)
	// A burst far larger than the group, as fast as the guest can send.
	for try := 0; devs[0].Stats().RxDrops[drop.NoMem] == 0; try++ {
		if try == 20 {
			t.Fatal("20 bursts of 2000 datagrams never ran the group dry")
		}
		sendUDP(t, nss[0], dst, 2000)
	}
	if n := devs[1].Stats().RxDrops[drop.NoMem]; n != 0 {
		t.Errorf("the idle device counted %d NOMEM drops", n)
	}
	// After the burst, each device's packets get through, one at a time.
	for i := range 3 {
		for d := range devs {
			want := sent(1)
			sendUDP(t, nss[d], dst, 1)
			wait(want, "after the burst, device "+string(rune('A'+d))+" packet "+string(rune('1'+i)))
		}
	}
	closed = true
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Close(); err != nil {
		t.Fatalf("leak check: %v", err)
	}
}
