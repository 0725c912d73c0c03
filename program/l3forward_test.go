package program

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/packet"
)

func newForwarder(t testing.TB, cfg L3Config) *L3Forwarder {
	t.Helper()
	f, err := NewL3Forwarder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func addrs(m map[string]int) map[netip.Addr]int {
	out := map[netip.Addr]int{}
	for k, v := range m {
		out[netip.MustParseAddr(k)] = v
	}
	return out
}

func wantLearned(t *testing.T, f *L3Forwarder, want map[string]int) {
	t.Helper()
	if got := f.Learned(); !maps.Equal(got, addrs(want)) {
		t.Errorf("learned %v, want %v", got, want)
	}
}

func TestL3ForwardsBetweenLearnedHosts(t *testing.T) {
	for _, fam := range []struct{ a, b string }{{"10.0.0.1", "10.0.0.2"}, {"fd00::1", "fd00::2"}} {
		t.Run(fam.a, func(t *testing.T) {
			e := newPktEnv(t)
			f := newForwarder(t, L3Config{})

			b := e.batch(packet.L3, 1, 0, udp(fam.a, fam.b))
			f.Run(b)
			wantVerdicts(t, b, FloodVerdict) // b is unknown yet
			wantLearned(t, f, map[string]int{fam.a: 1})

			b = e.batch(packet.L3, 2, 0, udp(fam.b, fam.a))
			f.Run(b)
			wantVerdicts(t, b, RedirectVerdict(1))

			b = e.batch(packet.L3, 1, 0, udp(fam.a, fam.b), udp(fam.a, fam.b))
			f.Run(b)
			wantVerdicts(t, b, RedirectVerdict(2), RedirectVerdict(2))
			wantLearned(t, f, map[string]int{fam.a: 1, fam.b: 2})
		})
	}
}

func TestL3LongestPrefixMatch(t *testing.T) {
	e := newPktEnv(t)
	f := newForwarder(t, L3Config{Routes: []Route{
		{netip.MustParsePrefix("0.0.0.0/0"), 5},
		{netip.MustParsePrefix("10.1.0.0/16"), 4},
		{netip.MustParsePrefix("10.1.2.0/24"), 3},
		{netip.MustParsePrefix("::/0"), 8},
		{netip.MustParsePrefix("2001:db8::/32"), 6},
		{netip.MustParsePrefix("2001:db8:1::/48"), 7},
	}})
	b := e.batch(packet.L3, 1, 0,
		udp("192.0.2.1", "10.1.2.9"),
		udp("192.0.2.1", "10.1.9.9"),
		udp("192.0.2.1", "8.8.8.8"),
		udp("2001:db8:ffff::1", "2001:db8:1::1"),
		udp("2001:db8:ffff::1", "2001:db8:2::1"),
		udp("2001:db8:ffff::1", "2001:4860::8888"),
	)
	f.Run(b)
	wantVerdicts(t, b, RedirectVerdict(3), RedirectVerdict(4), RedirectVerdict(5),
		RedirectVerdict(7), RedirectVerdict(6), RedirectVerdict(8))

	// Routes win: a packet from a routed address does not divert its
	// traffic, and nothing is learned.
	b = e.batch(packet.L3, 9, 0, udp("10.1.2.50", "192.0.2.1"), udp("2001:db8:1::50", "2001:db8:ffff::1"))
	f.Run(b)
	b = e.batch(packet.L3, 1, 0, udp("192.0.2.1", "10.1.2.50"), udp("2001:db8:ffff::1", "2001:db8:1::50"))
	f.Run(b)
	wantVerdicts(t, b, RedirectVerdict(3), RedirectVerdict(7))
	wantLearned(t, f, map[string]int{})
}

// A host learned before a route to it was added does not shadow the
// route.
func TestL3RouteAddedAfterLearning(t *testing.T) {
	e := newPktEnv(t)
	f := newForwarder(t, L3Config{})
	f.Run(e.batch(packet.L3, 1, 0, udp("198.18.1.1", "198.18.2.1")))
	wantLearned(t, f, map[string]int{"198.18.1.1": 1})
	if err := f.AddRoute(Route{netip.MustParsePrefix("198.18.1.0/24"), 4}); err != nil {
		t.Fatal(err)
	}
	b := e.batch(packet.L3, 2, 0, udp("198.18.2.1", "198.18.1.1"))
	f.Run(b)
	wantVerdicts(t, b, RedirectVerdict(4))
}

func TestL3RouteUpdates(t *testing.T) {
	e := newPktEnv(t)
	f := newForwarder(t, L3Config{NoLearn: true, Unknown: DropUnknown})
	if err := f.AddRoute(Route{netip.MustParsePrefix("10.1.2.3/16"), 2}); err != nil {
		t.Fatal(err)
	}
	if err := f.AddRoute(Route{netip.MustParsePrefix("10.1.2.0/24"), 3}); err != nil {
		t.Fatal(err)
	}
	if err := f.AddRoute(Route{netip.MustParsePrefix("fd00::/8"), 4}); err != nil {
		t.Fatal(err)
	}
	if err := f.AddRoute(Route{netip.MustParsePrefix("10.1.0.0/16"), 5}); err != nil { // replaces
		t.Fatal(err)
	}
	want := []Route{
		{netip.MustParsePrefix("10.1.2.0/24"), 3},
		{netip.MustParsePrefix("10.1.0.0/16"), 5},
		{netip.MustParsePrefix("fd00::/8"), 4},
	}
	if got := f.Routes(); !slices.Equal(got, want) {
		t.Fatalf("routes %v, want %v", got, want)
	}
	if err := f.RemoveRoute(netip.MustParsePrefix("10.1.2.77/24")); err != nil {
		t.Fatal(err)
	}
	b := e.batch(packet.L3, 1, 0, udp("192.0.2.1", "10.1.2.9"), udp("192.0.2.1", "10.2.0.1"))
	f.Run(b)
	wantVerdicts(t, b, RedirectVerdict(5), DropVerdict(drop.NoRoute))
	if len(f.Learned()) != 0 {
		t.Error("learned with NoLearn")
	}

	for _, bad := range []struct {
		err string
		do  func() error
	}{
		{"no route", func() error { return f.RemoveRoute(netip.MustParsePrefix("10.9.0.0/16")) }},
		{"invalid prefix", func() error { return f.RemoveRoute(netip.Prefix{}) }},
		{"invalid prefix", func() error { return f.AddRoute(Route{Port: 1}) }},
		{"port -1", func() error { return f.AddRoute(Route{netip.MustParsePrefix("10.0.0.0/8"), -1}) }},
		{"port 65536", func() error { return f.AddRoute(Route{netip.MustParsePrefix("10.0.0.0/8"), 65536}) }},
		{"duplicate route to 10.0.0.0/8", func() error {
			_, err := NewL3Forwarder(L3Config{Routes: []Route{
				{netip.MustParsePrefix("10.0.0.0/8"), 1}, {netip.MustParsePrefix("10.9.9.9/8"), 2}}})
			return err
		}},
		{"UnknownPolicy", func() error { _, err := NewL3Forwarder(L3Config{Unknown: 7}); return err }},
		{"MaxLearned", func() error { _, err := NewL3Forwarder(L3Config{MaxLearned: -1}); return err }},
	} {
		if err := bad.do(); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Errorf("error %v, want one mentioning %q", err, bad.err)
		}
	}
}

