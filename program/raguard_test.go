package program

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"softnet.dev/drop"
	"softnet.dev/packet"
)

// ipv6Header is one header of an IPv6 packet's chain: its next-header
// value (the protocol number that announces it) and its bytes. The first
// byte of an extension header, its own next header, is filled in by
// ipv6Chain.
type ipv6Header struct {
	proto uint8
	b     []byte
}

// ipv6Chain writes an IPv6 packet from src to dst, hop limit 255, whose
// payload is hdrs in order.
func ipv6Chain(src, dst string, hdrs ...ipv6Header) func([]byte) int {
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	return func(b []byte) int {
		var payload []byte
		for i, h := range hdrs {
			hb := append([]byte(nil), h.b...)
			if i+1 < len(hdrs) {
				hb[0] = hdrs[i+1].proto
			}
			payload = append(payload, hb...)
		}
		n := packet.PutIPv6(b, s, d, hdrs[0].proto, 255, len(payload))
		return n + copy(b[n:], payload)
	}
}

// options is a hop-by-hop or destination options header (proto 0 or 60)
// of units 8-byte units, padded with a PadN option.
func options(proto uint8, units int) ipv6Header {
	b := make([]byte, units*8)
	b[1] = byte(units - 1)
	b[2], b[3] = 1, byte(len(b)-4) // PadN
	return ipv6Header{proto, b}
}

// fragmentHeader is a fragment header at offset (in 8-byte units).
func fragmentHeader(offset int, more bool) ipv6Header {
	b := make([]byte, 8)
	v := uint16(offset) << 3
	if more {
		v |= 1
	}
	binary.BigEndian.PutUint16(b[2:], v)
	binary.BigEndian.PutUint32(b[4:], 0x5eed)
	return ipv6Header{ipv6Fragment, b}
}

// authHeader is an AH with a 12-byte ICV: 24 bytes, payload length 4
// (in 4-byte units, minus 2).
func authHeader() ipv6Header {
	b := make([]byte, 24)
	b[1] = 24/4 - 2
	binary.BigEndian.PutUint32(b[4:], 0x100) // SPI
	return ipv6Header{ipv6AuthHeader, b}
}

// icmp6 is an ICMPv6 message of type typ with a 16-byte body.
func icmp6(typ uint8) ipv6Header {
	b := make([]byte, 24)
	b[0] = typ
	return ipv6Header{packet.ProtoICMPv6, b}
}

func udp6(sport, dport uint16) ipv6Header {
	b := make([]byte, 16)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], 16)
	return ipv6Header{packet.ProtoUDP, b}
}

// truncated is h cut to n bytes.
func truncated(h ipv6Header, n int) ipv6Header { return ipv6Header{h.proto, h.b[:n]} }

// DHCPv6 message types (RFC 8415) in the first byte after the UDP header.
func dhcp6(sport, dport uint16, msgType byte) ipv6Header {
	h := udp6(sport, dport)
	h.b[8] = msgType
	return h
}

const (
	dhcp6Solicit     = 1
	dhcp6Advertise   = 2
	dhcp6Reply       = 7
	dhcp6Reconfigure = 10
	dhcp6RelayRepl   = 13
)

