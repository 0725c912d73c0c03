package packet

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"softnet.dev/drop"
)

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	ip4A = netip.MustParseAddr("192.0.2.1")
	ip4B = netip.MustParseAddr("198.51.100.2")
	ip6A = netip.MustParseAddr("2001:db8::a")
	ip6B = netip.MustParseAddr("2001:db8::b")
)

// The test packets below are assembled byte by byte, with checksums from
// referenceChecksum, so they do not depend on the code under test.

// ethernetFrame puts an Ethernet header from macB to macA in front of l3,
// with an 802.1Q tag holding vlanTCI if it is not 0.
func ethernetFrame(etherType, vlanTCI uint16, l3 []byte) []byte {
	var b []byte
	b = append(b, macA[:]...)
	b = append(b, macB[:]...)
	if vlanTCI != 0 {
		b = binary.BigEndian.AppendUint16(b, EtherTypeVLAN)
		b = binary.BigEndian.AppendUint16(b, vlanTCI)
	}
	b = binary.BigEndian.AppendUint16(b, etherType)
	return append(b, l3...)
}

// ipv4Packet returns an IPv4 packet from ip4A to ip4B with TTL 64.
// fragField holds the flags and fragment offset.
func ipv4Packet(proto uint8, fragField uint16, options, payload []byte) []byte {
	hdrLen := IPv4HeaderLen + len(options)
	b := make([]byte, hdrLen, hdrLen+len(payload))
	b[0] = 0x40 | byte(hdrLen/4)
	binary.BigEndian.PutUint16(b[2:], uint16(hdrLen+len(payload)))
	binary.BigEndian.PutUint16(b[4:], 0x1234)
	binary.BigEndian.PutUint16(b[6:], fragField)
	b[8] = 64
	b[9] = proto
	copy(b[12:], ip4A.AsSlice())
	copy(b[16:], ip4B.AsSlice())
	copy(b[20:], options)
	binary.BigEndian.PutUint16(b[10:], referenceChecksum(b, 0))
	return append(b, payload...)
}

