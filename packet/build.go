package packet

import (
	"encoding/binary"
	"net/netip"
)

const (
	defaultTTL = 64

	// A neighbour solicitation is sent with hop limit 255 so the receiver
	// can tell it was not forwarded (RFC 4861, section 7.1.1).
	ndpHopLimit                = 255
	icmpv6NeighborSolicitation = 135
	ndpOptionSourceLinkAddr    = 1
	ndpSolicitationLen         = 24 // ICMPv6 header, reserved, target
	ndpLinkAddrOptionLen       = 8
	arpHardwareEthernet        = 1
)

// NeighborSolicitationLen is the most PutICMPv6NeighborSolicitation writes.
const NeighborSolicitationLen = IPv6HeaderLen + ndpSolicitationLen + ndpLinkAddrOptionLen

// PutEthernet writes an untagged Ethernet header to b and returns
// EthernetHeaderLen.
func PutEthernet(b []byte, dst, src [6]byte, etherType uint16) int {
	_ = b[EthernetHeaderLen-1] // one bounds check, and the panic says why
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:], etherType)
	return EthernetHeaderLen
}

// PutIPv4 writes an IPv4 header without options for a payload of
// payloadLen bytes to b and returns IPv4HeaderLen. The header has ID 0 and
// DF set, as an unfragmentable packet may (RFC 6864), and a correct header
// checksum. src and dst must be IPv4 addresses and payloadLen at most
// 65535-IPv4HeaderLen.
func PutIPv4(b []byte, src, dst netip.Addr, proto uint8, ttl uint8, payloadLen int) int {
	hdr := b[:IPv4HeaderLen]
	hdr[0] = 4<<4 | IPv4HeaderLen/4
	hdr[1] = 0 // DSCP and ECN
	binary.BigEndian.PutUint16(hdr[2:], uint16(IPv4HeaderLen+payloadLen))
	binary.BigEndian.PutUint16(hdr[4:], 0) // ID
	binary.BigEndian.PutUint16(hdr[6:], ipv4DontFragment)
	hdr[8] = ttl
	hdr[9] = proto
	s, d := src.As4(), dst.As4()
	copy(hdr[12:16], s[:])
	copy(hdr[16:20], d[:])
	SetIPv4HeaderChecksum(hdr)
	return IPv4HeaderLen
}

// PutIPv6 writes an IPv6 header for a payload of payloadLen bytes to b and
// returns IPv6HeaderLen. Traffic class and flow label are 0. payloadLen
// must be at most 65535.
func PutIPv6(b []byte, src, dst netip.Addr, proto uint8, hopLimit uint8, payloadLen int) int {
	hdr := b[:IPv6HeaderLen]
	binary.BigEndian.PutUint32(hdr[0:], 6<<28)
	binary.BigEndian.PutUint16(hdr[4:], uint16(payloadLen))
	hdr[6] = proto
	hdr[7] = hopLimit
	s, d := src.As16(), dst.As16()
	copy(hdr[8:24], s[:])
	copy(hdr[24:40], d[:])
	return IPv6HeaderLen
}

// PutUDP writes an IP packet carrying a UDP datagram from src to dst with
// payload to b and returns its length. The IP header is IPv4 (TTL 64) if
// src is an IPv4 address and IPv6 (hop limit 64) otherwise; the UDP
// checksum is computed. payload may overlap b; in particular it may already
// be in place after the headers, which saves the copy's cost but not its
// correctness.
func PutUDP(b []byte, src, dst netip.AddrPort, payload []byte) int {
	ipLen := IPv6HeaderLen
	if src.Addr().Is4() {
		ipLen = IPv4HeaderLen
	}
	udpLen := UDPHeaderLen + len(payload)
	// Move the payload first: it may sit where the headers go.
	copy(b[ipLen+UDPHeaderLen:ipLen+udpLen], payload)
	udp := b[ipLen : ipLen+udpLen]
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	binary.BigEndian.PutUint16(udp[6:], 0)
	sum := Checksum(udp, PseudoHeaderChecksum(ProtoUDP, src.Addr(), dst.Addr(), udpLen))
	if sum == 0 {
		sum = 0xffff // 0 would mean "no checksum" (RFC 768)
	}
	binary.BigEndian.PutUint16(udp[6:], sum)
	if ipLen == IPv4HeaderLen {
		PutIPv4(b, src.Addr(), dst.Addr(), ProtoUDP, defaultTTL, udpLen)
	} else {
		PutIPv6(b, src.Addr(), dst.Addr(), ProtoUDP, defaultTTL, udpLen)
	}
	return ipLen + udpLen
}