// A guest port that is not a router: router advertisements and redirects
// are dropped as IPV6_RA_GUARD wherever in the header chain they hide,
// DHCPv6 server messages as DHCP_SERVER, and first fragments whose chain
// is cut short as IPV6_RA_GUARD; the rest of its IPv6 passes.
func TestPortSecurityRAGuard(t *testing.T) {
	e := newPktEnv(t)
	router := PortPolicy{Allow: Allow{Any: true}, Router: true}
	s := newPortSecurity(t, map[int]PortPolicy{1: guestPolicy(t), 3: router,
		4: {Allow: Allow{Any: true}, Router: true, DHCPServer: true}})
	const ll, all = "fe80::7", "ff02::1"
	guard, dhcp, trunc := DropVerdict(drop.RAGuard), DropVerdict(drop.DHCPServer), DropVerdict(drop.HdrTrunc)
	cases := []struct {
		name string
		pkt  func([]byte) int
		// on the guest's port, a router's port (dhcp-server=off), and
		// a router's that may run a DHCP server
		guest, router, both Verdict
	}{
		{"router advertisement", ipPkt(ll, all, packet.ProtoICMPv6, icmp6RouterAdvert, 0), guard, PassVerdict, PassVerdict},
		{"redirect", ipPkt(ll, all, packet.ProtoICMPv6, icmp6Redirect, 0), guard, PassVerdict, PassVerdict},
		{"unicast redirect", ipPkt(ll, "2001:db8:2::1", packet.ProtoICMPv6, icmp6Redirect, 0), guard, PassVerdict, PassVerdict},
		{"RA from a global address", ipPkt("2001:db8:1::5", all, packet.ProtoICMPv6, icmp6RouterAdvert, 0), guard, PassVerdict, PassVerdict},
		{"router solicitation", ipPkt(ll, "ff02::2", packet.ProtoICMPv6, 133, 0), PassVerdict, PassVerdict, PassVerdict},
		{"echo request", ipPkt("2001:db8:1::5", "2001:db8:2::1", packet.ProtoICMPv6, 128, 0), PassVerdict, PassVerdict, PassVerdict},
		{"DHCPv6 solicit", ipv6Chain(ll, "ff02::1:2", dhcp6(546, 547, dhcp6Solicit)), PassVerdict, PassVerdict, PassVerdict},
		{"DHCPv6 advertise", ipv6Chain(ll, "fe80::9", dhcp6(547, 546, dhcp6Advertise)), dhcp, dhcp, PassVerdict},
		{"DHCPv6 reply", ipv6Chain("2001:db8:1::5", "2001:db8:1::9", dhcp6(547, 546, dhcp6Reply)), dhcp, dhcp, PassVerdict},
		{"DHCPv6 reconfigure", ipv6Chain("2001:db8:1::5", "2001:db8:1::9", dhcp6(547, 546, dhcp6Reconfigure)), dhcp, dhcp, PassVerdict},
		{"DHCPv6 relay reply", ipv6Chain("2001:db8:1::5", "2001:db8:1::9", dhcp6(547, 547, dhcp6RelayRepl)), dhcp, dhcp, PassVerdict},

		// Behind extension headers Parse steps over.
		{"RA behind hop-by-hop options", ipv6Chain(ll, all, options(ipv6HopByHop, 1), icmp6(icmp6RouterAdvert)), guard, PassVerdict, PassVerdict},
		{"RA behind two destination options", ipv6Chain(ll, all, options(ipv6DestOptions, 1), options(ipv6DestOptions, 3), icmp6(icmp6RouterAdvert)), guard, PassVerdict, PassVerdict},
		{"redirect behind hop-by-hop and destination options", ipv6Chain(ll, all, options(ipv6HopByHop, 2), options(ipv6DestOptions, 1), icmp6(icmp6Redirect)), guard, PassVerdict, PassVerdict},
		{"DHCPv6 reply behind destination options", ipv6Chain(ll, "fe80::9", options(ipv6DestOptions, 1), dhcp6(547, 546, dhcp6Reply)), dhcp, dhcp, PassVerdict},
		{"echo behind destination options", ipv6Chain("2001:db8:1::5", "2001:db8:2::1", options(ipv6DestOptions, 1), icmp6(128)), PassVerdict, PassVerdict, PassVerdict},

		// Fragments (RFC 7113): the first fragment holds the chain.
		{"RA in a first fragment", ipv6Chain(ll, all, fragmentHeader(0, true), icmp6(icmp6RouterAdvert)), guard, PassVerdict, PassVerdict},
		{"RA in an atomic fragment", ipv6Chain(ll, all, fragmentHeader(0, false), options(ipv6DestOptions, 1), icmp6(icmp6RouterAdvert)), guard, PassVerdict, PassVerdict},
		{"first fragment ending in destination options", ipv6Chain(ll, all, fragmentHeader(0, true), truncated(options(ipv6DestOptions, 4), 16)), guard, trunc, trunc},
		{"first fragment ending inside ICMPv6", ipv6Chain(ll, all, fragmentHeader(0, true), options(ipv6DestOptions, 1), truncated(icmp6(128), 4)), guard, trunc, trunc},
		{"first fragment ending inside UDP", ipv6Chain(ll, all, fragmentHeader(0, true), truncated(udp6(1000, 2000), 6)), guard, trunc, trunc},
		{"unfragmented chain cut short", ipv6Chain(ll, all, truncated(options(ipv6DestOptions, 4), 16)), trunc, trunc, trunc},
		{"later fragment", ipv6Chain(ll, all, fragmentHeader(8, false), icmp6(icmp6RouterAdvert)), PassVerdict, PassVerdict, PassVerdict},
		{"later fragment after AH", ipv6Chain(ll, all, fragmentHeader(8, false), authHeader(), icmp6(icmp6RouterAdvert)), PassVerdict, PassVerdict, PassVerdict},

		// Behind extension headers Parse does not step over.
		{"RA behind AH", ipv6Chain(ll, all, authHeader(), icmp6(icmp6RouterAdvert)), guard, PassVerdict, PassVerdict},
		{"RA behind options, a first fragment header and AH", ipv6Chain(ll, all, options(ipv6HopByHop, 1), fragmentHeader(0, true), authHeader(), options(ipv6DestOptions, 1), icmp6(icmp6RouterAdvert)), guard, PassVerdict, PassVerdict},
		{"redirect behind a mobility header", ipv6Chain(ll, all, options(ipv6Mobility, 2), icmp6(icmp6Redirect)), guard, PassVerdict, PassVerdict},
		{"RA behind an experimental header", ipv6Chain(ll, all, options(ipv6Experiment2, 1), icmp6(icmp6RouterAdvert)), guard, PassVerdict, PassVerdict},
		{"DHCPv6 reply behind AH", ipv6Chain(ll, "fe80::9", authHeader(), dhcp6(547, 546, dhcp6Reply)), dhcp, dhcp, PassVerdict},
		{"echo behind AH", ipv6Chain("2001:db8:1::5", "2001:db8:2::1", authHeader(), icmp6(128)), PassVerdict, PassVerdict, PassVerdict},
		{"first fragment ending in AH", ipv6Chain(ll, all, fragmentHeader(0, true), truncated(authHeader(), 16)), guard, trunc, PassVerdict},
		{"first fragment ending inside ICMPv6 after AH", ipv6Chain(ll, all, fragmentHeader(0, true), authHeader(), truncated(icmp6(icmp6RouterAdvert), 2)), guard, trunc, PassVerdict},
		{"AH cut short", ipv6Chain(ll, all, truncated(authHeader(), 16)), trunc, trunc, PassVerdict},
		{"ESP", ipv6Chain("2001:db8:1::5", "2001:db8:2::1", ipv6Header{50, make([]byte, 32)}), PassVerdict, PassVerdict, PassVerdict},
	}
	for _, port := range []int{1, 3, 4} {
		var fills []func([]byte) int
		for _, c := range cases {
			fills = append(fills, c.pkt)
		}
		b := e.batch(packet.L3, port, 0, fills...)
		s.Run(b)
		for i, c := range cases {
			want := map[int]Verdict{1: c.guest, 3: c.router, 4: c.both}[port]
			if got := b.Verdicts[i]; got != want {
				t.Errorf("port %d: %s: verdict %v, want %v", port, c.name, got, want)
			}
		}
	}

	// On a TAP port, from the guest's own MAC and EUI-64 link-local
	// address.
	lla := linkLocalEUI64(mac(1)).String()
	allNodes := packet.MulticastMAC(netip.MustParseAddr(all))
	b := e.batch(packet.L2, 1, 0,
		ether(allNodes, mac(1), packet.EtherTypeIPv6, ipPkt(lla, all, packet.ProtoICMPv6, icmp6RouterAdvert, 0)),
		ether(allNodes, mac(1), packet.EtherTypeIPv6, ipv6Chain(lla, all, options(ipv6HopByHop, 1), icmp6(icmp6Redirect))),
		ether(allNodes, mac(1), packet.EtherTypeIPv6, ipv6Chain(lla, all, fragmentHeader(0, true), truncated(options(ipv6DestOptions, 2), 8))),
		ether(mac(9), mac(1), packet.EtherTypeIPv6, ipv6Chain(lla, "fe80::9", dhcp6(547, 546, dhcp6Advertise))),
		ether(allNodes, mac(1), packet.EtherTypeIPv6, ipPkt(lla, "ff02::2", packet.ProtoICMPv6, 133, 0)))
	s.Run(b)
	wantVerdicts(t, b, guard, guard, guard, dhcp, PassVerdict)

	// router=on takes effect on a running switch.
	p := guestPolicy(t)
	p.Router = true
	if err := s.SetPolicy(1, p); err != nil {
		t.Fatal(err)
	}
	b = e.batch(packet.L3, 1, 0, ipPkt(ll, all, packet.ProtoICMPv6, icmp6RouterAdvert, 0), ipv6Chain(ll, "fe80::9", dhcp6(547, 546, dhcp6Reply)))
	s.Run(b)
	wantVerdicts(t, b, PassVerdict, dhcp)
	if got, _ := s.Policy(1); !got.Router {
		t.Errorf("Policy(1) = %+v, want a router", got)
	}
}

