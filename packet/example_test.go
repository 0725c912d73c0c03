package packet_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"softnet.dev/packet"
)

// A switch port parses each frame once and forwards or drops it on what
// it finds.
func ExampleParse() {
	guest := [6]byte{0x02, 0, 0, 0, 0, 0x01}
	router := [6]byte{0x02, 0, 0, 0, 0, 0xfe}
	frame := make([]byte, 128)
	n := packet.PutEthernet(frame, router, guest, packet.EtherTypeIPv4)
	n += packet.PutUDP(frame[n:], netip.MustParseAddrPort("10.0.0.1:5353"),
		netip.MustParseAddrPort("10.0.0.2:53"), []byte("query"))
	frame = frame[:n]

	var h packet.Headers
	if ok, reason := packet.Parse(frame, packet.L2, &h); !ok {
		fmt.Println("drop:", reason)
		return
	}
	fmt.Printf("%v:%d > %v:%d, IP protocol %d, TTL %d\n", h.SrcIP, h.SrcPort, h.DstIP, h.DstPort, h.IPProto, h.TTL)
	fmt.Println("IP at", h.L3Off, "length", h.L3Len, "UDP at", h.L4Off)
	fmt.Println("UDP checksum OK:", packet.TransportChecksumOK(frame, &h))

	_, reason := packet.Parse(frame[:30], packet.L2, &h)
	fmt.Println("first 30 bytes:", reason)
	_, reason = packet.Parse(frame[packet.EthernetHeaderLen:], packet.L3, &h)
	fmt.Println("without Ethernet, from L3: UDP at", h.L4Off, reason)
	// Output:
	// 10.0.0.1:5353 > 10.0.0.2:53, IP protocol 17, TTL 64
	// IP at 14 length 33 UDP at 34
	// UDP checksum OK: true
	// first 30 bytes: HDR_TRUNC
	// without Ethernet, from L3: UDP at 20 NOT_SPECIFIED
}

// The checksum of a region with its checksum field zeroed goes into the
// field; the checksum of the region with the field filled in is then 0.
func ExampleChecksum() {
	ipHeader := []byte{
		0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
		0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
	}
	sum := packet.Checksum(ipHeader, 0)
	binary.BigEndian.PutUint16(ipHeader[10:], sum)
	fmt.Printf("header checksum %#04x, verifies to %#04x\n", sum, packet.Checksum(ipHeader, 0))

	// UDP and TCP start from the pseudo-header sum.
	src, dst := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	udp := []byte{0x13, 0x88, 0x00, 0x35, 0x00, 0x0a, 0x00, 0x00, 'h', 'i'}
	pseudo := packet.PseudoHeaderChecksum(packet.ProtoUDP, src, dst, len(udp))
	binary.BigEndian.PutUint16(udp[6:], packet.Checksum(udp, pseudo))
	fmt.Printf("UDP checksum %#04x, verifies to %#04x\n", binary.BigEndian.Uint16(udp[6:]), packet.Checksum(udp, pseudo))
	// Output:
	// header checksum 0xb861, verifies to 0x0000
	// UDP checksum 0x89af, verifies to 0x0000
}

func ExampleDecrementTTL() {
	pkt := make([]byte, 64)
	pkt = pkt[:packet.PutUDP(pkt, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("198.51.100.1:2"), nil)]
	var h packet.Headers
	packet.Parse(pkt, packet.L3, &h)
	for packet.DecrementTTL(pkt, &h) {
		if h.TTL%20 == 0 {
			fmt.Println("TTL", h.TTL, "header checksum OK:", packet.IPv4HeaderChecksumOK(pkt))
		}
	}
	fmt.Println("expired at TTL", h.TTL)
	// Output:
	// TTL 60 header checksum OK: true
	// TTL 40 header checksum OK: true
	// TTL 20 header checksum OK: true
	// expired at TTL 1
}

// An ARP request is broadcast; the reply comes back to the asker.
func ExamplePutARP() {
	mac := [6]byte{0x02, 0, 0, 0, 0, 0x01}
	frame := make([]byte, packet.EthernetHeaderLen+packet.ARPLen)
	n := packet.PutEthernet(frame, packet.Broadcast, mac, packet.EtherTypeARP)
	packet.PutARP(frame[n:], packet.ARPRequest, mac, netip.MustParseAddr("10.0.0.1"), [6]byte{}, netip.MustParseAddr("10.0.0.2"))

	var h packet.Headers
	packet.Parse(frame, packet.L2, &h)
	fmt.Printf("op %d: who has %v? tell %v at %x\n", h.ARPOp, h.DstIP, h.SrcIP, h.ARPSenderMAC)
	// Output:
	// op 1: who has 10.0.0.2? tell 10.0.0.1 at 020000000001
}

// Neighbour discovery asks the target's solicited-node group, which maps
// to an Ethernet multicast address.
func ExamplePutICMPv6NeighborSolicitation() {
	mac := [6]byte{0x02, 0, 0, 0, 0, 0x01}
	target := netip.MustParseAddr("fe80::a8bb:ccff:fedd:eeff")
	group := packet.SolicitedNodeMulticast(target)

	frame := make([]byte, packet.EthernetHeaderLen+packet.NeighborSolicitationLen)
	n := packet.PutEthernet(frame, packet.MulticastMAC(group), mac, packet.EtherTypeIPv6)
	n += packet.PutICMPv6NeighborSolicitation(frame[n:], netip.MustParseAddr("fe80::1"), target, mac)

	var h packet.Headers
	packet.Parse(frame[:n], packet.L2, &h)
	fmt.Printf("to %v (%x), ICMPv6 type %d, hop limit %d, checksum OK: %v\n",
		h.DstIP, h.Dst, h.SrcPort, h.TTL, packet.TransportChecksumOK(frame[:n], &h))
	// Output:
	// to ff02::1:ffdd:eeff (3333ffddeeff), ICMPv6 type 135, hop limit 255, checksum OK: true
}

func ExampleMulticastMAC() {
	for _, group := range []string{"224.0.0.251", "ff02::fb"} {
		fmt.Printf("%s -> %x\n", group, packet.MulticastMAC(netip.MustParseAddr(group)))
	}
	// Output:
	// 224.0.0.251 -> 01005e0000fb
	// ff02::fb -> 3333000000fb
}
