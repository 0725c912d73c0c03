package vxlan

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/drop"
)

// SetRemotes changes a running port's flood list and static stations:
// a new remote gets floods at once, a learned station whose remote
// stays is kept, one whose remote goes is forgotten, and datagrams from
// a remote that went are dropped as IP_RPFILTER. What Validate refuses
// changes nothing.
func TestPortSetRemotes(t *testing.T) {
	a, b, cAddr := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3")
	ns := underlay(t, a, b, cAddr)
	_, c := newPool(t)
	pa := openPort(t, Config{Name: "a", VNI: 5, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name})
	pb := openPort(t, Config{Name: "b", VNI: 5, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a, cAddr}, NetNS: ns.Name})
	pc := openPort(t, Config{Name: "c", VNI: 5, Local: netip.AddrPortFrom(cAddr, 0), Remotes: []netip.Addr{a, b}, NetNS: ns.Name})
	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

	// a learns macB behind b.
	fromB := frame(bcast, macB, 1, 2, 64)
	send(t, c, pb, fromB)
	receive(t, c, pa, 1)
	receive(t, c, pc, 1)
	if tbl := pa.Table(); len(tbl) != 1 || tbl[0].MAC != macB || tbl[0].Remote != b.String() {
		t.Fatalf("a's table %+v", tbl)
	}

	// c joins a's flood list; macB stays learned behind b, now at
	// another index.
	if err := pa.SetRemotes([]netip.Addr{cAddr, b}, nil); err != nil {
		t.Fatal(err)
	}
	if tbl := pa.Table(); len(tbl) != 1 || tbl[0].MAC != macB || tbl[0].Remote != b.String() {
		t.Fatalf("a's table after c joined: %+v", tbl)
	}
	if got := pa.Config().Remotes; !slices.Equal(got, []netip.Addr{cAddr, b}) {
		t.Fatalf("a's remotes %v", got)
	}
	toB, flood := frame(macB, macA, 3, 4, 80), frame(bcast, macA, 5, 6, 90)
	if n := send(t, c, pa, toB, flood); n != 2 {
		t.Fatalf("sent %d", n)
	}
	if got := receive(t, c, pb, 2); !bytes.Equal(got[0], toB) && !bytes.Equal(got[1], toB) {
		t.Fatal("b did not get the frame to macB")
	}
	if got := receive(t, c, pc, 1); !bytes.Equal(got[0], flood) {
		t.Fatal("c did not get a's flood")
	}
	if s := pa.Stats(); s.Flooded != 1 || s.TxPackets != 3 || s.Learned != 1 {
		t.Fatalf("a: %+v", s)
	}

	// Refused, and nothing changes: the local address as a remote, a
	// static station behind no remote.
	for _, bad := range []struct {
		remotes []netip.Addr
		static  []StaticEntry
	}{
		{[]netip.Addr{a}, nil},
		{nil, nil},
		{[]netip.Addr{cAddr}, []StaticEntry{{MAC: macB, Remote: b}}},
	} {
		if err := pa.SetRemotes(bad.remotes, bad.static); err == nil {
			t.Errorf("SetRemotes(%v, %v) taken", bad.remotes, bad.static)
		}
	}
	if got := pa.Config().Remotes; !slices.Equal(got, []netip.Addr{cAddr, b}) {
		t.Fatalf("a's remotes after refusals %v", got)
	}

	// b leaves: macB is forgotten and b's datagrams are refused; a
	// static station behind c goes to c only.
	macX := [6]byte{0x02, 0, 0, 0, 0, 0x42}
	if err := pa.SetRemotes([]netip.Addr{cAddr}, []StaticEntry{{MAC: macX, Remote: cAddr}}); err != nil {
		t.Fatal(err)
	}
	if tbl := pa.Table(); len(tbl) != 1 || tbl[0].MAC != macX || !tbl[0].Static {
		t.Fatalf("a's table after b left: %+v", tbl)
	}
	send(t, c, pb, fromB)
	waitStats(t, pa, c, "b's datagram refused", func(s Stats) bool { return s.RxDrops[drop.IPRPFilter] == 1 })
	toX := frame(macX, macA, 7, 8, 70)
	if n := send(t, c, pa, toX); n != 1 {
		t.Fatalf("sent %d", n)
	}
	// c got b's flood too, before.
	if got := receive(t, c, pc, 2); !bytes.Equal(got[0], fromB) || !bytes.Equal(got[1], toX) {
		t.Fatal("c did not get the frame to its static station")
	}
	if s := pa.Stats(); s.Flooded != 1 || s.Stations != 0 {
		t.Fatalf("a: %+v", s)
	}
}

