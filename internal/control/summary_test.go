package control

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"softnet.dev/packet"
)

var (
	summarySrcMAC = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	summaryDstMAC = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
)

// summaryCase is a packet to build into a buffer and the summary its
// first dropHeadBytes must give.
type summaryCase struct {
	v6       bool
	proto    uint8
	l2       bool
	payload  int // bytes after the transport header
	tcpOpts  int // bytes of TCP options
	src, dst netip.AddrPort
}

// build writes the packet to buf, which is large enough, and returns
// its length. Only the headers are written: the payload's bytes do not
// matter to a summary.
func (c summaryCase) build(buf []byte) int {
	off := 0
	if c.l2 {
		etherType := packet.EtherTypeIPv4
		if c.v6 {
			etherType = packet.EtherTypeIPv6
		}
		off = packet.PutEthernet(buf, summaryDstMAC, summarySrcMAC, etherType)
	}
	l4 := map[uint8]int{packet.ProtoUDP: packet.UDPHeaderLen, packet.ProtoTCP: packet.TCPHeaderLen + c.tcpOpts,
		packet.ProtoICMP: packet.ICMPHeaderLen, packet.ProtoICMPv6: packet.ICMPHeaderLen}[c.proto]
	segment := l4 + c.payload
	if c.v6 {
		off += packet.PutIPv6(buf[off:], c.src.Addr(), c.dst.Addr(), c.proto, 64, segment)
	} else {
		off += packet.PutIPv4(buf[off:], c.src.Addr(), c.dst.Addr(), c.proto, 64, segment)
	}
	t := buf[off : off+l4]
	clear(t)
	switch c.proto {
	case packet.ProtoUDP:
		binary.BigEndian.PutUint16(t[0:], c.src.Port())
		binary.BigEndian.PutUint16(t[2:], c.dst.Port())
		binary.BigEndian.PutUint16(t[4:], uint16(segment))
	case packet.ProtoTCP:
		binary.BigEndian.PutUint16(t[0:], c.src.Port())
		binary.BigEndian.PutUint16(t[2:], c.dst.Port())
		t[12] = byte(l4/4) << 4
		for i := packet.TCPHeaderLen; i < l4; i++ {
			t[i] = 1 // no-operation options
		}
	case packet.ProtoICMP:
		t[0] = 8 // echo request
	case packet.ProtoICMPv6:
		t[0] = 128 // echo request
	}
	return off + segment
}

// want is the summary, from what the case was built with.
func (c summaryCase) want() string {
	var b strings.Builder
	if c.l2 {
		b.WriteString("02:00:00:00:00:0b > 02:00:00:00:00:0a, ")
	}
	if c.v6 {
		b.WriteString("IP6 ")
	} else {
		b.WriteString("IP ")
	}
	switch c.proto {
	case packet.ProtoUDP:
		fmt.Fprintf(&b, "%s.%d > %s.%d: UDP, length %d", c.src.Addr(), c.src.Port(), c.dst.Addr(), c.dst.Port(), c.payload)
	case packet.ProtoTCP:
		fmt.Fprintf(&b, "%s.%d > %s.%d: TCP, length %d", c.src.Addr(), c.src.Port(), c.dst.Addr(), c.dst.Port(), c.payload)
	case packet.ProtoICMP:
		fmt.Fprintf(&b, "%s > %s: ICMP type 8 code 0, length %d", c.src.Addr(), c.dst.Addr(), packet.ICMPHeaderLen+c.payload)
	case packet.ProtoICMPv6:
		fmt.Fprintf(&b, "%s > %s: ICMP6 type 128 code 0, length %d", c.src.Addr(), c.dst.Addr(), packet.ICMPHeaderLen+c.payload)
	}
	return b.String()
}

