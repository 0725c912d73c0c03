package tun

import (
	"fmt"
	"io"
	"log/slog"
	"net"
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

// The first queue that joined a worker's shared ring (polled when the
// ring's descriptor is readable, and arming it for all) leaves the
// ring's work to the others in every way it can go from outside: its
// link set down, its port removed, its device deleted (the port goes
// down), its namespace deleted. After each, the worker sleeps (a handful
// of rounds in half a second, not a spin) and the other members'
// packets, arriving while it sleeps, still wake it and get through; the
// pool balances at the end.
//
// Of the four, only the deleted device went wrong before the worker
// retired a down port's queues: the first member's port went down, no
// one armed the descriptor or reaped the others' completions, and the
// worker spun (about 100000 rounds in the half second) while the others'
// packets waited. A link set down is no error (the port stays up and
// reads nothing); a removed port's queue left the descriptor; and a
// deleted namespace outlives its name while the port's files hold it,
// so the device and the port live on until the port is removed.
func TestSharedRingFirstMemberLeaves(t *testing.T) {
	requireUring(t)
	for _, how := range []string{"link-down", "port-removed", "device-deleted", "namespace-deleted"} {
		t.Run(how, func(t *testing.T) { testSharedRingFirstMemberLeaves(t, how) })
	}
}

func testSharedRingFirstMemberLeaves(t *testing.T, how string) {
	pool, _ := newPool(t, buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 1024}, {Room: 65536, Count: 8}}})
	var devs [3]*Device
	var names [3]string
	var nss [3]*netnstest.NS
	for i := range devs {
		nss[i] = netnstest.New(t)
		names[i] = devName("snl")
		devs[i] = openDev(t, Config{Name: names[i], NetNS: nss[i].Name, Offload: true})
		addAddrs(t, nss[i], names[i], hostV4, netip.Addr{})
	}
	sink, err := memport.NewSink("sink", memport.SinkConfig{Layer: packet.L3})
	if err != nil {
		t.Fatal(err)
	}
	toSink := program.Func{ProgramName: "to-sink", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(len(devs))
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
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("engine close: %v", err)
		}
	})
	for _, p := range []port.Port{devs[0], devs[1], devs[2], sink} {
		if _, err := e.AddPort(p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if fd := devs[0].RxQueue(0).FD(); fd < 0 || devs[1].RxQueue(0).FD() != fd || devs[2].RxQueue(0).FD() != fd {
		t.Fatal("the devices' queues are not on one ring")
	}
	portStats := func(name string) engine.PortStats {
		for _, p := range e.Stats().Ports {
			if p.Name == name {
				return p
			}
		}
		return engine.PortStats{}
	}
	dst := netip.AddrPortFrom(peerV4, 4500)
	// send sends one datagram from device i's namespace, and waits for
	// the sink to have it. Its socket is closed at once: an open socket
	// would keep a deleted namespace alive.
	send := func(i int, what string) {
		t.Helper()
		want := portStats("sink").TxPackets + 1
		if err := nss[i].Do(func() error {
			conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
			if err != nil {
				return err
			}
			defer conn.Close()
			_, err = conn.Write([]byte(what))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(testTimeout); portStats("sink").TxPackets < want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the datagram from device %d never reached the sink; stats %+v", what, i, e.Stats())
			}
		}
	}
	for i := range devs {
		send(i, "before")
	}

	switch how {
	case "link-down":
		exec(t, nss[0], "ip", "link", "set", names[0], "down")
	case "port-removed":
		if err := e.RemovePort(0); err != nil {
			t.Fatal(err)
		}
	case "device-deleted":
		exec(t, nss[0], "ip", "link", "del", names[0])
		// Without a packet to read, the first member learns of it when
		// its read completes with an error, at once.
		for deadline := time.Now().Add(testTimeout); !portStats(names[0]).Down; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the deleted device's port never went down: %+v", portStats(names[0]))
			}
		}
	case "namespace-deleted":
		nss[0].Delete(t)
	}
	t.Logf("%s: first member's port %+v", how, portStats(names[0]))

	// The worker sleeps: a spinning one makes thousands of rounds in
	// this time, however loaded the machine.
	time.Sleep(100 * time.Millisecond)
	before := e.Stats().Workers[0]
	time.Sleep(500 * time.Millisecond)
	after := e.Stats().Workers[0]
	if n := after.Rounds - before.Rounds; n > 50 {
		t.Errorf("%s: the worker made %d rounds in 500 ms with nothing to do (%d sleeps): it spins", how, n, after.Sleeps-before.Sleeps)
	}
	// Packets to the others, while it sleeps, wake it.
	for i := 1; i < len(devs); i++ {
		for k := range 3 {
			send(i, fmt.Sprintf("after %d", k))
		}
	}
}