// ipv6Packet returns an IPv6 packet from ip6A to ip6B with hop limit 64.
func ipv6Packet(next uint8, payload []byte) []byte {
	b := make([]byte, IPv6HeaderLen, IPv6HeaderLen+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
	b[6] = next
	b[7] = 64
	copy(b[8:], ip6A.AsSlice())
	copy(b[24:], ip6B.AsSlice())
	return append(b, payload...)
}

// referencePseudoHeader lays the pseudo-header out as bytes, the way the
// RFCs draw it.
func referencePseudoHeader(proto uint8, src, dst netip.Addr, length int) []byte {
	var b []byte
	b = append(b, src.AsSlice()...)
	b = append(b, dst.AsSlice()...)
	if src.Is4() {
		b = append(b, 0, proto)
		return binary.BigEndian.AppendUint16(b, uint16(length))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(length))
	return append(b, 0, 0, 0, proto)
}

// withTransportChecksum stores the checksum of segment, whose checksum
// field is at csumOff, and returns segment.
func withTransportChecksum(proto uint8, src, dst netip.Addr, segment []byte, csumOff int) []byte {
	binary.BigEndian.PutUint16(segment[csumOff:], 0)
	whole := append(referencePseudoHeader(proto, src, dst, len(segment)), segment...)
	binary.BigEndian.PutUint16(segment[csumOff:], referenceChecksum(whole, 0))
	return segment
}

func tcpSegment(src, dst netip.Addr, srcPort, dstPort uint16, options, payload []byte) []byte {
	hdrLen := TCPHeaderLen + len(options)
	b := make([]byte, hdrLen, hdrLen+len(payload))
	binary.BigEndian.PutUint16(b[0:], srcPort)
	binary.BigEndian.PutUint16(b[2:], dstPort)
	binary.BigEndian.PutUint32(b[4:], 1000) // sequence number
	b[12] = byte(hdrLen/4) << 4
	b[13] = 0x02 // SYN
	binary.BigEndian.PutUint16(b[14:], 65535)
	copy(b[20:], options)
	b = append(b, payload...)
	return withTransportChecksum(ProtoTCP, src, dst, b, 16)
}

func udpDatagram(src, dst netip.Addr, srcPort, dstPort uint16, payload []byte) []byte {
	b := make([]byte, UDPHeaderLen, UDPHeaderLen+len(payload))
	binary.BigEndian.PutUint16(b[0:], srcPort)
	binary.BigEndian.PutUint16(b[2:], dstPort)
	binary.BigEndian.PutUint16(b[4:], uint16(UDPHeaderLen+len(payload)))
	b = append(b, payload...)
	return withTransportChecksum(ProtoUDP, src, dst, b, 6)
}

// icmpEcho is an ICMP (v4) echo request, whose checksum has no
// pseudo-header.
func icmpEcho() []byte {
	b := []byte{8, 0, 0, 0, 0x12, 0x34, 0, 1, 'p', 'i', 'n', 'g'}
	binary.BigEndian.PutUint16(b[2:], referenceChecksum(b, 0))
	return b
}

var mssOption = []byte{2, 4, 0x05, 0xb4} // TCP MSS 1460

// ipv6ExtensionChain is hop-by-hop, routing (segments left 0) and
// destination options headers, 32 bytes in all, ending in next.
func ipv6ExtensionChain(next uint8) []byte {
	return []byte{
		ipv6Routing, 0, 1, 4, 0, 0, 0, 0, // hop-by-hop: PadN
		ipv6DestOptions, 0, 4, 0, 0, 0, 0, 0, // routing type 4, segments left 0
		next, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // destination options: PadN
	}
}

// ipv6FragmentHeader returns a fragment header; offset is in 8-byte units.
func ipv6FragmentHeader(next uint8, offset uint16, more bool) []byte {
	b := []byte{next, 0, 0, 0, 0xca, 0xfe, 0xf0, 0x0d}
	field := offset << 3
	if more {
		field |= 1
	}
	binary.BigEndian.PutUint16(b[2:], field)
	return b
}

func concat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// Valid packets, shared by the parse tests, the fuzz seed corpus and the
// checksum tests.
var (
	udp4Payload = []byte("hello, switch")
	udp4Packet  = ipv4Packet(ProtoUDP, ipv4DontFragment, nil, udpDatagram(ip4A, ip4B, 5000, 53, udp4Payload))
	tcp6Packet  = ipv6Packet(ProtoTCP, tcpSegment(ip6A, ip6B, 40000, 443, mssOption, []byte("GET /")))
	ext6Packet  = ipv6Packet(ipv6HopByHop, concat(ipv6ExtensionChain(ProtoTCP), tcpSegment(ip6A, ip6B, 40001, 80, nil, []byte("data"))))
	arpRequest  = []byte{
		0, 1, 0x08, 0x00, 6, 4, 0, 1, // Ethernet, IPv4, request
		0x02, 0, 0, 0, 0, 0x0b, 192, 0, 2, 1, // sender
		0, 0, 0, 0, 0, 0, 198, 51, 100, 2, // target
	}
)

// parseCase is a valid packet and the Headers Parse must produce.
type parseCase struct {
	name string
	from Layer
	data []byte
	want Headers
}

// ipCases returns valid IP packets as a TUN device delivers them.
func ipCases() []parseCase {
	udp6 := udpDatagram(ip6A, ip6B, 546, 547, []byte("dhcp"))
	tcp4 := tcpSegment(ip4A, ip4B, 1234, 22, nil, nil)
	icmp6NS := make([]byte, NeighborSolicitationLen)
	icmp6NS = icmp6NS[:PutICMPv6NeighborSolicitation(icmp6NS, ip6A, ip6B, macB)]
	nsDst := SolicitedNodeMulticast(ip6B)
	putUDP4 := make([]byte, 64)
	putUDP4 = putUDP4[:PutUDP(putUDP4, netip.AddrPortFrom(ip4A, 7), netip.AddrPortFrom(ip4B, 9), []byte("x"))]
	putUDP6 := make([]byte, 64)
	putUDP6 = putUDP6[:PutUDP(putUDP6, netip.AddrPortFrom(ip6A, 7), netip.AddrPortFrom(ip6B, 9), nil)]

	v4 := func(l3Len int, ipProto uint8, l4Off int, sport, dport uint16) Headers {
		return Headers{Proto: EtherTypeIPv4, SrcIP: ip4A, DstIP: ip4B, IPProto: ipProto, TTL: 64,
			L3Len: l3Len, L4Off: l4Off, SrcPort: sport, DstPort: dport}
	}
	v6 := func(l3Len int, ipProto uint8, l4Off int, sport, dport uint16) Headers {
		return Headers{Proto: EtherTypeIPv6, SrcIP: ip6A, DstIP: ip6B, IPProto: ipProto, TTL: 64,
			L3Len: l3Len, L4Off: l4Off, SrcPort: sport, DstPort: dport}
	}
	fragment := func(h Headers) Headers { h.Fragment = true; return h }
	withTTL := func(h Headers, ttl uint8) Headers { h.TTL = ttl; return h }
	withDst := func(h Headers, dst netip.Addr) Headers { h.DstIP = dst; return h }

	return []parseCase{
		{"IPv4 UDP", L3, udp4Packet, v4(len(udp4Packet), ProtoUDP, 20, 5000, 53)},
		{"IPv4 TCP", L3, ipv4Packet(ProtoTCP, 0, nil, tcp4), v4(40, ProtoTCP, 20, 1234, 22)},
		{"IPv4 ICMP echo", L3, ipv4Packet(ProtoICMP, 0, nil, icmpEcho()), v4(32, ProtoICMP, 20, 8, 0)},
		{"IPv4 options", L3, ipv4Packet(ProtoUDP, 0, []byte{1, 1, 1, 0}, udpDatagram(ip4A, ip4B, 1, 2, nil)),
			v4(32, ProtoUDP, 24, 1, 2)},
		{"IPv4 unknown transport", L3, ipv4Packet(47, 0, nil, []byte{0, 0, 0x08, 0}), v4(24, 47, 0, 0, 0)},
		{"IPv4 empty unknown transport", L3, ipv4Packet(253, 0, nil, nil), v4(20, 253, 0, 0, 0)},
		{"IPv4 first fragment", L3, ipv4Packet(ProtoUDP, ipv4MoreFragments, nil, udpDatagram(ip4A, ip4B, 3, 4, make([]byte, 16))),
			fragment(v4(44, ProtoUDP, 20, 3, 4))},
		{"IPv4 later fragment", L3, ipv4Packet(ProtoUDP, 3, nil, make([]byte, 4)), fragment(v4(24, ProtoUDP, 0, 0, 0))},
		{"IPv4 last fragment ignores garbage L4", L3, ipv4Packet(ProtoTCP, 1, nil, []byte{1}), fragment(v4(21, ProtoTCP, 0, 0, 0))},
		{"IPv6 UDP", L3, ipv6Packet(ProtoUDP, udp6), v6(40+len(udp6), ProtoUDP, 40, 546, 547)},
		{"IPv6 TCP", L3, tcp6Packet, v6(len(tcp6Packet), ProtoTCP, 40, 40000, 443)},
		{"IPv6 extension headers", L3, ext6Packet, v6(len(ext6Packet), ProtoTCP, 72, 40001, 80)},
		{"IPv6 first fragment", L3, ipv6Packet(ipv6Fragment, concat(ipv6FragmentHeader(ProtoUDP, 0, true), udpDatagram(ip6A, ip6B, 5, 6, make([]byte, 40)))),
			fragment(v6(96, ProtoUDP, 48, 5, 6))},
		{"IPv6 later fragment", L3, ipv6Packet(ipv6Fragment, concat(ipv6FragmentHeader(ProtoUDP, 6, false), make([]byte, 9))),
			fragment(v6(57, ProtoUDP, 0, 0, 0))},
		{"IPv6 fragment after extension headers", L3,
			ipv6Packet(ipv6HopByHop, concat(ipv6ExtensionChain(ipv6Fragment), ipv6FragmentHeader(ProtoTCP, 0, true), tcpSegment(ip6A, ip6B, 7, 8, nil, nil))),
			fragment(v6(100, ProtoTCP, 80, 7, 8))},
		{"IPv6 no next header", L3, ipv6Packet(59, nil), v6(40, 59, 0, 0, 0)},
		{"IPv6 ESP is not walked", L3, ipv6Packet(50, make([]byte, 8)), v6(48, 50, 0, 0, 0)},
		{"IPv6 ICMP (v4) number is unknown", L3, ipv6Packet(ProtoICMP, []byte{1}), v6(41, ProtoICMP, 0, 0, 0)},
		{"IPv6 neighbor solicitation", L3, icmp6NS,
			withDst(withTTL(v6(72, ProtoICMPv6, 40, 135, 0), 255), nsDst)},
		{"PutUDP IPv4", L3, putUDP4, v4(29, ProtoUDP, 20, 7, 9)},
		{"PutUDP IPv6", L3, putUDP6, v6(48, ProtoUDP, 40, 7, 9)},
	}
}

// atL2 returns c as an Ethernet frame, tagged with vlanTCI if it is not 0.
func atL2(c parseCase, vlanTCI uint16) parseCase {
	etherType := EtherTypeIPv4
	if c.want.Proto == EtherTypeIPv6 {
		etherType = EtherTypeIPv6
	}
	if vlanTCI != 0 {
		c.name += fmt.Sprintf(" VLAN %#x", vlanTCI)
	}
	c.name += " from L2"
	c.from = L2
	c.data = ethernetFrame(etherType, vlanTCI, c.data)
	c.want = shiftedToL2(c.want, etherType, vlanTCI)
	return c
}

// shiftedToL2 returns the Headers of an IP packet parsed from L3 as they
// are when the packet is behind an Ethernet header from ethernetFrame.
func shiftedToL2(h Headers, etherType, vlanTCI uint16) Headers {
	off := EthernetHeaderLen
	if vlanTCI != 0 {
		off += VLANTagLen
	}
	h.Dst, h.Src = macA, macB
	h.EtherType = etherType
	h.VLAN = vlanTCI & 0x0fff
	h.L3Off += off
	if h.L4Off != 0 {
		h.L4Off += off
	}
	return h
}

// goodCases returns every valid packet, from L3 and from L2.
func goodCases() []parseCase {
	var cases []parseCase
	for _, c := range ipCases() {
		cases = append(cases, c, atL2(c, 0), atL2(c, 0xa064))
	}
	arp := Headers{Dst: macA, Src: macB, EtherType: EtherTypeARP, L3Off: 14, Proto: EtherTypeARP,
		SrcIP: ip4A, DstIP: ip4B, L3Len: ARPLen, ARPOp: ARPRequest, ARPSenderMAC: macB}
	padded := append(ethernetFrame(EtherTypeARP, 0, arpRequest), make([]byte, 18)...)
	tagged := arp
	tagged.VLAN, tagged.L3Off = 7, 18
	built := make([]byte, EthernetHeaderLen+ARPLen)
	n := PutEthernet(built, Broadcast, macB, EtherTypeARP)
	PutARP(built[n:], ARPReply, macB, ip4A, macA, ip4B)
	reply := arp
	reply.Dst, reply.ARPOp, reply.ARPTargetMAC = Broadcast, ARPReply, macA

	shortUDP := ipv4Packet(ProtoUDP, 0, nil, udpDatagram(ip4A, ip4B, 1, 2, []byte{0xaa, 0xbb}))
	paddedUDP := append(ethernetFrame(EtherTypeIPv4, 0, shortUDP), make([]byte, 60-14-len(shortUDP))...)
	paddedUDP[len(paddedUDP)-1] = 0xee // padding is not all zeros on every NIC

	return append(cases,
		parseCase{"ARP", L2, ethernetFrame(EtherTypeARP, 0, arpRequest), arp},
		parseCase{"ARP with Ethernet padding", L2, padded, arp},
		parseCase{"ARP VLAN 7", L2, ethernetFrame(EtherTypeARP, 7, arpRequest), tagged},
		parseCase{"PutARP reply", L2, built, reply},
		parseCase{"IPv4 UDP with Ethernet padding", L2, paddedUDP, Headers{
			Dst: macA, Src: macB, EtherType: EtherTypeIPv4, L3Off: 14, Proto: EtherTypeIPv4,
			SrcIP: ip4A, DstIP: ip4B, IPProto: ProtoUDP, TTL: 64, L3Len: 30, L4Off: 34, SrcPort: 1, DstPort: 2}},
	)
}

func TestParseGood(t *testing.T) {
	for _, c := range goodCases() {
		var h Headers
		h.SrcPort = 0xdead // Parse must overwrite a reused Headers
		ok, reason := Parse(c.data, c.from, &h)
		if !ok {
			t.Errorf("%s: Parse failed: %v", c.name, reason)
			continue
		}
		if h != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, h, c.want)
		}
		if h.L4Off != 0 && h.Proto != EtherTypeARP && !TransportChecksumOK(c.data, &h) && !h.Fragment {
			t.Errorf("%s: transport checksum does not verify", c.name)
		}
	}
}

