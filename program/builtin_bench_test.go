package program

import (
	"fmt"
	"net/netip"
	"testing"

	"softnet.dev/packet"
)

const benchBatch = 64

// benchProgram runs p over batch b.N times after one warm-up run (which
// learns) and reports the cost per packet.
func benchProgram(b *testing.B, p Program, batch *Batch) {
	p.Run(batch)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		batch.Reset(benchBatch)
		p.Run(batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchBatch), "ns/packet")
}

// 64 packets from one port to 64 hosts learned on four others, with a
// few static routes that do not cover them (routes win over learned
// hosts, so each packet first misses the routes).
func BenchmarkL3Forwarder(b *testing.B) {
	e := newPktEnv(b)
	f := newForwarder(b, L3Config{Routes: []Route{
		{netip.MustParsePrefix("192.0.2.0/24"), 0},
		{netip.MustParsePrefix("10.2.0.0/16"), 0},
		{netip.MustParsePrefix("10.3.0.0/16"), 0},
	}})
	var fills []func([]byte) int
	for i := range benchBatch {
		host := fmt.Sprintf("10.1.%d.%d", i%4, i+1)
		f.Run(e.batch(packet.L3, 1+i%4, 0, udp(host, "10.0.0.1")))
		fills = append(fills, udp("10.0.0.1", host))
	}
	benchProgram(b, f, e.batch(packet.L3, 5, 0, fills...))
}

// 64 frames from one port to 64 stations learned on four others.
func BenchmarkBridge(b *testing.B) {
	e := newPktEnv(b)
	br := NewBridge(BridgeConfig{})
	var fills []func([]byte) int
	for i := range benchBatch {
		station := mac(byte(i + 1))
		br.Run(e.batch(packet.L2, 1+i%4, 0, frame(packet.Broadcast, station)))
		fills = append(fills, frame(station, mac(200)))
	}
	benchProgram(b, br, e.batch(packet.L2, 5, 0, fills...))
}

// 64 packets through 5 rules; most fall through to the last rules or the
// default.
func BenchmarkFilter(b *testing.B) {
	e := newPktEnv(b)
	f := newFilter(b, true,
		"deny proto=tcp dport=22",
		"deny src=198.18.0.0/15",
		"allow proto=udp dst=10.0.0.0/24 dport=53",
		"deny dst=2001:db8::/32",
		"deny proto=udp sport=0-1023",
	)
	var fills []func([]byte) int
	for i := range benchBatch {
		switch i % 4 {
		case 0:
			fills = append(fills, ipPkt("10.1.0.1", "10.0.0.1", packet.ProtoTCP, 40000, 443))
		case 1:
			fills = append(fills, ipPkt("10.1.0.1", "10.0.1.1", packet.ProtoUDP, 5353, 5353))
		case 2:
			fills = append(fills, ipPkt("fd00::1", "fd00::2", packet.ProtoUDP, 1000, 53))
		case 3:
			fills = append(fills, ipPkt("10.1.0.1", "10.0.0.1", packet.ProtoUDP, 40000, 53))
		}
	}
	benchProgram(b, f, e.batch(packet.L3, 1, 0, fills...))
}

// The parse that every program above includes (Batch.Headers on a fresh
// batch), for reading their figures.
func BenchmarkParseOnly(b *testing.B) {
	e := newPktEnv(b)
	var fills []func([]byte) int
	for i := range benchBatch {
		fills = append(fills, udp("10.0.0.1", fmt.Sprintf("10.1.0.%d", i+1)))
	}
	parse := Func{ProgramName: "parse", F: func(b *Batch) {
		for i := range b.Len() {
			b.Headers(i)
		}
	}}
	benchProgram(b, parse, e.batch(packet.L3, 1, 0, fills...))
}

// 64 packets routed by longest prefix among 1000 IPv4 routes of four
// lengths, without learning: up to four probes per packet.
func BenchmarkL3ForwarderRoutes(b *testing.B) {
	e := newPktEnv(b)
	var routes []Route
	seen := map[netip.Prefix]bool{}
	for i := 0; len(routes) < 1000; i++ {
		bits := []int{8, 16, 24, 32}[i%4]
		a := netip.AddrFrom4([4]byte{byte(i % 13), byte(i % 7), byte(i % 251), byte(i)})
		if p, _ := a.Prefix(bits); !seen[p] {
			seen[p] = true
			routes = append(routes, Route{p, 1 + i%4})
		}
	}
	f := newForwarder(b, L3Config{NoLearn: true, Routes: routes})
	var fills []func([]byte) int
	for i := range benchBatch {
		fills = append(fills, udp("192.0.2.1", fmt.Sprintf("10.%d.%d.%d", i%7, i*3%256, i)))
	}
	benchProgram(b, f, e.batch(packet.L3, 5, 0, fills...))
}