func TestL3Hairpin(t *testing.T) {
	e := newPktEnv(t)
	f := newForwarder(t, L3Config{Routes: []Route{{netip.MustParsePrefix("10.0.0.0/8"), 1}}})
	b := e.batch(packet.L3, 1, 0, udp("10.0.0.1", "10.0.0.2"), udp("192.0.2.1", "10.0.0.9"))
	f.Run(b)
	// Both destinations are behind port 1: by route, and by the route
	// again (sources are learned at the end of the batch).
	wantVerdicts(t, b, DropVerdict(drop.NoRoute), DropVerdict(drop.NoRoute))
	b = e.batch(packet.L3, 1, 0, udp("10.0.0.9", "10.0.0.1"))
	f.Run(b)
	wantVerdicts(t, b, DropVerdict(drop.NoRoute))
}

func TestL3UnknownAndMulticast(t *testing.T) {
	for _, tc := range []struct {
		policy  UnknownPolicy
		unknown Verdict
	}{{FloodUnknown, FloodVerdict}, {DropUnknown, DropVerdict(drop.NoRoute)}} {
		e := newPktEnv(t)
		f := newForwarder(t, L3Config{Unknown: tc.policy, DecrementTTL: true})
		b := e.batch(packet.L3, 1, 0,
			udp("10.0.0.1", "10.0.0.2"),
			udp("fd00::1", "fd00::2"),
			udp("10.0.0.1", "224.0.0.251"),
			udp("10.0.0.1", "255.255.255.255"),
			udp("fd00::1", "ff02::1"),
			nsPacket("fd00::1", "fd00::2"),
		)
		f.Run(b)
		wantVerdicts(t, b, tc.unknown, tc.unknown, FloodVerdict, FloodVerdict, FloodVerdict, FloodVerdict)
		// Link-local multicast keeps its TTL: NDP needs hop limit 255.
		for i, ttl := range []uint8{64, 64, 255} {
			if h, _ := b.Headers(i + 3); h.TTL != ttl || b.Bufs[i+3].Bytes()[ttlOffset(h)] != ttl {
				t.Errorf("packet %d: TTL %d, want %d", i+3, h.TTL, ttl)
			}
		}
	}
}