// step says that truncations shorter than upTo fail with reason; a list of
// steps in increasing order describes every truncation of a packet.
type step struct {
	upTo   int
	reason drop.Reason
}

// wantAt returns the expected outcome of parsing the first n bytes.
func wantAt(steps []step, n int) (bool, drop.Reason) {
	for _, s := range steps {
		if n < s.upTo {
			return false, s.reason
		}
	}
	return true, drop.NotSpecified
}

// TestParseTruncated cuts valid packets at every length. The IP length
// fields then claim more than the buffer holds, which is InvalidProto once
// the IP header itself is complete.
func TestParseTruncated(t *testing.T) {
	frame4 := ethernetFrame(EtherTypeIPv4, 0, udp4Packet)
	tagged4 := ethernetFrame(EtherTypeIPv4, 0x0123, udp4Packet)
	cases := []struct {
		name  string
		from  Layer
		data  []byte
		steps []step
	}{
		{"IPv4 UDP", L3, udp4Packet, []step{{1, drop.PktTooSmall}, {20, drop.HdrTrunc}, {len(udp4Packet), drop.InvalidProto}}},
		{"IPv4 UDP from L2", L2, frame4, []step{{14, drop.PktTooSmall}, {34, drop.HdrTrunc}, {len(frame4), drop.InvalidProto}}},
		{"IPv4 UDP VLAN", L2, tagged4, []step{{14, drop.PktTooSmall}, {38, drop.HdrTrunc}, {len(tagged4), drop.InvalidProto}}},
		{"IPv6 TCP", L3, tcp6Packet, []step{{1, drop.PktTooSmall}, {40, drop.HdrTrunc}, {len(tcp6Packet), drop.InvalidProto}}},
		{"IPv6 TCP from L2", L2, ethernetFrame(EtherTypeIPv6, 0, tcp6Packet),
			[]step{{14, drop.PktTooSmall}, {54, drop.HdrTrunc}, {14 + len(tcp6Packet), drop.InvalidProto}}},
		{"IPv6 extension headers", L3, ext6Packet, []step{{1, drop.PktTooSmall}, {40, drop.HdrTrunc}, {len(ext6Packet), drop.InvalidProto}}},
		{"IPv6 extension headers VLAN", L2, ethernetFrame(EtherTypeIPv6, 5, ext6Packet),
			[]step{{14, drop.PktTooSmall}, {58, drop.HdrTrunc}, {18 + len(ext6Packet), drop.InvalidProto}}},
		{"ARP", L2, ethernetFrame(EtherTypeARP, 0, arpRequest), []step{{14, drop.PktTooSmall}, {42, drop.HdrTrunc}}},
		{"ARP VLAN", L2, ethernetFrame(EtherTypeARP, 9, arpRequest), []step{{14, drop.PktTooSmall}, {46, drop.HdrTrunc}}},
	}
	for _, c := range cases {
		for n := 0; n <= len(c.data); n++ {
			checkParse(t, fmt.Sprintf("%s cut at %d", c.name, n), c.data[:n], c.from, c.steps, n)
		}
	}
}

