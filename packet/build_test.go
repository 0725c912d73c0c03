package packet

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

func TestPutEthernet(t *testing.T) {
	b := make([]byte, 20)
	if n := PutEthernet(b, Broadcast, macB, EtherTypeARP); n != EthernetHeaderLen {
		t.Fatalf("wrote %d bytes", n)
	}
	want := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 0x0b, 0x08, 0x06}
	if !bytes.Equal(b[:14], want) {
		t.Errorf("got %x, want %x", b[:14], want)
	}
}

func TestPutIPv4(t *testing.T) {
	b := make([]byte, IPv4HeaderLen)
	if n := PutIPv4(b, ip4A, ip4B, ProtoTCP, 17, 100); n != IPv4HeaderLen {
		t.Fatalf("wrote %d bytes", n)
	}
	want := []byte{0x45, 0, 0, 120, 0, 0, 0x40, 0, 17, ProtoTCP, 0, 0, 192, 0, 2, 1, 198, 51, 100, 2}
	binary.BigEndian.PutUint16(want[10:], referenceChecksum(want, 0))
	if !bytes.Equal(b, want) {
		t.Errorf("got %x, want %x", b, want)
	}
}

func TestPutIPv6(t *testing.T) {
	b := make([]byte, IPv6HeaderLen)
	for i := range b {
		b[i] = 0xee // every byte must be written
	}
	if n := PutIPv6(b, ip6A, ip6B, ProtoUDP, 9, 1000); n != IPv6HeaderLen {
		t.Fatalf("wrote %d bytes", n)
	}
	want := concat([]byte{0x60, 0, 0, 0, 0x03, 0xe8, ProtoUDP, 9}, ip6A.AsSlice(), ip6B.AsSlice())
	if !bytes.Equal(b, want) {
		t.Errorf("got %x, want %x", b, want)
	}
}

func TestPutUDP(t *testing.T) {
	payload := []byte("some payload, odd length")
	for _, c := range []struct {
		src, dst netip.AddrPort
		want     []byte
	}{
		{netip.AddrPortFrom(ip4A, 5000), netip.AddrPortFrom(ip4B, 53),
			withTTL(ipv4Packet(ProtoUDP, ipv4DontFragment, nil, udpDatagram(ip4A, ip4B, 5000, 53, payload)), 0)},
		{netip.AddrPortFrom(ip6A, 5000), netip.AddrPortFrom(ip6B, 53),
			ipv6Packet(ProtoUDP, udpDatagram(ip6A, ip6B, 5000, 53, payload))},
	} {
		b := make([]byte, 100)
		for i := range b {
			b[i] = 0xee
		}
		n := PutUDP(b, c.src, c.dst, payload)
		if !bytes.Equal(b[:n], c.want) {
			t.Errorf("%v > %v:\n got %x\nwant %x", c.src, c.dst, b[:n], c.want)
		}

		// The payload already in place.
		inPlace := make([]byte, 100)
		off := n - len(payload)
		copy(inPlace[off:], payload)
		if m := PutUDP(inPlace, c.src, c.dst, inPlace[off:off+len(payload)]); !bytes.Equal(inPlace[:m], c.want) {
			t.Errorf("%v > %v, payload in place:\n got %x\nwant %x", c.src, c.dst, inPlace[:m], c.want)
		}
		// The payload where the headers go.
		overlapping := make([]byte, 100)
		copy(overlapping[3:], payload)
		if m := PutUDP(overlapping, c.src, c.dst, overlapping[3:3+len(payload)]); !bytes.Equal(overlapping[:m], c.want) {
			t.Errorf("%v > %v, payload under the headers:\n got %x\nwant %x", c.src, c.dst, overlapping[:m], c.want)
		}
	}
}

// withTTL rewrites the TTL of an IPv4 packet built by ipv4Packet; 0 means
// the default PutUDP uses.
func withTTL(p []byte, ttl uint8) []byte {
	if ttl == 0 {
		ttl = defaultTTL
	}
	p[8] = ttl
	binary.BigEndian.PutUint16(p[4:], 0) // PutIPv4 writes ID 0
	SetIPv4HeaderChecksum(p)
	return p
}

func TestPutARP(t *testing.T) {
	b := make([]byte, ARPLen)
	if n := PutARP(b, ARPRequest, macB, ip4A, [6]byte{}, ip4B); n != ARPLen {
		t.Fatalf("wrote %d bytes", n)
	}
	if !bytes.Equal(b, arpRequest) {
		t.Errorf("got %x, want %x", b, arpRequest)
	}
}

func TestNeighborSolicitation(t *testing.T) {
	target := netip.MustParseAddr("fe80::1234:5678:9abc")
	group := SolicitedNodeMulticast(target)
	if want := netip.MustParseAddr("ff02::1:ff78:9abc"); group != want {
		t.Errorf("SolicitedNodeMulticast(%v) = %v, want %v", target, group, want)
	}
	if mac, want := MulticastMAC(group), [6]byte{0x33, 0x33, 0xff, 0x78, 0x9a, 0xbc}; mac != want {
		t.Errorf("MulticastMAC(%v) = %x, want %x", group, mac, want)
	}

	src := netip.MustParseAddr("fe80::1")
	b := make([]byte, NeighborSolicitationLen)
	n := PutICMPv6NeighborSolicitation(b, src, target, macB)
	body := concat([]byte{135, 0, 0, 0, 0, 0, 0, 0}, target.AsSlice(), []byte{1, 1}, macB[:])
	want := ipv6Packet(ProtoICMPv6, withTransportChecksum(ProtoICMPv6, src, group, body, 2))
	want[7] = 255
	copy(want[8:], src.AsSlice())
	copy(want[24:], group.AsSlice())
	if !bytes.Equal(b[:n], want) {
		t.Errorf("\n got %x\nwant %x", b[:n], want)
	}

	// Duplicate address detection: no source link-layer address option.
	n = PutICMPv6NeighborSolicitation(b, netip.IPv6Unspecified(), target, macB)
	var h Headers
	if ok, reason := Parse(b[:n], L3, &h); !ok || n != IPv6HeaderLen+24 || !TransportChecksumOK(b[:n], &h) {
		t.Errorf("DAD solicitation: %d bytes, parse %v %v, checksum %v", n, ok, reason, TransportChecksumOK(b[:n], &h))
	}
}

