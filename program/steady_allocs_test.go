package program

import (
	"fmt"
	"net/netip"
	"testing"

	"softnet.dev/drop"

	"softnet.dev/packet"
)

// Once the tables have learned what a batch needs, running a program over
// the batch must not allocate: that is every packet's path.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	e := newPktEnv(t)
	fwd := newForwarder(t, L3Config{DecrementTTL: true, Routes: []Route{{netip.MustParsePrefix("192.0.2.0/24"), 3}}})
	fwd.Run(e.batch(packet.L3, 2, 0, udp("10.0.0.2", "192.0.2.1"), udp("fd00::2", "192.0.2.1")))
	br := NewBridge(BridgeConfig{})
	br.Run(e.batch(packet.L2, 2, 0, frame(packet.Broadcast, mac(2))))
	filter := newFilter(t, true, "deny proto=tcp dport=22", "allow proto=udp dport=53", "deny src=10.9.0.0/16")

	l3 := e.batch(packet.L3, 1, 0,
		udp("10.0.0.1", "10.0.0.2"), udp("fd00::1", "fd00::2"), udp("10.0.0.1", "192.0.2.9"),
		udp("10.0.0.1", "224.0.0.1"), udp("10.0.0.1", "10.0.0.1"))
	l2 := e.batch(packet.L2, 1, 5e9,
		frame(mac(2), mac(1)), frame(mac(9), mac(1)), frame(packet.Broadcast, mac(1)),
		nsFrame(mac(1), "fd00::1", "fd00::2"), frame(mac(1), mac(1)))
	var fills []func([]byte) int
	for i := range 8 {
		fills = append(fills, ipPkt(fmt.Sprintf("10.%d.0.1", 7+i%3), "10.0.0.1", packet.ProtoTCP, 1000, uint16(20+i)))
	}
	fl := e.batch(packet.L3, 1, 0, fills...)
	sec, err := NewPortSecurity(map[int]PortPolicy{1: {Allow: Allow{Prefixes: []netip.Prefix{
		netip.MustParsePrefix("198.18.1.0/24"), netip.MustParsePrefix("2001:db8:1::/64")}}, MACs: [][6]byte{mac(1)}}})
	if err != nil {
		t.Fatal(err)
	}
	lla := linkLocalEUI64(mac(1)).String()
	secL2 := e.batch(packet.L2, 1, 0,
		ether(mac(2), mac(1), packet.EtherTypeIPv4, udp("198.18.1.1", "198.18.2.1")),
		ether(mac(2), mac(3), packet.EtherTypeIPv4, udp("198.18.1.1", "198.18.2.1")),
		ether(mac(2), mac(1), packet.EtherTypeIPv4, udp("198.18.9.1", "198.18.2.1")),
		arpFrame(packet.ARPReply, mac(1), "198.18.2.1", mac(2), "198.18.2.1"),
		naClaim(mac(1), mac(2), "2001:db8:1::1", "2001:db8:1::2", "2001:db8:2::1", mac(1)),
		nsFrame(mac(1), "2001:db8:1::1", "2001:db8:2::1"),
		ether(mac(2), mac(1), packet.EtherTypeIPv4, dhcpReply("198.18.1.1", "198.18.2.1")),
		// The RA guard: in plain sight, behind AH, and a first fragment
		// whose chain is cut short.
		ether(mac(2), mac(1), packet.EtherTypeIPv6, ipPkt(lla, "ff02::1", packet.ProtoICMPv6, icmp6RouterAdvert, 0)),
		ether(mac(2), mac(1), packet.EtherTypeIPv6, ipv6Chain(lla, "ff02::1", authHeader(), icmp6(icmp6RouterAdvert))),
		ether(mac(2), mac(1), packet.EtherTypeIPv6, ipv6Chain(lla, "ff02::1", fragmentHeader(0, true), truncated(options(ipv6DestOptions, 2), 8))))

	for _, tc := range []struct {
		p Program
		b *Batch
	}{{fwd, l3}, {br, l2}, {filter, fl}, {sec, secL2}} {
		tc.p.Run(tc.b) // learn
		// Fewer runs than the TTL of 64 allows, so that the forwarder
		// keeps forwarding.
		n := testing.AllocsPerRun(50, func() {
			tc.b.Reset(tc.b.Len())
			tc.b.Now += 2e9 // bridge entries get refreshed
			tc.p.Run(tc.b)
		})
		if n != 0 {
			t.Errorf("%s: %v allocs per batch", tc.p.Name(), n)
		}
	}
	wantVerdicts(t, l3, RedirectVerdict(2), RedirectVerdict(2), RedirectVerdict(3), FloodVerdict, DropVerdict(drop.NoRoute))
	wantVerdicts(t, l2, RedirectVerdict(2), FloodVerdict, FloodVerdict, FloodVerdict, DropVerdict(drop.NoRoute))
	wantVerdicts(t, secL2, PassVerdict, DropVerdict(drop.MACSpoof), DropVerdict(drop.IPRPFilter),
		DropVerdict(drop.ARPSpoof), DropVerdict(drop.NDiscSpoof), PassVerdict, DropVerdict(drop.DHCPServer),
		DropVerdict(drop.RAGuard), DropVerdict(drop.RAGuard), DropVerdict(drop.RAGuard))
	for i, v := range fl.Verdicts[:fl.Len()] {
		// Packet 2 goes to port 22; packets 2 and 5 come from 10.9.0.1.
		if want := i != 2 && i != 5; (v == PassVerdict) != want {
			t.Errorf("filter packet %d: %v", i, v)
		}
	}
}