func nsPacket(src, target string) func([]byte) int {
	return func(b []byte) int {
		return packet.PutICMPv6NeighborSolicitation(b, netip.MustParseAddr(src), netip.MustParseAddr(target), mac(1))
	}
}

func ttlOffset(h *packet.Headers) int {
	if h.Proto == packet.EtherTypeIPv4 {
		return h.L3Off + 8
	}
	return h.L3Off + 7
}

func TestL3DecrementTTL(t *testing.T) {
	e := newPktEnv(t)
	f := newForwarder(t, L3Config{DecrementTTL: true, Routes: []Route{
		{netip.MustParsePrefix("10.2.0.0/16"), 2},
		{netip.MustParsePrefix("fd02::/16"), 2},
		{netip.MustParsePrefix("10.1.0.0/16"), 1},
	}})
	expiring := bytesOf(udp("10.1.0.1", "10.2.0.1"))
	expiring[8] = 1
	packet.SetIPv4HeaderChecksum(expiring)
	expiring6 := bytesOf(udp("fd01::1", "fd02::1"))
	expiring6[7] = 1
	hairpinExpiring := bytesOf(udp("10.1.0.1", "10.1.0.2"))
	hairpinExpiring[8] = 0
	packet.SetIPv4HeaderChecksum(hairpinExpiring)

	b := e.batch(packet.L3, 1, 0,
		udp("10.1.0.1", "10.2.0.1"),
		udp("fd01::1", "fd02::1"),
		raw(expiring),
		raw(expiring6),
		udp("10.1.0.2", "10.1.0.1"), // back where it came from
		raw(hairpinExpiring),
	)
	f.Run(b)
	wantVerdicts(t, b, RedirectVerdict(2), RedirectVerdict(2), DropVerdict(drop.IPTTL), DropVerdict(drop.IPTTL),
		DropVerdict(drop.NoRoute), DropVerdict(drop.NoRoute))
	for i, want := range []uint8{63, 63, 1, 1, 64} {
		h, _ := b.Headers(i)
		data := b.Bufs[i].Bytes()
		if h.TTL != want || data[ttlOffset(h)] != want {
			t.Errorf("packet %d: TTL %d in headers, %d in packet; want %d", i, h.TTL, data[ttlOffset(h)], want)
		}
		if h.Proto == packet.EtherTypeIPv4 && !packet.IPv4HeaderChecksumOK(data) {
			t.Errorf("packet %d: bad IPv4 header checksum after TTL update", i)
		}
	}
}