// A snapshot of a valid packet parses as the whole packet once it holds
// its headers, and as HdrTrunc before; a malformed packet is as malformed
// in any snapshot of it, or cut before the fault.
func TestParseSnapshot(t *testing.T) {
	for _, c := range goodCases() {
		parsedFrom := -1
		for n := 0; n <= len(c.data); n++ {
			var h Headers
			ok, reason := ParseSnapshot(c.data[:n], len(c.data), c.from, &h)
			switch {
			case ok && h != c.want:
				t.Errorf("%s, snapshot of %d bytes:\n got %+v\nwant %+v", c.name, n, h, c.want)
			case ok && parsedFrom < 0:
				parsedFrom = n
			case !ok && parsedFrom >= 0:
				t.Errorf("%s: a snapshot of %d bytes parses, one of %d fails (%v)", c.name, parsedFrom, n, reason)
			case !ok && reason != drop.HdrTrunc:
				t.Errorf("%s, snapshot of %d bytes: %v, want HdrTrunc", c.name, n, reason)
			}
		}
		if parsedFrom < 0 {
			t.Errorf("%s: the whole packet does not parse as a snapshot", c.name)
		}
	}
	// The IP length is judged against the packet's length, not the
	// snapshot's.
	var h Headers
	if ok, reason := ParseSnapshot(udp4Packet[:28], len(udp4Packet)-1, L3, &h); ok || reason != drop.InvalidProto {
		t.Errorf("IP length past the packet: ok=%v %v, want InvalidProto", ok, reason)
	}
	if ok, reason := ParseSnapshot(udp4Packet, 10, L3, &h); !ok || h.L3Len != len(udp4Packet) {
		t.Errorf("length shorter than the snapshot: ok=%v %v, %+v", ok, reason, h)
	}
	if ok, reason := ParseSnapshot(nil, 0, L3, &h); ok || reason != drop.PktTooSmall {
		t.Errorf("an empty packet: ok=%v %v, want PktTooSmall", ok, reason)
	}
}

