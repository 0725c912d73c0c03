package program

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"softnet.dev/drop"
	"softnet.dev/packet"
)

func mustAllow(t testing.TB, s string) Allow {
	t.Helper()
	var a Allow
	for _, part := range strings.Split(s, "+") {
		p, err := netip.ParsePrefix(part)
		if err != nil {
			addr, aerr := netip.ParseAddr(part)
			if aerr != nil {
				t.Fatal(err)
			}
			p = netip.PrefixFrom(addr, addr.BitLen())
		}
		a.Prefixes = append(a.Prefixes, p.Masked())
	}
	return a
}

func newPortSecurity(t testing.TB, policies map[int]PortPolicy) *PortSecurity {
	t.Helper()
	s, err := NewPortSecurity(policies)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// guestPolicy is port 1's: its own subnets and MAC, no DHCP server.
func guestPolicy(t testing.TB) PortPolicy {
	return PortPolicy{Allow: mustAllow(t, "198.18.1.0/24+2001:db8:1::/64"), MACs: [][6]byte{mac(1)}}
}

func dhcpReply(src, dst string) func([]byte) int { return ipPkt(src, dst, packet.ProtoUDP, 67, 68) }

func TestPortSecurityL3Sources(t *testing.T) {
	e := newPktEnv(t)
	s := newPortSecurity(t, map[int]PortPolicy{1: guestPolicy(t), 3: {Allow: Allow{Any: true}, DHCPServer: true}})
	spoofs := []func([]byte) int{
		udp("198.18.1.5", "198.18.2.1"),
		udp("198.18.2.1", "198.18.2.9"), // a neighbour's address
		udp("2001:db8:1::5", "2001:db8:2::1"),
		udp("2001:db8:2::1", "2001:db8:2::9"),
		ipPkt("0.0.0.0", "255.255.255.255", packet.ProtoUDP, 68, 67), // DHCP client: allowed
		ipPkt("0.0.0.0", "198.18.2.1", packet.ProtoUDP, 1234, 53),
		dhcpReply("198.18.1.5", "198.18.1.9"),
		ipPkt("2001:db8:1::5", "2001:db8:1::9", packet.ProtoUDP, 547, 546),
		nsPacket("::", "2001:db8:1::7"),                     // duplicate address detection of its own address
		nsPacket("::", "2001:db8:2::1"),                     // claims a neighbour's
		ipPkt("::", "ff02::16", packet.ProtoICMPv6, 143, 0), // MLD report before DAD
		ipPkt("::", "2001:db8:2::1", packet.ProtoICMPv6, 128, 0),
		ipPkt("fe80::7", "ff02::2", packet.ProtoICMPv6, 133, 0), // router solicitation on a TUN link
		ipPkt("fe80::7", "2001:db8:2::1", packet.ProtoICMPv6, 128, 0),
	}
	want := []Verdict{
		PassVerdict, DropVerdict(drop.IPRPFilter), PassVerdict, DropVerdict(drop.IPRPFilter),
		PassVerdict, DropVerdict(drop.IPRPFilter), DropVerdict(drop.DHCPServer), DropVerdict(drop.DHCPServer),
		// The MLD report and the solicitation are the guest's to send,
		// but no port is a router to hear them.
		PassVerdict, DropVerdict(drop.NDiscSpoof), DropVerdict(drop.NoRoute), DropVerdict(drop.IPRPFilter),
		DropVerdict(drop.NoRoute), DropVerdict(drop.IPRPFilter),
	}
	b := e.batch(packet.L3, 1, 0, spoofs...)
	s.Run(b)
	wantVerdicts(t, b, want...)

	// Port 2 has no policy, port 3 allows any source and DHCP servers.
	for _, port := range []int{2, 3} {
		b := e.batch(packet.L3, port, 0, udp("198.18.2.1", "198.18.2.9"), dhcpReply("198.18.7.1", "198.18.7.2"))
		s.Run(b)
		wantVerdicts(t, b, PassVerdict, PassVerdict)
	}

	// Policies change under running workers.
	if err := s.SetPolicy(2, PortPolicy{Allow: mustAllow(t, "198.18.2.0/24")}); err != nil {
		t.Fatal(err)
	}
	s.RemovePolicy(1)
	b = e.batch(packet.L3, 2, 0, udp("198.18.2.1", "198.18.2.9"), udp("198.18.1.1", "198.18.2.9"))
	s.Run(b)
	wantVerdicts(t, b, PassVerdict, DropVerdict(drop.IPRPFilter))
	b = e.batch(packet.L3, 1, 0, spoofs...)
	s.Run(b)
	wantVerdicts(t, b, slices.Repeat([]Verdict{PassVerdict}, len(spoofs))...)
	if p, ok := s.Policy(2); !ok || p.Allow.String() != "198.18.2.0/24" {
		t.Errorf("Policy(2) = %v, %v", p, ok)
	}
	if _, ok := s.Policy(1); ok {
		t.Error("removed policy still there")
	}
}

func TestPortSecurityL2(t *testing.T) {
	e := newPktEnv(t)
	s := newPortSecurity(t, map[int]PortPolicy{1: guestPolicy(t)})
	ip := func(src string) func([]byte) int {
		return ether(mac(9), mac(1), packet.EtherTypeIPv4, udp(src, "198.18.1.9"))
	}
	// Inner packets the parser reads but that make no sense: an NA
	// whose options run past the packet, and one with a zero-length
	// option.
	badOpts := bytesOf(naClaim(mac(1), mac(9), "2001:db8:1::5", "2001:db8:1::9", "2001:db8:1::5", mac(1)))
	badOpts[len(badOpts)-7] = 2 // the option claims 16 bytes
	zeroOpt := bytesOf(naClaim(mac(1), mac(9), "2001:db8:1::5", "2001:db8:1::9", "2001:db8:1::5", mac(1)))
	zeroOpt[len(zeroOpt)-7] = 0
	lla := linkLocalEUI64(mac(1)).String()
	b := e.batch(packet.L2, 1, 0,
		ip("198.18.1.5"),
		ether(mac(9), mac(2), packet.EtherTypeIPv4, udp("198.18.1.5", "198.18.1.9")), // another MAC
		ip("198.18.2.1"),
		arpFrame(packet.ARPRequest, mac(1), "198.18.1.5", [6]byte{}, "198.18.1.9"),
		arpFrame(packet.ARPReply, mac(1), "198.18.2.1", mac(9), "198.18.1.9"), // claims a neighbour's address
		ether(mac(9), mac(1), packet.EtherTypeARP, func(b []byte) int { // claims another MAC
			return packet.PutARP(b, packet.ARPReply, mac(2), netip.MustParseAddr("198.18.1.5"), mac(9), netip.MustParseAddr("198.18.1.9"))
		}),
		arpFrame(packet.ARPRequest, mac(1), "0.0.0.0", [6]byte{}, "198.18.1.5"), // ARP probe
		naFrame(mac(1), mac(9), "2001:db8:1::5", "2001:db8:1::9"),
		naClaim(mac(1), mac(9), "2001:db8:1::5", "2001:db8:1::9", "2001:db8:2::1", mac(1)), // a neighbour's address
		naClaim(mac(1), mac(9), "2001:db8:1::5", "2001:db8:1::9", "2001:db8:1::5", mac(2)), // another MAC
		nsFrame(mac(1), lla, "2001:db8:1::9"),                                              // from its EUI-64 link-local address
		nsFrame(mac(1), "fe80::1", "2001:db8:1::9"),
		raw(badOpts),
		raw(zeroOpt),
	)
	s.Run(b)
	wantVerdicts(t, b,
		PassVerdict, DropVerdict(drop.MACSpoof), DropVerdict(drop.IPRPFilter),
		PassVerdict, DropVerdict(drop.ARPSpoof), DropVerdict(drop.ARPSpoof), PassVerdict,
		PassVerdict, DropVerdict(drop.NDiscSpoof), DropVerdict(drop.NDiscSpoof),
		PassVerdict, DropVerdict(drop.IPRPFilter),
		DropVerdict(drop.HdrTrunc), DropVerdict(drop.InvalidProto))

	// A port with a MAC lock and no address list checks MACs only.
	if err := s.SetPolicy(1, PortPolicy{Allow: Allow{Any: true}, MACs: [][6]byte{mac(1), mac(3)}}); err != nil {
		t.Fatal(err)
	}
	b = e.batch(packet.L2, 1, 0, ip("198.18.2.1"), ether(mac(9), mac(3), packet.EtherTypeIPv4, udp("198.18.7.7", "198.18.1.9")),
		ether(mac(9), mac(4), packet.EtherTypeIPv4, udp("198.18.1.5", "198.18.1.9")))
	s.Run(b)
	wantVerdicts(t, b, PassVerdict, PassVerdict, DropVerdict(drop.MACSpoof))
}

func TestPortSecurityRejectsBadPolicies(t *testing.T) {
	for _, tc := range []struct {
		port int
		p    PortPolicy
		err  string
	}{
		{-1, PortPolicy{}, "port -1"},
		{maxPort + 1, PortPolicy{}, "port 65536"},
		{1, PortPolicy{Allow: Allow{Prefixes: []netip.Prefix{{}}}}, "invalid prefix"},
		{1, PortPolicy{MACs: [][6]byte{packet.Broadcast}}, "not a unicast"},
		{1, PortPolicy{MACs: make([][6]byte, MaxPortMACs+1)}, "at most"},
	} {
		if _, err := NewPortSecurity(map[int]PortPolicy{tc.port: tc.p}); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("port %d %+v: error %v, want one mentioning %q", tc.port, tc.p, err, tc.err)
		}
	}
	s := newPortSecurity(t, nil)
	if err := s.SetPolicy(1, PortPolicy{MACs: [][6]byte{{}}}); err == nil {
		t.Error("SetPolicy took an all-zero MAC")
	}
}