// PutARP writes an ARP packet for Ethernet and IPv4 to b and returns
// ARPLen. senderIP and targetIP must be IPv4 addresses.
func PutARP(b []byte, op uint16, senderMAC [6]byte, senderIP netip.Addr, targetMAC [6]byte, targetIP netip.Addr) int {
	arp := b[:ARPLen]
	binary.BigEndian.PutUint16(arp[0:], arpHardwareEthernet)
	binary.BigEndian.PutUint16(arp[2:], EtherTypeIPv4)
	arp[4] = 6 // hardware address length
	arp[5] = 4 // protocol address length
	binary.BigEndian.PutUint16(arp[6:], op)
	s, t := senderIP.As4(), targetIP.As4()
	copy(arp[8:14], senderMAC[:])
	copy(arp[14:18], s[:])
	copy(arp[18:24], targetMAC[:])
	copy(arp[24:28], t[:])
	return ARPLen
}

// PutICMPv6NeighborSolicitation writes an IPv6 packet asking for the link
// address of target to b and returns its length, at most
// NeighborSolicitationLen. It goes from src to target's solicited-node
// multicast address, which the Ethernet header should address as
// MulticastMAC of that address. The source link-layer address option
// carries srcMAC, except when src is the unspecified address (duplicate
// address detection), where RFC 4861 forbids it.
func PutICMPv6NeighborSolicitation(b []byte, src, target netip.Addr, srcMAC [6]byte) int {
	icmpLen := ndpSolicitationLen
	if !src.IsUnspecified() {
		icmpLen += ndpLinkAddrOptionLen
	}
	dst := SolicitedNodeMulticast(target)
	PutIPv6(b, src, dst, ProtoICMPv6, ndpHopLimit, icmpLen)
	icmp := b[IPv6HeaderLen : IPv6HeaderLen+icmpLen]
	icmp[0] = icmpv6NeighborSolicitation
	icmp[1] = 0                             // code
	binary.BigEndian.PutUint16(icmp[2:], 0) // checksum, set below
	binary.BigEndian.PutUint32(icmp[4:], 0) // reserved
	t := target.As16()
	copy(icmp[8:24], t[:])
	if icmpLen > ndpSolicitationLen {
		opt := icmp[ndpSolicitationLen:]
		opt[0] = ndpOptionSourceLinkAddr
		opt[1] = ndpLinkAddrOptionLen / 8 // in units of 8 bytes
		copy(opt[2:8], srcMAC[:])
	}
	sum := Checksum(icmp, PseudoHeaderChecksum(ProtoICMPv6, src, dst, icmpLen))
	binary.BigEndian.PutUint16(icmp[2:], sum)
	return IPv6HeaderLen + icmpLen
}

// SolicitedNodeMulticast returns the solicited-node multicast address of
// the IPv6 address addr, ff02::1:ffXX:XXXX with addr's low 24 bits (RFC
// 4291, section 2.7.1), or the zero Addr if addr is not IPv6.
func SolicitedNodeMulticast(addr netip.Addr) netip.Addr {
	if !addr.Is6() {
		return netip.Addr{}
	}
	a := addr.As16()
	return netip.AddrFrom16([16]byte{
		0xff, 0x02, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0x01, 0xff, a[13], a[14], a[15],
	})
}

// MulticastMAC returns the Ethernet address that frames to the multicast
// group ip are sent to: 33:33 and the low 32 bits for IPv6 (RFC 2464),
// 01:00:5e and the low 23 bits for IPv4 (RFC 1112). It returns the zero
// address for the zero Addr.
func MulticastMAC(ip netip.Addr) [6]byte {
	switch {
	case ip.Is4():
		a := ip.As4()
		return [6]byte{0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]}
	case ip.Is6():
		a := ip.As16()
		return [6]byte{0x33, 0x33, a[12], a[13], a[14], a[15]}
	}
	return [6]byte{}
}