// A bad IPv4 header checksum is dropped with IP_CSUM, before the TTL is
// touched and before its source is learned; IPv6 has no header checksum.
func TestL3BadIPv4HeaderChecksum(t *testing.T) {
	e := newPktEnv(t)
	for _, ttl := range []bool{false, true} {
		f := newForwarder(t, L3Config{DecrementTTL: ttl, Routes: []Route{{netip.MustParsePrefix("10.2.0.0/16"), 2}}})
		bad := bytesOf(udp("10.1.0.1", "10.2.0.1"))
		bad[10] ^= 0x01
		badLow := bytesOf(udp("10.1.0.3", "10.2.0.1"))
		badLow[11] ^= 0x80
		b := e.batch(packet.L3, 1, 0, raw(bad), udp("10.1.0.2", "10.2.0.1"), raw(badLow))
		f.Run(b)
		wantVerdicts(t, b, DropVerdict(drop.IPCsum), RedirectVerdict(2), DropVerdict(drop.IPCsum))
		wantLearned(t, f, map[string]int{"10.1.0.2": 1})
		if got := b.Bufs[0].Bytes()[8]; got != 64 {
			t.Errorf("DecrementTTL %v: dropped packet's TTL changed to %d", ttl, got)
		}
	}
	// The same on an L2 port: the checksum is found past the Ethernet
	// header.
	f := newForwarder(t, L3Config{Routes: []Route{{netip.MustParsePrefix("10.2.0.0/16"), 2}}})
	frame := bytesOf(ether(mac(1), mac(2), packet.EtherTypeIPv4, udp("10.1.0.1", "10.2.0.1")))
	frame[packet.EthernetHeaderLen+10] ^= 0x10
	b := e.batch(packet.L2, 1, 0, raw(frame), ether(mac(1), mac(2), packet.EtherTypeIPv4, udp("10.1.0.1", "10.2.0.1")))
	f.Run(b)
	wantVerdicts(t, b, DropVerdict(drop.IPCsum), RedirectVerdict(2))
}

// A host moves to another port only after the move hold time; moves
// within it are refused, counted and logged once per address.
func TestL3HostMoves(t *testing.T) {
	e := newPktEnv(t)
	var log strings.Builder
	f := newForwarder(t, L3Config{Unknown: DropUnknown, MoveHold: time.Second, Log: slog.New(slog.NewTextHandler(&log, nil))})
	const ms = int64(time.Millisecond)
	run := func(ingress int, now int64, src, dst string) *Batch {
		b := e.batch(packet.L3, ingress, now, udp(src, dst))
		f.Run(b)
		return b
	}
	run(1, 0, "198.18.0.1", "198.18.0.200")
	wantLearned(t, f, map[string]int{"198.18.0.1": 1})
	for i := range 3 { // flapping within the hold: refused, the host stays
		run(2, int64(100+i)*ms, "198.18.0.1", "198.18.0.200")
		run(1, int64(200+i)*ms, "198.18.0.1", "198.18.0.200")
	}
	wantLearned(t, f, map[string]int{"198.18.0.1": 1})
	wantVerdicts(t, run(3, 300*ms, "198.18.0.3", "198.18.0.1"), RedirectVerdict(1))
	run(2, 1500*ms, "198.18.0.1", "198.18.0.200") // after the hold: moves
	wantLearned(t, f, map[string]int{"198.18.0.1": 2, "198.18.0.3": 3})
	wantVerdicts(t, run(3, 1600*ms, "198.18.0.3", "198.18.0.1"), RedirectVerdict(2))
	run(1, 1700*ms, "198.18.0.1", "198.18.0.200") // and is held on its new port
	wantLearned(t, f, map[string]int{"198.18.0.1": 2, "198.18.0.3": 3})

	s := f.LearnStats()
	if s.Learned != 2 || s.Moved != 1 || s.MovesRefused != 4 || s.Hosts != 2 {
		t.Errorf("stats %+v, want 2 learned, 1 moved, 4 moves refused, 2 hosts", s)
	}
	if n := strings.Count(log.String(), "flaps"); n != 1 {
		t.Errorf("flapping logged %d times, want once:\n%s", n, log.String())
	}
}