// The forwarder learns a source only where the policy allows it, and a
// host a port's policy names does not move to a port that allows any.
func TestL3LearningFollowsPolicy(t *testing.T) {
	e := newPktEnv(t)
	s := newPortSecurity(t, map[int]PortPolicy{
		1: {Allow: mustAllow(t, "198.18.1.0/24")},
		2: {Allow: mustAllow(t, "198.18.2.0/24")},
		3: {Allow: Allow{Any: true}}, // a router guest
	})
	f := newForwarder(t, L3Config{Policy: s, Unknown: DropUnknown, MoveHold: 1})
	now := int64(1e9)
	for _, p := range []struct {
		port int
		src  string
	}{{1, "198.18.1.1"}, {2, "198.18.2.1"}, {3, "198.18.9.1"}, {2, "198.18.1.1"}, {3, "198.18.1.1"}} {
		b := e.batch(packet.L3, p.port, now, udp(p.src, "198.18.0.1"))
		s.Run(b)
		f.Run(b)
		now += 1e9
	}
	wantLearned(t, f, map[string]int{"198.18.1.1": 1, "198.18.2.1": 2, "198.18.9.1": 3})
	st := f.LearnStats()
	if st.MovesRefused != 1 || st.Moved != 0 {
		t.Errorf("stats %+v, want the move to the allow=any port refused", st)
	}
	// Without the program in front, the forwarder still does not learn
	// what the policy forbids.
	f.Run(e.batch(packet.L3, 1, now, udp("198.18.2.7", "198.18.0.1")))
	if st := f.LearnStats(); st.NotAllowed != 1 {
		t.Errorf("stats %+v, want 1 not allowed", st)
	}
}

