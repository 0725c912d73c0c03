package vxlan

import (
	"encoding/binary"

	"softnet.dev/packet"
)

// ICMP messages that tell a sender its packet does not fit the path.
const (
	icmpDestUnreach   = 3 // code 4: fragmentation needed and DF set
	icmpFragNeeded    = 4
	icmp6PacketTooBig = 2
	// What an ICMP error quotes at most: the packet must fit IPv4's
	// minimum reassembly size (RFC 1812 4.3.2.3) or IPv6's minimum MTU
	// (RFC 4443 2.4).
	icmpMaxLen  = 576
	icmp6MaxLen = 1280
	// tooBigRoom is the buffer room an error needs: the larger, IPv6's,
	// with its Ethernet header.
	tooBigRoom = 14 + icmp6MaxLen
)

// tooBig decides what to do with an inner frame f (or a routed port's
// IP packet, by layer) that is longer than the overlay carries whole,
// for an inner IP MTU of mtu. It reports
// whether to drop it, and writes into dst (at least tooBigRoom bytes)
// the ICMP error toward its sender, returning the error's length (0 for
// none). As the kernel's tunnels do (iptunnel_pmtud_build_icmp), the
// error comes from the packet's destination, so the sender's path MTU
// to it adapts: "fragmentation needed" for an IPv4 packet with DF,
// "packet too big" for IPv6. An IPv4 packet without DF, and what is not
// IP, is not dropped: the outer packet is fragmented instead. No error
// answers an ICMP error, a later fragment, or a group or unspecified
// source.
func tooBig(dst, f []byte, mtu int, layer packet.Layer) (bool, int) {
	var h packet.Headers
	if ok, _ := packet.Parse(f, layer, &h); !ok || h.L3Len <= mtu {
		return false, 0
	}
	v4 := h.Proto == packet.EtherTypeIPv4
	switch {
	case v4 && f[h.L3Off+6]&0x40 == 0: // no DF
		return false, 0
	case !v4 && h.Proto != packet.EtherTypeIPv6:
		return false, 0
	case h.Fragment && h.L4Off == 0, isICMPError(&h), !h.SrcIP.IsGlobalUnicast() && !h.SrcIP.IsLinkLocalUnicast(), h.Src[0]&1 != 0:
		return true, 0
	}
	ip := f[h.L3Off:min(h.L3Off+h.L3Len, len(f))]
	n := 0
	if layer == packet.L2 {
		n = packet.PutEthernet(dst, h.Src, h.Dst, h.Proto)
	}
	if v4 {
		quote := ip[:min(len(ip), icmpMaxLen-packet.IPv4HeaderLen-packet.ICMPHeaderLen)]
		n += packet.PutIPv4(dst[n:], h.DstIP, h.SrcIP, packet.ProtoICMP, 64, packet.ICMPHeaderLen+len(quote))
		icmp := dst[n : n+packet.ICMPHeaderLen+len(quote)]
		icmp[0], icmp[1] = icmpDestUnreach, icmpFragNeeded
		binary.BigEndian.PutUint32(icmp[2:], 0) // checksum and unused
		binary.BigEndian.PutUint16(icmp[6:], uint16(mtu))
		copy(icmp[packet.ICMPHeaderLen:], quote)
		binary.BigEndian.PutUint16(icmp[2:], packet.Checksum(icmp, 0))
		return true, n + len(icmp)
	}
	quote := ip[:min(len(ip), icmp6MaxLen-packet.IPv6HeaderLen-packet.ICMPHeaderLen)]
	n += packet.PutIPv6(dst[n:], h.DstIP, h.SrcIP, packet.ProtoICMPv6, 64, packet.ICMPHeaderLen+len(quote))
	icmp := dst[n : n+packet.ICMPHeaderLen+len(quote)]
	icmp[0], icmp[1] = icmp6PacketTooBig, 0
	binary.BigEndian.PutUint16(icmp[2:], 0)
	binary.BigEndian.PutUint32(icmp[4:], uint32(mtu))
	copy(icmp[packet.ICMPHeaderLen:], quote)
	binary.BigEndian.PutUint16(icmp[2:], packet.Checksum(icmp, packet.PseudoHeaderChecksum(packet.ProtoICMPv6, h.DstIP, h.SrcIP, len(icmp))))
	return true, n + len(icmp)
}

// isICMPError says whether the packet is an ICMP or ICMPv6 error, which
// no error may answer (RFC 1122 3.2.2, RFC 4443 2.4).
func isICMPError(h *packet.Headers) bool {
	typ := byte(h.SrcPort) // the parser puts ICMP's type there
	switch h.IPProto {
	case packet.ProtoICMP:
		return typ != 0 && typ != 8 && typ != 13 && typ != 14 && typ != 17 && typ != 18 // not an echo, timestamp or mask message
	case packet.ProtoICMPv6:
		return typ < 128
	}
	return false
}