// Hosts that went quiet age out: lookups ignore them at once, Age and
// the next copy of the table free them, and a full table makes room.
func TestL3Ageing(t *testing.T) {
	e := newPktEnv(t)
	f := newForwarder(t, L3Config{Unknown: DropUnknown, MaxLearned: 2, AgeingTime: 10 * time.Second})
	const s = int64(time.Second)
	f.Run(e.batch(packet.L3, 1, 0, udp("198.18.0.1", "198.18.0.9")))
	f.Run(e.batch(packet.L3, 2, 0, udp("198.18.0.2", "198.18.0.9")))
	// Full: a third host is not learned, and the known ones keep working.
	b := e.batch(packet.L3, 3, 1*s, udp("198.18.0.3", "198.18.0.1"), udp("198.18.0.3", "198.18.0.2"))
	f.Run(b)
	wantVerdicts(t, b, RedirectVerdict(1), RedirectVerdict(2))
	wantLearned(t, f, map[string]int{"198.18.0.1": 1, "198.18.0.2": 2})
	if st := f.LearnStats(); st.Full == 0 {
		t.Errorf("stats %+v: the refused host is not counted", st)
	}
	// 198.18.0.1 keeps sending, 198.18.0.2 goes quiet.
	f.Run(e.batch(packet.L3, 1, 8*s, udp("198.18.0.1", "198.18.0.9")))
	b = e.batch(packet.L3, 3, 12*s, udp("198.18.0.3", "198.18.0.2"), udp("198.18.0.3", "198.18.0.1"))
	f.Run(b)
	wantVerdicts(t, b, DropVerdict(drop.NoRoute), RedirectVerdict(1))
	// The full table made room for 198.18.0.3 once 198.18.0.2 aged out.
	wantLearned(t, f, map[string]int{"198.18.0.1": 1, "198.18.0.3": 3})
	f.Age(30 * s)
	if st := f.LearnStats(); st.Hosts != 0 || st.Aged != 3 {
		t.Errorf("after Age: stats %+v, want 0 hosts, 3 aged", st)
	}
}

func TestL3LearningLimits(t *testing.T) {
	e := newPktEnv(t)
	f := newForwarder(t, L3Config{MaxLearned: 40})
	// More new hosts in one batch than one commit takes, some repeated,
	// plus sources that are not hosts.
	var fills []func([]byte) int
	want := map[string]int{}
	for i := range 45 {
		src := fmt.Sprintf("10.0.%d.%d", i/2, i%2+1)
		fills = append(fills, udp(src, "192.0.2.1"), udp(src, "192.0.2.1"))
		if i < 40 {
			want[src] = 3
		}
	}
	fills = append(fills, udp("0.0.0.0", "255.255.255.255"), udp("::", "ff02::1:ff00:1"), udp("fe80::1", "ff02::2"))
	b := e.batch(packet.L3, 3, 0, fills...)
	f.Run(b)
	wantLearned(t, f, want)
	// Full: new hosts are not learned, known ones still move (after the
	// move hold).
	f.Run(e.batch(packet.L3, 4, int64(2*DefaultMoveHold), udp("10.0.99.1", "192.0.2.1"), udp("10.0.0.1", "192.0.2.1")))
	want["10.0.0.1"] = 4
	wantLearned(t, f, want)
	if s := f.LearnStats(); s.Full == 0 || s.Moved != 1 {
		t.Errorf("stats %+v: want refused new hosts counted and one move", s)
	}
}