// A routed port's routes follow SetRemotes: a remote's VTEP MAC (its
// static entry) changes the frames routed to it, and a change that
// would leave a route without its remote is refused.
func TestPortSetRemotesRouted(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	ns := underlay(t, a, b)
	_, c := newPool(t)
	macVA, macVB, wrong := [6]byte{0x02, 0, 0, 0, 0x42, 1}, [6]byte{0x02, 0, 0, 0, 0x42, 2}, [6]byte{0x02, 0, 0, 0, 0x42, 9}
	pa := openPort(t, Config{Name: "a", VNI: 1, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name,
		L3: true, VTEPMAC: macVA, Static: []StaticEntry{{MAC: wrong, Remote: b}}})
	pb := openPort(t, Config{Name: "b", VNI: 1, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name,
		L3: true, VTEPMAC: macVB, Static: []StaticEntry{{MAC: macVA, Remote: a}}})
	if err := pa.SetRoutes([]Route{{Prefix: netip.MustParsePrefix("198.18.22.0/24"), Via: b}}); err != nil {
		t.Fatal(err)
	}
	v4 := ipUDP("198.18.21.1", "198.18.22.2", 100)
	send(t, c, pa, v4)
	waitStats(t, pb, c, "a frame to another VTEP MAC", func(s Stats) bool { return s.RxDrops[drop.OtherHost] == 1 })
	if err := pa.SetRemotes([]netip.Addr{b}, []StaticEntry{{MAC: macVB, Remote: b}}); err != nil {
		t.Fatal(err)
	}
	send(t, c, pa, v4)
	if got := receive(t, c, pb, 1); !bytes.Equal(got[0], v4) {
		t.Fatal("routed packet differs")
	}
	if err := pa.SetRemotes([]netip.Addr{b}, nil); err == nil {
		t.Fatal("a route's remote lost its VTEP MAC, and SetRemotes took it")
	}
	send(t, c, pa, v4)
	receive(t, c, pb, 1)
}

// SetRemotes while a worker sends and receives through the port: every
// burst uses one set of remotes, nothing is lost that was not counted,
// and every buffer comes home (the pool's leak check, at cleanup).
func TestPortSetRemotesUnderTraffic(t *testing.T) {
	a, b, cAddr := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3")
	ns := underlay(t, a, b, cAddr)
	_, c := newPool(t)
	pa := openPort(t, Config{Name: "a", VNI: 5, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name})
	pb := openPort(t, Config{Name: "b", VNI: 5, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name})
	openPort(t, Config{Name: "c", VNI: 5, Local: netip.AddrPortFrom(cAddr, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name})
	done := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		sets := [][]netip.Addr{{b, cAddr}, {cAddr, b}, {b}}
		for i := range 300 {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := pa.SetRemotes(sets[i%len(sets)], nil); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	bufs := make([]*buffer.Buf, 64)
	deadline := time.Now().Add(testTimeout)
	sent := 0
	for round := 0; round < 2000 && time.Now().Before(deadline); round++ {
		sent += send(t, c, pa, frame(macB, macA, uint16(round), 9, 64), frame([6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, macA, 1, 2, 64))
		// b answers, so that a learns macB behind b now and then.
		send(t, c, pb, frame(macA, macB, 9, uint16(round), 64))
		n, err := pa.RxQueue(0).Receive(c, bufs)
		if err != nil {
			t.Fatal(err)
		}
		c.ConsumeBulk(bufs[:n])
		n, err = pb.RxQueue(0).Receive(c, bufs)
		if err != nil {
			t.Fatal(err)
		}
		c.ConsumeBulk(bufs[:n])
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if sent == 0 {
		t.Fatal("nothing sent")
	}
	if s := pa.Stats(); s.RxDrops[drop.IPRPFilter] != 0 {
		t.Errorf("a refused datagrams from b, a remote in every set: %+v", s)
	}
}

// A routed port's next hop is found by longest prefix, with no
// allocation and at the same cost with two routes as with 2,000.
func BenchmarkRouteLookup(b *testing.B) {
	for _, n := range []int{2, 2000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			pe, dst := routedPeers(b, n)
			b.ReportAllocs()
			for b.Loop() {
				if pe.route(dst) == nil {
					b.Fatal("no route")
				}
			}
		})
	}
}

// routedPeers is a set of n/2 remotes, each with an IPv4 /24 and an
// IPv6 /64 routed to it, and an address routed to the last remote.
func routedPeers(tb testing.TB, n int) (*peers, netip.Addr) {
	var remotes []netip.Addr
	var static []StaticEntry
	var rs []Route
	for i := range n / 2 {
		r := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		remotes = append(remotes, r)
		static = append(static, StaticEntry{MAC: [6]byte{2, 0, 0, 0, byte(i >> 8), byte(i)}, Remote: r})
		rs = append(rs, Route{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24), Via: r},
			Route{Prefix: netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i >> 8), byte(i)}), 64), Via: r})
	}
	pe := newPeers(Config{MaxEntries: 16, AgeingTime: time.Minute}, remotes, static, 0)
	var err error
	if pe.routes, err = pe.resolve("bench", rs); err != nil {
		tb.Fatal(err)
	}
	last := n/2 - 1
	return pe, netip.AddrFrom4([4]byte{10, byte(last >> 8), byte(last), 7})
}

func TestRouteLookup(t *testing.T) {
	pe, dst := routedPeers(t, 2000)
	rt := pe.route(dst)
	if rt == nil || pe.remotes[rt.remote] != netip.MustParseAddr("198.18.3.231") || rt.mac != [6]byte{2, 0, 0, 0, 3, 231} {
		t.Fatalf("route to %v: %+v", dst, rt)
	}
	if v6 := pe.route(netip.MustParseAddr("2001:db8:3e7::9")); v6 == nil || pe.remotes[v6.remote] != netip.MustParseAddr("198.18.3.231") {
		t.Errorf("route to 2001:db8:3e7::9: %+v", v6)
	}
	if pe.route(netip.MustParseAddr("10.200.0.1")) != nil {
		t.Error("a route to an address no prefix holds")
	}
	if n := testing.AllocsPerRun(100, func() { pe.route(dst) }); n != 0 {
		t.Errorf("%v allocations per lookup", n)
	}
	pe0 := newPeers(Config{MaxEntries: 16, AgeingTime: time.Minute}, []netip.Addr{netip.MustParseAddr("198.18.0.2")}, nil, 0)
	if pe0.route(dst) != nil {
		t.Error("a route on a set without routes")
	}
}