// The summary of a drop sample (the packet's first dropHeadBytes) names
// the addresses, the ports and the true length, for packets of every
// size an IP header can state, v4 and v6, TCP, UDP and ICMP, from TUN
// and TAP ports.
func TestSummaryOfEverySize(t *testing.T) {
	var sizes []int
	for n := 0; n <= 2000; n++ {
		sizes = append(sizes, n)
	}
	for n := 2001; n < 65535; n += 509 {
		sizes = append(sizes, n)
	}
	sizes = append(sizes, 65535)
	buf := make([]byte, packet.EthernetHeaderLen+packet.IPv6HeaderLen+65535)
	v4 := [2]netip.AddrPort{netip.MustParseAddrPort("198.18.7.1:35638"), netip.MustParseAddrPort("198.18.9.9:5000")}
	v6 := [2]netip.AddrPort{netip.MustParseAddrPort("[2001:db8:7::1]:35638"), netip.MustParseAddrPort("[2001:db8:9::9]:5000")}
	checked := 0
	for _, family := range []bool{false, true} {
		for _, proto := range []uint8{packet.ProtoUDP, packet.ProtoTCP, packet.ProtoICMP} {
			for _, l2 := range []bool{false, true} {
				c := summaryCase{v6: family, proto: proto, l2: l2, src: v4[0], dst: v4[1]}
				ipHeader := packet.IPv4HeaderLen
				if family {
					c.src, c.dst, ipHeader = v6[0], v6[1], 0 // IPv6: the payload length excludes the header
					if proto == packet.ProtoICMP {
						c.proto = packet.ProtoICMPv6
					}
				}
				if proto == packet.ProtoTCP {
					c.tcpOpts = 12
				}
				for _, size := range sizes {
					c.payload = size
					l4 := map[uint8]int{packet.ProtoUDP: 8, packet.ProtoTCP: 32, packet.ProtoICMP: 8, packet.ProtoICMPv6: 8}[c.proto]
					if ipHeader+l4+size > 65535 {
						continue // more than the IP length field can say
					}
					n := c.build(buf)
					snap := buf[:min(n, dropHeadBytes)]
					if got, want := Summary(snap, layerOf(l2), n), c.want(); got != want {
						t.Fatalf("%d-byte packet, %d kept:\n got %q\nwant %q", n, len(snap), got, want)
					}
					checked++
				}
			}
		}
	}
	if checked < 12*2000 {
		t.Errorf("only %d packets checked", checked)
	}
}

func layerOf(l2 bool) packet.Layer {
	if l2 {
		return packet.L2
	}
	return packet.L3
}

// What was reported from outside: a 20-byte and a 1000-byte UDP
// datagram, dropped and sampled.
func TestSummaryOfADroppedDatagram(t *testing.T) {
	buf := make([]byte, 2048)
	for _, size := range []int{20, 1000} {
		n := packet.PutUDP(buf, netip.MustParseAddrPort("198.18.7.1:35638"), netip.MustParseAddrPort("198.18.9.9:5000"), make([]byte, size))
		want := fmt.Sprintf("IP 198.18.7.1.35638 > 198.18.9.9.5000: UDP, length %d", size)
		if got := Summary(buf[:min(n, dropHeadBytes)], packet.L3, n); got != want {
			t.Errorf("%d-byte datagram: %q, want %q", size, got, want)
		}
	}
}