func TestMulticastAddresses(t *testing.T) {
	macs := []struct {
		ip   string
		want [6]byte
	}{
		{"224.0.0.251", [6]byte{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb}},
		{"239.255.255.250", [6]byte{0x01, 0x00, 0x5e, 0x7f, 0xff, 0xfa}}, // bit 24 does not fit
		{"ff02::1", [6]byte{0x33, 0x33, 0, 0, 0, 1}},
		{"ff02::1:ff00:b", [6]byte{0x33, 0x33, 0xff, 0, 0, 0x0b}},
	}
	for _, c := range macs {
		if got := MulticastMAC(netip.MustParseAddr(c.ip)); got != c.want {
			t.Errorf("MulticastMAC(%s) = %x, want %x", c.ip, got, c.want)
		}
	}
	if got := MulticastMAC(netip.Addr{}); got != ([6]byte{}) {
		t.Errorf("MulticastMAC of the zero Addr = %x", got)
	}
	for _, a := range []netip.Addr{{}, ip4A} {
		if got := SolicitedNodeMulticast(a); got.IsValid() {
			t.Errorf("SolicitedNodeMulticast(%v) = %v, want the zero Addr", a, got)
		}
	}
}

func TestDecrementTTL(t *testing.T) {
	parse := func(b []byte, from Layer) *Headers {
		t.Helper()
		var h Headers
		if ok, reason := Parse(b, from, &h); !ok {
			t.Fatalf("Parse: %v", reason)
		}
		return &h
	}
	frame := ethernetFrame(EtherTypeIPv4, 0x0002, append([]byte(nil), udp4Packet...))
	h := parse(frame, L2)
	if !DecrementTTL(frame, h) || frame[18+8] != 63 || h.TTL != 63 || !IPv4HeaderChecksumOK(frame[18:]) {
		t.Errorf("IPv4 behind a VLAN tag: TTL %d, h.TTL %d, checksum OK %v", frame[18+8], h.TTL, IPv4HeaderChecksumOK(frame[18:]))
	}

	v6 := append([]byte(nil), tcp6Packet...)
	h = parse(v6, L3)
	if !DecrementTTL(v6, h) || v6[7] != 63 || h.TTL != 63 {
		t.Errorf("IPv6: hop limit %d, h.TTL %d", v6[7], h.TTL)
	}

	for _, ttl := range []uint8{0, 1} {
		for _, p := range [][]byte{udp4Packet, tcp6Packet} {
			p = append([]byte(nil), p...)
			if p[0]>>4 == 4 {
				p[8] = ttl
				SetIPv4HeaderChecksum(p)
			} else {
				p[7] = ttl
			}
			before := append([]byte(nil), p...)
			if DecrementTTL(p, parse(p, L3)) || !bytes.Equal(p, before) {
				t.Errorf("IPv%d TTL %d: decremented to %x", p[0]>>4, ttl, p)
			}
		}
	}

	arp := ethernetFrame(EtherTypeARP, 0, arpRequest)
	if h := parse(arp, L2); DecrementTTL(arp, h) {
		t.Error("DecrementTTL accepted ARP")
	}
	// Headers that do not describe b.
	h = parse(udp4Packet, L3)
	for _, b := range [][]byte{nil, udp4Packet[:19]} {
		if DecrementTTL(b, h) {
			t.Errorf("DecrementTTL accepted a %d-byte slice", len(b))
		}
	}
}

func TestBuildAllocs(t *testing.T) {
	b := make([]byte, 1500)
	payload := make([]byte, 1000)
	src4, dst4 := netip.AddrPortFrom(ip4A, 1), netip.AddrPortFrom(ip4B, 2)
	src6, dst6 := netip.AddrPortFrom(ip6A, 1), netip.AddrPortFrom(ip6B, 2)
	if a := testing.AllocsPerRun(1000, func() {
		PutUDP(b, src4, dst4, payload)
		PutUDP(b, src6, dst6, b[48:148])
	}); a != 0 {
		t.Errorf("PutUDP: %v allocations per run", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		n := PutEthernet(b, Broadcast, macB, EtherTypeARP)
		PutARP(b[n:], ARPRequest, macB, ip4A, [6]byte{}, ip4B)
		PutICMPv6NeighborSolicitation(b, ip6A, ip6B, macB)
		MulticastMAC(SolicitedNodeMulticast(ip6B))
	}); a != 0 {
		t.Errorf("other builders: %v allocations per run", a)
	}

	pkt := append([]byte(nil), udp4Packet...)
	var h Headers
	Parse(pkt, L3, &h)
	if a := testing.AllocsPerRun(1000, func() {
		pkt[8] = 64
		h.TTL = 64
		DecrementTTL(pkt, &h)
	}); a != 0 {
		t.Errorf("DecrementTTL: %v allocations per run", a)
	}
}