// A port whose allowed prefixes the routes cover has nothing to learn,
// and the forwarder skips learning for it until a route goes away.
func TestL3SkipsLearningCoveredPorts(t *testing.T) {
	e := newPktEnv(t)
	s := newPortSecurity(t, map[int]PortPolicy{1: {Allow: mustAllow(t, "198.18.1.0/25+198.18.1.128/25+2001:db8:1::/64+fe80::1")}})
	f := newForwarder(t, L3Config{Policy: s, Unknown: DropUnknown, MoveHold: 1, Routes: []Route{
		{netip.MustParsePrefix("198.18.0.0/16"), 1}, {netip.MustParsePrefix("2001:db8:1::/48"), 1}}})
	b := e.batch(packet.L3, 1, 0, udp("198.18.1.1", "198.18.0.1"), udp("2001:db8:1::1", "2001:db8:1::2"))
	if !f.mayLearnOn(2, f.routes.Load()) || f.mayLearnOn(1, f.routes.Load()) {
		t.Fatal("port 1 is covered by routes, port 2 has no policy")
	}
	f.Run(b)
	wantVerdicts(t, b, DropVerdict(drop.NoRoute), DropVerdict(drop.NoRoute))
	if err := f.RemoveRoute(netip.MustParsePrefix("2001:db8:1::/48")); err != nil {
		t.Fatal(err)
	}
	if !f.mayLearnOn(1, f.routes.Load()) {
		t.Fatal("2001:db8:1::/64 is no longer routed, yet port 1 is not learnable")
	}
	f.Run(e.batch(packet.L3, 1, 1, udp("2001:db8:1::1", "2001:db8:1::2")))
	wantLearned(t, f, map[string]int{"2001:db8:1::1": 1})
}