// A header the snapshot cuts is marked as tcpdump marks it, with what
// came before it; a malformed packet is still reported as not parsed.
func TestSummaryTruncatedAndMalformed(t *testing.T) {
	buf := make([]byte, 4096)
	udp4 := buf[:packet.PutUDP(buf, netip.MustParseAddrPort("198.18.1.1:1000"), netip.MustParseAddrPort("198.18.2.1:53"), make([]byte, 1000))]
	udp4 = append([]byte(nil), udp4...)
	long4 := append([]byte(nil), udp4...)
	binary.BigEndian.PutUint16(long4[2:], uint16(len(long4)+1))
	ext6 := make([]byte, 40+16+8+100)
	packet.PutIPv6(ext6, netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), 0, 64, len(ext6)-40)
	ext6[40], ext6[41] = 60, 0 // hop-by-hop, 8 bytes, then destination options
	ext6[48], ext6[49] = packet.ProtoUDP, 0
	binary.BigEndian.PutUint16(ext6[56:], 7)
	binary.BigEndian.PutUint16(ext6[58:], 9)
	binary.BigEndian.PutUint16(ext6[60:], 108)
	frame := append(make([]byte, packet.EthernetHeaderLen), udp4...)
	packet.PutEthernet(frame, summaryDstMAC, summarySrcMAC, packet.EtherTypeIPv4)
	arp := make([]byte, packet.EthernetHeaderLen+packet.ARPLen)
	packet.PutEthernet(arp, packet.Broadcast, summarySrcMAC, packet.EtherTypeARP)
	packet.PutARP(arp[packet.EthernetHeaderLen:], packet.ARPRequest, summarySrcMAC, netip.MustParseAddr("198.18.1.1"), [6]byte{}, netip.MustParseAddr("198.18.1.2"))
	for _, c := range []struct {
		data   []byte
		layer  packet.Layer
		length int
		want   string
	}{
		{udp4[:0], packet.L3, len(udp4), "[|ip], length 1028"},
		{udp4[:10], packet.L3, len(udp4), "IP [|ip], length 1028"},
		{udp4[:24], packet.L3, len(udp4), "IP 198.18.1.1 > 198.18.2.1: UDP [|udp], ip length 1028"},
		{udp4[:28], packet.L3, len(udp4), "IP 198.18.1.1.1000 > 198.18.2.1.53: UDP, length 1000"},
		{ext6[:20], packet.L3, len(ext6), "IP6 [|ip6], length 164"},
		{ext6[:50], packet.L3, len(ext6), "IP6 2001:db8::1 > 2001:db8::2: [|ip6], ip length 164"},
		{ext6[:60], packet.L3, len(ext6), "IP6 2001:db8::1 > 2001:db8::2: UDP [|udp], ip length 164"},
		{ext6[:64], packet.L3, len(ext6), "IP6 2001:db8::1.7 > 2001:db8::2.9: UDP, length 100"},
		{frame[:10], packet.L2, len(frame), "[|ether], length 1042"},
		{frame[:20], packet.L2, len(frame), "02:00:00:00:00:0b > 02:00:00:00:00:0a, IP [|ip], length 1042"},
		{arp[:20], packet.L2, len(arp), "02:00:00:00:00:0b > ff:ff:ff:ff:ff:ff, ARP [|arp], length 42"},
		{arp, packet.L2, len(arp), "02:00:00:00:00:0b > ff:ff:ff:ff:ff:ff, ARP, Request who-has 198.18.1.2 tell 198.18.1.1"},
		// Malformed, whole or sampled: the IP length past the packet's.
		{long4, packet.L3, len(long4), fmt.Sprintf("1028 bytes, not parsed (INVALID_PROTO): %x", long4[:16])},
		{udp4[:100], packet.L3, len(udp4) - 1, fmt.Sprintf("1027 bytes, not parsed (INVALID_PROTO): %x", udp4[:16])},
		{nil, packet.L2, 0, "0 bytes, not parsed (PKT_TOO_SMALL): "},
	} {
		if got := Summary(c.data, c.layer, c.length); got != c.want {
			t.Errorf("%d of %d bytes: %q, want %q", len(c.data), c.length, got, c.want)
		}
	}
}

// FuzzSummary summarises any bytes, whole and sampled as a drop watch
// samples them: never a panic, and a sample that holds the headers reads
// as the whole packet does.
func FuzzSummary(f *testing.F) {
	buf := make([]byte, 2048)
	f.Add(buf[:packet.PutUDP(buf, netip.MustParseAddrPort("198.18.7.1:35638"), netip.MustParseAddrPort("198.18.9.9:5000"), make([]byte, 200))], false)
	f.Add(buf[:packet.PutUDP(buf, netip.MustParseAddrPort("[2001:db8::1]:1"), netip.MustParseAddrPort("[2001:db8::2]:2"), make([]byte, 150))], false)
	c := summaryCase{proto: packet.ProtoTCP, l2: true, payload: 100, tcpOpts: 40, src: netip.MustParseAddrPort("198.18.1.1:80"), dst: netip.MustParseAddrPort("198.18.2.2:4242")}
	f.Add(buf[:c.build(buf)], true)
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, data []byte, l2 bool) {
		layer := layerOf(l2)
		whole := Summary(data, layer, len(data))
		for _, keep := range []int{0, 1, 20, 40, dropHeadBytes} {
			if keep > len(data) {
				continue
			}
			sampled := Summary(data[:keep], layer, len(data))
			var h packet.Headers
			if ok, _ := packet.ParseSnapshot(data[:keep], len(data), layer, &h); ok && sampled != whole {
				t.Fatalf("%d of %d bytes: %q, the whole packet: %q", keep, len(data), sampled, whole)
			}
		}
		Summary(data, layer, len(data)+100000) // a length past what an IP header can say
	})
}