func TestL3MalformedLeavesTablesAlone(t *testing.T) {
	e := newPktEnv(t)
	f := newForwarder(t, L3Config{})
	good := bytesOf(udp("10.0.0.1", "10.0.0.2"))
	badVersion := append([]byte(nil), good...)
	badVersion[0] = 0x55
	badLength := append([]byte(nil), good...)
	badLength[3] += 100
	b := e.batch(packet.L3, 1, 0,
		raw(good[:10]),
		raw(badVersion),
		raw(badLength),
		raw(nil),
		raw(good),
	)
	b.Verdicts[4] = DropVerdict(drop.FullRing) // decided by an earlier program
	f.Run(b)
	wantVerdicts(t, b, DropVerdict(drop.HdrTrunc), DropVerdict(drop.InvalidProto), DropVerdict(drop.InvalidProto),
		DropVerdict(drop.PktTooSmall), DropVerdict(drop.FullRing))
	wantLearned(t, f, map[string]int{})
}

func TestL3OnEthernet(t *testing.T) {
	e := newPktEnv(t)
	f := newForwarder(t, L3Config{Routes: []Route{{netip.MustParsePrefix("10.2.0.0/16"), 2}}})
	b := e.batch(packet.L2, 1, 0,
		ether(mac(2), mac(1), packet.EtherTypeIPv4, udp("10.1.0.1", "10.2.0.1")),
		arpFrame(packet.ARPRequest, mac(1), "10.1.0.1", [6]byte{}, "10.1.0.2"),
	)
	f.Run(b)
	wantVerdicts(t, b, RedirectVerdict(2), DropVerdict(drop.UnhandledProto))
	wantLearned(t, f, map[string]int{"10.1.0.1": 1})
}

func TestL3ChangeRoutes(t *testing.T) {
	e := newPktEnv(t)
	f := newForwarder(t, L3Config{NoLearn: true, Unknown: DropUnknown})
	if err := f.ChangeRoutes(nil, []Route{{netip.MustParsePrefix("10.1.0.0/16"), 2}, {netip.MustParsePrefix("10.2.0.0/16"), 3}}); err != nil {
		t.Fatal(err)
	}
	if err := f.ChangeRoutes([]netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, []Route{{netip.MustParsePrefix("fd00::/8"), 4}, {netip.MustParsePrefix("10.2.0.0/16"), 5}}); err != nil {
		t.Fatal(err)
	}
	want := []Route{{netip.MustParsePrefix("10.2.0.0/16"), 5}, {netip.MustParsePrefix("fd00::/8"), 4}}
	if got := f.Routes(); !slices.Equal(got, want) {
		t.Fatalf("routes %v, want %v", got, want)
	}
	b := e.batch(packet.L3, 1, 0, udp("192.0.2.1", "10.1.2.9"), udp("192.0.2.1", "10.2.0.1"))
	f.Run(b)
	wantVerdicts(t, b, DropVerdict(drop.NoRoute), RedirectVerdict(5))
	// A change with one bad part changes nothing.
	for _, bad := range []struct {
		remove []netip.Prefix
		add    []Route
		err    string
	}{
		{[]netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}, nil, "no route"},
		{nil, []Route{{netip.MustParsePrefix("10.3.0.0/16"), 1}, {Port: 1}}, "invalid prefix"},
	} {
		if err := f.ChangeRoutes(bad.remove, bad.add); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Errorf("ChangeRoutes(%v, %v): %v, want %q", bad.remove, bad.add, err, bad.err)
		}
		if got := f.Routes(); !slices.Equal(got, want) {
			t.Fatalf("a refused change changed the routes: %v", got)
		}
	}
}