// A cluster network's node (issue 34): the node's own pod CIDRs to its
// pods' port, every other node's via the overlay port (what softnet
// agent programs: an IPv4 /25 out of 198.18.0.0/15 and an IPv6 /64 per
// node), and the default routes to the node's own port. 64 packets from
// a pod to pods on 64 other nodes (2 with 3 nodes), IPv4 or IPv6: the
// per-packet cost with 3 nodes' routes and with 1,000's, whose lookups
// probe the same prefix lengths, so it should not change.
func BenchmarkL3ForwarderClusterRoutes(b *testing.B) {
	const pods, overlay, node = 1, 2, 3
	cidrs := func(i int) (netip.Prefix, netip.Prefix) {
		v4 := 198<<24 | 18<<16 + uint32(i)*128
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v4 >> 24), byte(v4 >> 16), byte(v4 >> 8), byte(v4)}), 25),
			netip.MustParsePrefix(fmt.Sprintf("2001:db8:0:%x::/64", i))
	}
	for _, nodes := range []int{3, 1000} {
		routes := []Route{{netip.MustParsePrefix("0.0.0.0/0"), node}, {netip.MustParsePrefix("::/0"), node}}
		for i := range nodes {
			port := overlay
			if i == 0 {
				port = pods
			}
			v4, v6 := cidrs(i)
			routes = append(routes, Route{v4, port}, Route{v6, port})
		}
		for _, family := range []string{"ipv4", "ipv6"} {
			b.Run(fmt.Sprintf("nodes=%d/%s", nodes, family), func(b *testing.B) {
				e := newPktEnv(b)
				f := newForwarder(b, L3Config{NoLearn: true, Routes: routes})
				src4, src6 := cidrs(0)
				var fills []func([]byte) int
				for i := range benchBatch {
					v4, v6 := cidrs(1 + i%(nodes-1))
					src, dst := src4.Addr().Next(), v4.Addr().Next().Next()
					if family == "ipv6" {
						src, dst = src6.Addr().Next(), v6.Addr().Next().Next()
					}
					fills = append(fills, udp(src.String(), dst.String()))
				}
				batch := e.batch(packet.L3, pods, 0, fills...)
				f.Run(batch)
				for i := range benchBatch {
					if v := batch.Verdicts[i]; v != RedirectVerdict(overlay) {
						b.Fatalf("packet %d: verdict %v, want the overlay port", i, v)
					}
				}
				benchProgram(b, f, batch)
			})
		}
	}
}

// The switch's case: every port's subnet is routed to it and each port
// may send only from its own (port security in front of the forwarder,
// which learns nothing): 64 packets from one port to hosts behind four
// others.
func BenchmarkSwitchChain(b *testing.B) {
	e := newPktEnv(b)
	var routes []Route
	policies := map[int]PortPolicy{}
	for p := range 6 {
		pfx := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(p), 0}), 24)
		routes = append(routes, Route{pfx, p})
		policies[p] = PortPolicy{Allow: Allow{Prefixes: []netip.Prefix{pfx}}}
	}
	sec, err := NewPortSecurity(policies)
	if err != nil {
		b.Fatal(err)
	}
	f := newForwarder(b, L3Config{Routes: routes, Policy: sec, Unknown: DropUnknown, DecrementTTL: true})
	var fills []func([]byte) int
	for i := range benchBatch {
		fills = append(fills, udp(fmt.Sprintf("198.18.5.%d", i%8+1), fmt.Sprintf("198.18.%d.%d", 1+i%4, i+1)))
	}
	chain := Func{ProgramName: "chain", F: func(batch *Batch) { sec.Run(batch); f.Run(batch) }}
	benchProgram(b, chain, e.batch(packet.L3, 5, 0, fills...))
}

// Port security alone on a TAP port locked to a MAC and a subnet.
func BenchmarkPortSecurityL2(b *testing.B) {
	e := newPktEnv(b)
	sec, err := NewPortSecurity(map[int]PortPolicy{5: {
		Allow: Allow{Prefixes: []netip.Prefix{netip.MustParsePrefix("198.18.5.0/24")}}, MACs: [][6]byte{mac(5)}}})
	if err != nil {
		b.Fatal(err)
	}
	var fills []func([]byte) int
	for i := range benchBatch {
		fills = append(fills, ether(mac(byte(i+1)), mac(5), packet.EtherTypeIPv4, udp("198.18.5.1", fmt.Sprintf("198.18.5.%d", i+2))))
	}
	benchProgram(b, sec, e.batch(packet.L2, 5, 0, fills...))
}
