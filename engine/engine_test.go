package engine

import (
	"bytes"
	"errors"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/program"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rig is an engine between in-memory pairs: the engine polls one end of
// each pair, the test drives the other end ("wire") with its own cache.
type rig struct {
	t     *testing.T
	pool  *buffer.Pool
	e     *Engine
	ports []*memport.PairPort // the engine's ends
	wires []*memport.PairPort // the test's ends
	cache *buffer.Cache       // the test's, for the wire ends
}

func newRig(t *testing.T, layer packet.Layer, workers int, programs []program.Program, names ...string) *rig {
	t.Helper()
	return newRigWith(t, Config{Workers: workers, Programs: programs}, layer, names...)
}

// newRigWith is newRig with more of the engine's configuration.
func newRigWith(t *testing.T, cfg Config, layer packet.Layer, names ...string) *rig {
	t.Helper()
	workers := max(cfg.Workers, 1)
	pool, err := buffer.NewPool(buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 2048}}})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, pool: pool}
	var ports []port.Port
	for _, n := range names {
		a, b, err := memport.NewPair(n, n+"-wire", memport.PairConfig{Queues: workers, RingSize: 256, Layer: layer})
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, a)
		r.ports = append(r.ports, a)
		r.wires = append(r.wires, b)
	}
	if r.cache, err = pool.NewCache(nil); err != nil {
		t.Fatal(err)
	}
	cfg.Pool = pool
	r.e, err = New(cfg, ports...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	return r
}

// close shuts everything down and checks that every buffer came home.
func (r *rig) close() {
	if err := r.e.Close(); err != nil {
		r.t.Errorf("engine close: %v", err)
	}
	for _, w := range r.wires {
		if err := w.CloseInto(r.cache); err != nil {
			r.t.Errorf("wire close: %v", err)
		}
	}
	if err := r.pool.Close(); err != nil {
		r.t.Errorf("pool leak check: %v", err)
	}
}

// send transmits raw packets into the engine through wire i.
func (r *rig) send(i int, pkts ...[]byte) {
	r.t.Helper()
	bufs := make([]*buffer.Buf, len(pkts))
	for j, p := range pkts {
		b, err := r.cache.Get(0)
		if err != nil {
			r.t.Fatal(err)
		}
		d, _ := b.Append(len(p))
		copy(d, p)
		bufs[j] = b
	}
	if n, err := r.wires[i].TxQueue(0).Transmit(r.cache, bufs); err != nil || n != len(pkts) {
		r.t.Fatalf("wire %d transmit: %d, %v", i, n, err)
	}
}

// recv collects what the engine sent out of wire i within d.
func (r *rig) recv(i int, want int, d time.Duration) [][]byte {
	r.t.Helper()
	var got [][]byte
	bufs := make([]*buffer.Buf, 64)
	deadline := time.Now().Add(d)
	for len(got) < want && time.Now().Before(deadline) {
		n, err := r.wires[i].RxQueue(0).Receive(r.cache, bufs)
		if err != nil {
			r.t.Fatal(err)
		}
		for _, b := range bufs[:n] {
			got = append(got, append([]byte(nil), b.Bytes()...))
		}
		r.cache.ConsumeBulk(bufs[:n])
		r.cache.Drain()
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return got
}

func udp(src, dst string, payload string) []byte {
	b := make([]byte, 2048)
	n := packet.PutUDP(b, netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst), []byte(payload))
	return b[:n]
}

func (r *rig) stats(settle func(Stats) bool) Stats {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := r.e.Stats()
		if settle(s) || time.Now().After(deadline) {
			return s
		}
		time.Sleep(time.Millisecond)
	}
}