// TestParseShortIPLength cuts valid packets at every length and makes the
// IP length field agree, so the IP header is valid and the headers after it
// are what is truncated.
func TestParseShortIPLength(t *testing.T) {
	cases := []struct {
		name  string
		data  []byte
		steps []step // from the end of the fixed IP header on
	}{
		{"IPv4 UDP", udp4Packet, []step{{28, drop.HdrTrunc}}},
		{"IPv4 TCP with options", ipv4Packet(ProtoTCP, 0, nil, tcpSegment(ip4A, ip4B, 1, 2, mssOption, nil)),
			[]step{{40, drop.HdrTrunc}, {44, drop.InvalidProto}}},
		{"IPv4 ICMP", ipv4Packet(ProtoICMP, 0, nil, icmpEcho()), []step{{28, drop.HdrTrunc}}},
		{"IPv6 TCP with options", tcp6Packet, []step{{60, drop.HdrTrunc}, {64, drop.InvalidProto}}},
		{"IPv6 extension headers", ext6Packet, []step{{92, drop.HdrTrunc}}},
		{"IPv6 fragment", ipv6Packet(ipv6Fragment, concat(ipv6FragmentHeader(ProtoUDP, 0, true), make([]byte, 8))),
			[]step{{56, drop.HdrTrunc}}},
		{"IPv6 neighbor solicitation", ipCase(t, "IPv6 neighbor solicitation").data, []step{{48, drop.HdrTrunc}}},
	}
	for _, c := range cases {
		ipHdrLen := IPv4HeaderLen
		if c.data[0]>>4 == 6 {
			ipHdrLen = IPv6HeaderLen
		}
		for n := ipHdrLen; n <= len(c.data); n++ {
			p := append([]byte(nil), c.data[:n]...)
			if ipHdrLen == IPv4HeaderLen {
				binary.BigEndian.PutUint16(p[2:], uint16(n))
				SetIPv4HeaderChecksum(p)
			} else {
				binary.BigEndian.PutUint16(p[4:], uint16(n-IPv6HeaderLen))
			}
			// Bytes beyond the IP length must not rescue a truncated header.
			padded := append(p, make([]byte, 64)...)
			name := fmt.Sprintf("%s with IP length %d", c.name, n)
			checkParse(t, name, padded, L3, c.steps, n)
			etherType := EtherTypeIPv4
			if ipHdrLen == IPv6HeaderLen {
				etherType = EtherTypeIPv6
			}
			checkParse(t, name+" from L2", ethernetFrame(etherType, 0, padded), L2, c.steps, n)
		}
	}
}