func TestRouteTableCovers(t *testing.T) {
	rt := newRouteTable(map[netip.Prefix]int{
		netip.MustParsePrefix("198.18.0.0/16"): 1, netip.MustParsePrefix("198.18.1.0/25"): 2,
		netip.MustParsePrefix("2001:db8::/48"): 3, netip.MustParsePrefix("::ffff:198.19.0.0/112"): 4})
	for p, want := range map[string]bool{
		"198.18.0.0/15": false, "198.18.0.0/16": true, "198.18.7.0/24": true, "198.19.0.0/24": false,
		"2001:db8::/32": false, "2001:db8::/64": true, "2001:db8:1::/64": false,
		"::ffff:198.19.1.0/120": true, "0.0.0.0/0": false,
	} {
		if got := rt.covers(netip.MustParsePrefix(p)); got != want {
			t.Errorf("covers(%s) = %v, want %v", p, got, want)
		}
	}
}

// What guests send to the groups only routers join goes nowhere while no
// port is a router, and is flooded as before once one is; other
// link-local groups are never held back.
func TestPortSecurityRouterOnlyGroups(t *testing.T) {
	e := newPktEnv(t)
	s := newPortSecurity(t, map[int]PortPolicy{1: guestPolicy(t)})
	pkts := []func([]byte) int{
		ipPkt("fe80::7", "ff02::2", packet.ProtoICMPv6, 133, 0),              // router solicitation
		ipPkt("2001:db8:1::7", "ff02::16", packet.ProtoICMPv6, 143, 0),       // MLDv2 report
		ipPkt("198.18.1.7", "224.0.0.22", packet.ProtoUDP, 1, 1),             // to the IGMPv3 routers
		ipPkt("198.18.1.7", "224.0.0.2", packet.ProtoUDP, 1, 1),              // to all routers
		ipPkt("2001:db8:1::7", "ff02::1", packet.ProtoICMPv6, 128, 0),        // all nodes: flooded
		ipPkt("2001:db8:1::7", "ff02::1:ff00:7", packet.ProtoICMPv6, 131, 0), // MLDv1 report to its group
		ipPkt("198.18.1.7", "224.0.0.251", packet.ProtoUDP, 5353, 5353),      // mDNS
	}
	held := DropVerdict(drop.NoRoute)
	run := func(want ...Verdict) {
		t.Helper()
		b := e.batch(packet.L3, 1, 0, pkts...)
		s.Run(b)
		wantVerdicts(t, b, want...)
	}
	run(held, held, held, held, PassVerdict, PassVerdict, PassVerdict)
	if err := s.SetPolicy(2, PortPolicy{Allow: Allow{Any: true}, Router: true}); err != nil {
		t.Fatal(err)
	}
	run(PassVerdict, PassVerdict, PassVerdict, PassVerdict, PassVerdict, PassVerdict, PassVerdict)
	s.RemovePolicy(2)
	run(held, held, held, held, PassVerdict, PassVerdict, PassVerdict)
}