func TestForwardsIPv4AndIPv6(t *testing.T) {
	fwd, err := program.NewL3Forwarder(program.L3Config{
		Routes:  []program.Route{{Prefix: netip.MustParsePrefix("198.19.0.0/16"), Port: 1}, {Prefix: netip.MustParsePrefix("2001:db8:1::/48"), Port: 1}},
		Unknown: program.DropUnknown,
	})
	if err != nil {
		t.Fatal(err)
	}
	deny, err := program.ParseRule("deny proto=udp dport=53")
	if err != nil {
		t.Fatal(err)
	}
	filter, err := program.NewFilter([]program.Rule{deny}, true)
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, packet.L3, 1, []program.Program{filter, fwd}, "a", "b")
	if err := r.e.Start(); err != nil {
		t.Fatal(err)
	}
	r.send(0, udp("198.18.0.1:1000", "198.19.0.1:53", "filtered"))
	v4 := udp("198.18.0.1:1000", "198.19.0.1:2000", "hello v4")
	v6 := udp("[2001:db8::1]:1000", "[2001:db8:1::1]:2000", "hello v6")
	r.send(0, v4, v6, udp("198.18.0.1:1", "203.0.113.1:1", "nowhere")[:0:0])
	got := r.recv(1, 2, 10*time.Second)
	if len(got) != 2 || string(got[0]) != string(v4) || string(got[1]) != string(v6) {
		t.Fatalf("b received %d packets: %x", len(got), got)
	}
	// The reply goes back by the address learned from the first packet.
	reply := udp("198.19.0.1:2000", "198.18.0.1:1000", "reply")
	r.send(1, reply)
	if got := r.recv(0, 1, 10*time.Second); len(got) != 1 || string(got[0]) != string(reply) {
		t.Fatalf("a received %x", got)
	}
	s := r.stats(func(s Stats) bool { return s.Ports[0].Drops[drop.PktTooSmall] == 1 })
	if s.Ports[0].RxPackets != 4 || s.Ports[1].TxPackets != 2 || s.Ports[0].Drops[drop.PktTooSmall] != 1 || s.Ports[0].Drops[drop.Filter] != 1 {
		t.Fatalf("stats %+v", s.Ports)
	}
}

func TestMalformedPacketsAreDroppedWithReasons(t *testing.T) {
	fwd, err := program.NewL3Forwarder(program.L3Config{Unknown: program.FloodUnknown})
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, packet.L3, 1, []program.Program{fwd}, "a", "b")
	if err := r.e.Start(); err != nil {
		t.Fatal(err)
	}
	good := udp("198.18.0.1:1", "198.19.0.1:2", "ok")
	truncated := good[:24]
	badVersion := append([]byte{0x55}, good[1:]...)
	r.send(0, truncated, badVersion, good)
	if got := r.recv(1, 1, 10*time.Second); len(got) != 1 || string(got[0]) != string(good) {
		t.Fatalf("b received %x", got)
	}
	s := r.stats(func(s Stats) bool { return s.Ports[0].Drops.Total() == 2 })
	if d := s.Ports[0].Drops; d[drop.HdrTrunc]+d[drop.InvalidProto] != 2 {
		t.Fatalf("drops %v", d)
	}
}

func TestBridgeFloodsAndLearns(t *testing.T) {
	br := program.NewBridge(program.BridgeConfig{})
	r := newRig(t, packet.L2, 1, []program.Program{br}, "a", "b", "c")
	if err := r.e.Start(); err != nil {
		t.Fatal(err)
	}
	macA := [6]byte{0x02, 0, 0, 0, 0, 0xa}
	macB := [6]byte{0x02, 0, 0, 0, 0, 0xb}
	frame := func(dst, src [6]byte, ip []byte) []byte {
		b := make([]byte, 14+len(ip))
		packet.PutEthernet(b, dst, src, packet.EtherTypeIPv4)
		copy(b[14:], ip)
		return b
	}
	arp := make([]byte, 14+packet.ARPLen)
	packet.PutEthernet(arp, packet.Broadcast, macA, packet.EtherTypeARP)
	packet.PutARP(arp[14:], packet.ARPRequest, macA, netip.MustParseAddr("198.18.0.1"), [6]byte{}, netip.MustParseAddr("198.18.0.2"))
	r.send(0, arp)
	if len(r.recv(1, 1, 10*time.Second)) != 1 || len(r.recv(2, 1, 10*time.Second)) != 1 {
		t.Fatal("ARP request not flooded to b and c")
	}
	reply := frame(macA, macB, udp("198.18.0.2:1", "198.18.0.1:1", "to a"))
	r.send(1, reply)
	if got := r.recv(0, 1, 10*time.Second); len(got) != 1 {
		t.Fatal("unicast to a learned address not delivered")
	}
	if got := r.recv(2, 1, 50*time.Millisecond); len(got) != 0 {
		t.Fatal("unicast to a learned address leaked to c")
	}
}