// Whatever a guest sends, port security returns a verdict: no panic, and
// no IPv6 router advertisement it could recognise passes a guest port.
func FuzzPortSecurity(f *testing.F) {
	for _, fill := range []func([]byte) int{
		ipv6Chain("fe80::7", "ff02::1", options(ipv6HopByHop, 1), fragmentHeader(0, true), authHeader(), icmp6(icmp6RouterAdvert)),
		ipv6Chain("fe80::7", "ff02::1", fragmentHeader(0, true), truncated(authHeader(), 16)),
		ipv6Chain("fe80::7", "fe80::9", options(ipv6Mobility, 1), dhcp6(547, 546, dhcp6Reply)),
		udp("198.18.1.5", "198.18.1.9"),
	} {
		f.Add(bytesOf(fill), false)
		f.Add(bytesOf(ether(mac(9), mac(1), packet.EtherTypeIPv6, fill)), true)
	}
	e := newPktEnv(f)
	s := newPortSecurity(f, map[int]PortPolicy{1: {Allow: Allow{Any: true}}})
	b := e.batch(packet.L3, 1, 0, raw(nil)) // one buffer, refilled
	buf := b.Bufs[0]
	f.Fuzz(func(t *testing.T, data []byte, frame bool) {
		buf.Truncate(0)
		room, ok := buf.Append(len(data))
		if !ok {
			return
		}
		copy(room, data)
		b.Layer = packet.L3
		if frame {
			b.Layer = packet.L2
		}
		layer := b.Layer
		b.Reset(1)
		s.Run(b)
		var h packet.Headers
		if ok, _ := packet.Parse(data, layer, &h); !ok || h.Proto != packet.EtherTypeIPv6 {
			return
		}
		proto, l4, fragment, ok := ipv6UpperLayer(data[h.L3Off : h.L3Off+h.L3Len])
		if ok && fragment <= 0 && proto == packet.ProtoICMPv6 && len(l4) >= packet.ICMPHeaderLen &&
			(l4[0] == icmp6RouterAdvert || l4[0] == icmp6Redirect) && b.Verdicts[0] == PassVerdict {
			t.Fatalf("ICMPv6 type %d passed: %x", l4[0], data)
		}
	})
}