func ipCase(t *testing.T, name string) parseCase {
	for _, c := range ipCases() {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no case %q", name)
	return parseCase{}
}

func checkParse(t *testing.T, name string, data []byte, from Layer, steps []step, n int) {
	t.Helper()
	var h Headers
	wantOK, wantReason := wantAt(steps, n)
	ok, reason := Parse(data, from, &h)
	switch {
	case ok != wantOK:
		t.Errorf("%s: ok = %v (%v), want %v (%v)", name, ok, reason, wantOK, wantReason)
	case !ok && reason != wantReason:
		t.Errorf("%s: reason %v, want %v", name, reason, wantReason)
	}
}

// mutate returns a copy of b changed by f.
func mutate(b []byte, f func(b []byte)) []byte {
	b = append([]byte(nil), b...)
	f(b)
	return b
}

func TestParseMalformed(t *testing.T) {
	v4 := func(f func(b []byte)) []byte { return mutate(udp4Packet, f) }
	v6 := func(f func(b []byte)) []byte { return mutate(tcp6Packet, f) }
	tcp4 := func(dataOffset byte) []byte {
		p := ipv4Packet(ProtoTCP, 0, nil, tcpSegment(ip4A, ip4B, 1, 2, nil, []byte("payload")))
		p[20+12] = dataOffset << 4
		return p
	}
	arp := func(f func(b []byte)) []byte { return ethernetFrame(EtherTypeARP, 0, mutate(arpRequest, f)) }
	cases := []struct {
		name   string
		from   Layer
		data   []byte
		reason drop.Reason
	}{
		{"empty TUN packet", L3, nil, drop.PktTooSmall},
		{"empty frame", L2, nil, drop.PktTooSmall},
		{"13-byte frame", L2, make([]byte, 13), drop.PktTooSmall},
		{"TUN version 0", L3, v4(func(b []byte) { b[0] = 0x05 }), drop.InvalidProto},
		{"TUN version 5", L3, v4(func(b []byte) { b[0] = 0x55 }), drop.InvalidProto},
		{"TUN version 15, one byte", L3, []byte{0xf0}, drop.InvalidProto},
		{"IPv4 EtherType with version 6", L2, ethernetFrame(EtherTypeIPv4, 0, tcp6Packet), drop.InvalidProto},
		{"IPv6 EtherType with version 4", L2, ethernetFrame(EtherTypeIPv6, 0, append(udp4Packet, make([]byte, 40)...)), drop.InvalidProto},
		{"IPv6 EtherType with short IPv4", L2, ethernetFrame(EtherTypeIPv6, 0, udp4Packet[:39]), drop.HdrTrunc},
		{"IHL 0", L3, v4(func(b []byte) { b[0] = 0x40 }), drop.InvalidProto},
		{"IHL 4", L3, v4(func(b []byte) { b[0] = 0x44 }), drop.InvalidProto},
		{"IHL 15 beyond the packet", L3, v4(func(b []byte) { b[0] = 0x4f }), drop.HdrTrunc},
		{"IHL 15 beyond the total length", L3, append(v4(func(b []byte) { b[0] = 0x4f }), make([]byte, 30)...), drop.InvalidProto},
		{"total length below IHL", L3, v4(func(b []byte) { b[2], b[3] = 0, 19 }), drop.InvalidProto},
		{"total length 0", L3, v4(func(b []byte) { b[2], b[3] = 0, 0 }), drop.InvalidProto},
		{"total length one past the buffer", L3, v4(func(b []byte) { binary.BigEndian.PutUint16(b[2:], uint16(len(b)+1)) }), drop.InvalidProto},
		{"total length 65535", L3, v4(func(b []byte) { b[2], b[3] = 0xff, 0xff }), drop.InvalidProto},
		{"IPv6 payload length one past the buffer", L3, v6(func(b []byte) { binary.BigEndian.PutUint16(b[4:], uint16(len(b)-39)) }), drop.InvalidProto},
		{"IPv6 payload length 65535", L3, v6(func(b []byte) { b[4], b[5] = 0xff, 0xff }), drop.InvalidProto},
		{"TCP data offset 0", L3, tcp4(0), drop.InvalidProto},
		{"TCP data offset 3", L3, tcp4(3), drop.InvalidProto},
		{"TCP data offset 4", L3, tcp4(4), drop.InvalidProto},
		{"TCP data offset 7, one byte past the segment", L3, tcp4(7), drop.InvalidProto},
		{"TCP data offset 8 too large", L3, tcp4(8), drop.InvalidProto},
		{"TCP data offset 15 too large", L3, tcp4(15), drop.InvalidProto},
		{"IPv6 TCP data offset 3", L3, v6(func(b []byte) { b[40+12] = 0x30 }), drop.InvalidProto},
		{"IPv6 TCP data offset 15", L3, v6(func(b []byte) { b[40+12] = 0xf0 }), drop.InvalidProto},
		{"IPv6 hop-by-hop length beyond the packet", L3, mutate(ext6Packet, func(b []byte) { b[41] = 200 }), drop.HdrTrunc},
		{"IPv6 destination options length beyond the packet", L3, mutate(ext6Packet, func(b []byte) { b[57] = 7 }), drop.HdrTrunc},
		{"IPv6 extension header loop to the end", L3, ipv6Packet(ipv6DestOptions, []byte{ipv6DestOptions, 0, 0, 0, 0, 0, 0, 0, ipv6DestOptions, 0, 0, 0}), drop.HdrTrunc},
		{"ARP hlen 8", L2, arp(func(b []byte) { b[4] = 8 }), drop.InvalidProto},
		{"ARP plen 16", L2, arp(func(b []byte) { b[5] = 16 }), drop.InvalidProto},
		{"ARP for IPv6", L2, arp(func(b []byte) { b[2], b[3] = 0x86, 0xdd }), drop.InvalidProto},
		{"ARP bad sizes, truncated", L2, arp(func(b []byte) { b[4] = 0 })[:14+8], drop.InvalidProto},
		{"unknown EtherType", L2, ethernetFrame(0x88cc, 0, make([]byte, 46)), drop.UnhandledProto},
		{"802.3 length field", L2, ethernetFrame(46, 0, make([]byte, 46)), drop.UnhandledProto},
		{"unknown EtherType in VLAN", L2, ethernetFrame(0x88b5, 2, make([]byte, 46)), drop.UnhandledProto},
		{"two VLAN tags", L2, ethernetFrame(EtherTypeVLAN, 2, concat([]byte{0, 3, 0x08, 0x00}, udp4Packet)), drop.UnhandledProto},
		{"QinQ outer tag", L2, ethernetFrame(0x88a8, 0, concat([]byte{0, 3, 0x08, 0x00}, udp4Packet)), drop.UnhandledProto},
		{"VLAN tag cut", L2, ethernetFrame(EtherTypeVLAN, 0, []byte{0, 1, 0x08}), drop.HdrTrunc},
	}
	for _, c := range cases {
		var h Headers
		ok, reason := Parse(c.data, c.from, &h)
		if ok || reason != c.reason {
			t.Errorf("%s: got ok=%v %v, want %v", c.name, ok, reason, c.reason)
		}
		for n := 0; n <= len(c.data); n++ {
			ok, reason := ParseSnapshot(c.data[:n], len(c.data), c.from, &h)
			want := reason == c.reason || n < len(c.data) && reason == drop.HdrTrunc
			if ok || !want {
				t.Errorf("%s, snapshot of %d bytes: got ok=%v %v, want %v", c.name, n, ok, reason, c.reason)
			}
		}
	}
}

func TestParseEdges(t *testing.T) {
	var h Headers
	if ok, reason := Parse(udp4Packet, Layer(2), &h); ok || reason != drop.NotSpecified {
		t.Errorf("unknown layer: got ok=%v %v, want NOT_SPECIFIED", ok, reason)
	}
	// A data offset is only checked against the segment: 24 bytes of
	// header fit a 27-byte segment (TestParseMalformed has 28 not fitting).
	p := ipv4Packet(ProtoTCP, 0, nil, tcpSegment(ip4A, ip4B, 1, 2, nil, []byte("payload")))
	p[20+12] = 6 << 4
	if ok, reason := Parse(p, L3, &h); !ok || h.L4Off != 20 {
		t.Errorf("TCP data offset 6 in a 27-byte segment: ok=%v %v, L4Off %d", ok, reason, h.L4Off)
	}
}

func TestReset(t *testing.T) {
	var h Headers
	if ok, _ := Parse(ethernetFrame(EtherTypeIPv4, 3, udp4Packet), L2, &h); !ok {
		t.Fatal("Parse failed")
	}
	h.Reset()
	if h != (Headers{}) {
		t.Errorf("after Reset: %+v", h)
	}
}

// A failed Parse must not leave fields of an earlier packet behind.
func TestParseFailureClearsHeaders(t *testing.T) {
	var h Headers
	Parse(ethernetFrame(EtherTypeIPv4, 3, udp4Packet), L2, &h)
	if ok, _ := Parse(ethernetFrame(0x88cc, 0, nil), L2, &h); ok {
		t.Fatal("Parse of an unknown EtherType succeeded")
	}
	want := Headers{Dst: macA, Src: macB, EtherType: 0x88cc, L3Off: 14}
	if h != want {
		t.Errorf("got %+v, want %+v", h, want)
	}
}

func TestParseAllocs(t *testing.T) {
	var h Headers
	frames := [][]byte{
		ethernetFrame(EtherTypeIPv4, 0, udp4Packet),
		ethernetFrame(EtherTypeIPv6, 10, ext6Packet),
		ethernetFrame(EtherTypeARP, 0, arpRequest),
	}
	allocs := testing.AllocsPerRun(1000, func() {
		for _, f := range frames {
			Parse(f, L2, &h)
		}
		Parse(tcp6Packet, L3, &h)
		Parse(udp4Packet[:30], L3, &h)
	})
	if allocs != 0 {
		t.Errorf("Parse: %v allocations per run", allocs)
	}
}

func BenchmarkParse(b *testing.B) {
	l3 := make([]byte, 64)
	n := PutUDP(l3, netip.AddrPortFrom(ip4A, 5000), netip.AddrPortFrom(ip4B, 53), make([]byte, 64-IPv4HeaderLen-UDPHeaderLen))
	l2 := make([]byte, 64)
	off := PutEthernet(l2, macA, macB, EtherTypeIPv4)
	PutUDP(l2[off:], netip.AddrPortFrom(ip4A, 5000), netip.AddrPortFrom(ip4B, 53), make([]byte, 64-off-IPv4HeaderLen-UDPHeaderLen))
	for _, c := range []struct {
		name string
		from Layer
		data []byte
	}{{"L3", L3, l3[:n]}, {"L2", L2, l2}} {
		b.Run(c.name, func(b *testing.B) {
			var h Headers
			b.ReportAllocs()
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				if ok, reason := Parse(c.data, c.from, &h); !ok {
					b.Fatal(reason)
				}
			}
		})
	}
}