func TestProgramPanicLosesOnlyItsBatch(t *testing.T) {
	var calls atomic.Int32
	boom := program.Func{ProgramName: "boom", F: func(b *program.Batch) {
		calls.Add(1)
		for i, buf := range b.Bufs {
			if buf.Bytes()[len(buf.Bytes())-1] == 'X' {
				panic("bad packet")
			}
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	r := newRig(t, packet.L3, 1, []program.Program{boom}, "a", "b")
	if err := r.e.Start(); err != nil {
		t.Fatal(err)
	}
	r.send(0, udp("198.18.0.1:1", "198.19.0.1:2", "X"), udp("198.18.0.1:1", "198.19.0.1:2", "X"))
	r.stats(func(s Stats) bool { return s.Ports[0].Drops[drop.Prog] == 2 })
	good := udp("198.18.0.1:1", "198.19.0.1:2", "fine")
	r.send(0, good)
	if got := r.recv(1, 1, 10*time.Second); len(got) != 1 {
		t.Fatal("worker stopped forwarding after a program panic")
	}
	s := r.stats(func(s Stats) bool { return s.Workers[0].Panics >= 1 })
	if s.Ports[0].Drops[drop.Prog] != 2 || s.Workers[0].Panics < 1 {
		t.Fatalf("drops %v, panics %d", s.Ports[0].Drops, s.Workers[0].Panics)
	}
}

func TestIdleWorkerSleepsAndWakes(t *testing.T) {
	fwd := program.Func{ProgramName: "to-b", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	r := newRig(t, packet.L3, 1, []program.Program{fwd}, "a", "b")
	if err := r.e.Start(); err != nil {
		t.Fatal(err)
	}
	if s := r.stats(func(s Stats) bool { return s.Workers[0].Sleeps >= 1 }); s.Workers[0].Sleeps < 1 {
		t.Fatal("idle worker never slept")
	}
	// Counters are published one by one, not as a snapshot, and a loaded
	// machine may delay the publish that preceded the sleep: start from
	// two equal reads 20 ms apart. A spinning worker never gives them.
	s1 := r.e.Stats()
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(20 * time.Millisecond)
		again := r.e.Stats()
		if again.Workers[0].Rounds == s1.Workers[0].Rounds {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle worker kept polling: %d rounds", again.Workers[0].Rounds)
		}
		s1 = again
	}
	time.Sleep(100 * time.Millisecond)
	s2 := r.e.Stats()
	// Asleep in epoll_wait, the worker runs no rounds at all.
	if s2.Workers[0].Rounds != s1.Workers[0].Rounds {
		t.Fatalf("idle worker kept polling: %d rounds, then %d", s1.Workers[0].Rounds, s2.Workers[0].Rounds)
	}
	r.send(0, udp("198.18.0.1:1", "198.19.0.1:2", "wake up"))
	if got := r.recv(1, 1, 10*time.Second); len(got) != 1 {
		t.Fatal("sleeping worker did not wake for a packet")
	}
	// Without busy polling a worker sleeps after IdlePolls empty rounds
	// and never yields.
	if s := r.stats(func(s Stats) bool { return s.Workers[0].Sleeps > s2.Workers[0].Sleeps }); s.Workers[0].Yields != 0 {
		t.Fatalf("%d yields without busy polling", s.Workers[0].Yields)
	}
}

// With BusyPoll a worker that found nothing still sleeps after IdlePolls
// rounds; one that forwarded a packet keeps polling, many more rounds than
// IdlePolls, before it sleeps again.
func TestBusyPoll(t *testing.T) {
	fwd := program.Func{ProgramName: "to-b", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	r := newRigWith(t, Config{Programs: []program.Program{fwd}, BusyPoll: 20 * time.Millisecond}, packet.L3, "a", "b")
	if err := r.e.Start(); err != nil {
		t.Fatal(err)
	}
	s1 := r.stats(func(s Stats) bool { return s.Workers[0].Sleeps >= 1 })
	if s1.Workers[0].Sleeps < 1 {
		t.Fatal("idle worker never slept with busy polling on")
	}
	r.send(0, udp("198.18.0.1:1", "198.19.0.1:2", "wake up"))
	if got := r.recv(1, 1, 10*time.Second); len(got) != 1 {
		t.Fatal("packet not forwarded")
	}
	s2 := r.stats(func(s Stats) bool { return s.Workers[0].Sleeps > s1.Workers[0].Sleeps })
	if s2.Workers[0].Sleeps <= s1.Workers[0].Sleeps {
		t.Fatal("worker never slept again after its busy period")
	}
	// It busy-polled: many idle rounds, each past IdlePolls offering its
	// CPU to other threads, unless one took it (a loaded machine), which
	// ends the busy period early (TestBusyPollYieldsToContention).
	idle, y := s2.Workers[0].IdleRounds-s1.Workers[0].IdleRounds, s2.Workers[0].Yields-s1.Workers[0].Yields
	if s2.Workers[0].Contended == s1.Workers[0].Contended && idle <= 4*DefaultIdlePolls {
		t.Fatalf("%d idle rounds after a packet: the worker did not busy-poll", idle)
	}
	if y == 0 || y > idle {
		t.Fatalf("%d yields in %d idle rounds of busy polling", y, idle)
	}
}

func TestPortDownStopsOnlyThatPort(t *testing.T) {
	flood := program.Func{ProgramName: "flood", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.FloodVerdict
		}
	}}
	r := newRig(t, packet.L3, 1, []program.Program{flood}, "a", "b", "c")
	if err := r.e.Start(); err != nil {
		t.Fatal(err)
	}
	r.ports[1].SetDown(true)
	bIdx, _ := r.e.PortIndex("b")
	r.send(0, udp("198.18.0.1:1", "198.19.0.1:2", "1"))
	r.stats(func(s Stats) bool { return s.Ports[bIdx].Down })
	r.send(0, udp("198.18.0.1:1", "198.19.0.1:2", "2"))
	if got := r.recv(2, 2, 10*time.Second); len(got) != 2 {
		t.Fatalf("c received %d packets with b down", len(got))
	}
	s := r.e.Stats()
	if !s.Ports[bIdx].Down || !errors.Is(r.e.Err(bIdx), port.ErrDown) {
		t.Fatalf("b: %+v, err %v", s.Ports[bIdx], r.e.Err(bIdx))
	}
	r.ports[1].SetDown(false)
}

func TestStopAndCloseWithPacketsInFlight(t *testing.T) {
	fwd := program.Func{ProgramName: "to-b", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	r := newRig(t, packet.L3, 2, []program.Program{fwd}, "a", "b")
	if err := r.e.Start(); err != nil {
		t.Fatal(err)
	}
	pkt := udp("198.18.0.1:1", "198.19.0.1:2", "in flight")
	for range 10 {
		r.send(0, pkt, pkt, pkt, pkt, pkt, pkt, pkt, pkt)
	}
	r.e.Stop()
	if err := r.e.Start(); err != nil { // restartable
		t.Fatal(err)
	}
	// Close (in cleanup) purges what is still queued; the pool check
	// there must balance.
}

func TestConfigErrors(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	a, b, err := memport.NewPair("a", "b", memport.PairConfig{Queues: 1})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := pool.NewCache(nil)
	defer a.CloseInto(c)
	defer b.CloseInto(c)
	for _, tc := range []struct {
		cfg   Config
		ports []port.Port
	}{
		{Config{}, []port.Port{a}},
		{Config{Pool: pool, Workers: 2}, []port.Port{a}}, // one TX queue for two workers
		{Config{Pool: pool, Batch: 100000}, []port.Port{a}},
		{Config{Pool: pool, CPUs: []int{0}}, []port.Port{a}},
		{Config{Pool: pool, BusyPoll: -time.Millisecond}, []port.Port{a}},
		{Config{Pool: pool, BusyPoll: time.Hour}, []port.Port{a}},
		{Config{Pool: pool}, []port.Port{a, a}},
	} {
		if e, err := New(tc.cfg, tc.ports...); err == nil {
			e.Close()
			t.Errorf("config %+v accepted", tc.cfg)
		}
	}
}

func TestPinnedWorkersForward(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gen, _ := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Queues: 2, Flows: 2, Count: 1000})
	sink, _ := memport.NewSink("sink", memport.SinkConfig{Layer: packet.L3, Queues: 2})
	toSink := program.Func{ProgramName: "to-sink", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	e, err := New(Config{Pool: pool, Workers: 2, LockOSThread: true, CPUs: []int{0, runtime.NumCPU() - 1}, Programs: []program.Program{toSink}}, gen, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for sink.Stats().Packets < 2000 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if s := sink.Stats(); s.Packets != 2000 || s.Lost != 0 || s.Bad != 0 {
		t.Fatalf("sink %+v", s)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
}

// The egress program sees each round's packets for a port and its drops
// are counted on that port; the policer's ingress drops on the port the
// packets came from.
func TestEgressPolicing(t *testing.T) {
	pol := program.NewPolicer()
	// 1 kbit/s and one byte of burst: the first packet each way passes,
	// those after it wait 8 s for each 1000 bytes.
	tiny := program.Limit{Rate: 1000, Burst: 8}
	if err := pol.SetLimits(0, tiny, program.Limit{}); err != nil {
		t.Fatal(err)
	}
	redirect := program.Func{ProgramName: "other", F: func(b *program.Batch) {
		for i := range b.Bufs {
			if b.Verdicts[i] == program.PassVerdict {
				b.Verdicts[i] = program.RedirectVerdict(1 - b.Ingress)
			}
		}
	}}
	r := newRigWith(t, Config{Programs: []program.Program{pol, redirect}, Egress: pol}, packet.L3, "a", "b")
	if err := r.e.Start(); err != nil {
		t.Fatal(err)
	}
	pkt := func(s string) []byte { return udp("198.18.0.1:1", "198.19.0.1:2", s+strings.Repeat(".", 1000)) }
	// a's ingress passes one of three.
	r.send(0, pkt("a1"), pkt("a2"), pkt("a3"))
	if got := r.recv(1, 1, 10*time.Second); len(got) != 1 || !bytes.Equal(got[0], pkt("a1")) {
		t.Fatalf("b received %d packets", len(got))
	}
	// Neither b's ingress nor a's egress is limited.
	r.send(1, pkt("b1"), pkt("b2"))
	if got := r.recv(0, 2, 10*time.Second); len(got) != 2 {
		t.Fatalf("a received %d packets", len(got))
	}
	// Limits change while the engine runs: now only what goes to b, whose
	// new bucket is full: the first of these passes, then none.
	if err := pol.SetLimits(0, program.Limit{}, program.Limit{}); err != nil {
		t.Fatal(err)
	}
	if err := pol.SetLimits(1, program.Limit{}, tiny); err != nil {
		t.Fatal(err)
	}
	r.send(0, pkt("c1"), pkt("c2"), pkt("c3"), pkt("c4"))
	if got := r.recv(1, 1, 10*time.Second); len(got) != 1 || !bytes.Equal(got[0], pkt("c1")) {
		t.Fatalf("b received %d packets", len(got))
	}
	s := r.stats(func(s Stats) bool { return s.Ports[1].Drops[drop.PoliceEgress] == 3 })
	if d := s.Ports[0].Drops; d[drop.PoliceIngress] != 2 || d.Total() != 2 {
		t.Errorf("a's drops %v, want 2 POLICE_INGRESS", d)
	}
	if d := s.Ports[1].Drops; d[drop.PoliceEgress] != 3 || d.Total() != 3 {
		t.Errorf("b's drops %v, want 3 POLICE_EGRESS", d)
	}
}
