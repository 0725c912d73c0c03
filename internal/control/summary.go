package control

import (
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"strings"

	"softnet.dev/drop"
	"softnet.dev/packet"
)

// Summary is a one-line decode of a packet's headers, in the manner of
// tcpdump's: "IP 198.18.1.1.1000 > 198.18.2.1.53: UDP, length 29". data
// may be the first bytes of the packet only (a snapshot); length is the
// whole packet's. As tcpdump does, it decodes the headers the snapshot
// holds, takes the lengths from them, and marks a header the snapshot
// cuts short with "[|proto]".
func Summary(data []byte, layer packet.Layer, length int) string {
	length = max(length, len(data))
	var h packet.Headers
	ok, reason := packet.ParseSnapshot(data, length, layer, &h)
	// A header cut short in a snapshot that is shorter than the packet is
	// cut by the snapshot, unless the whole IP packet is in the snapshot
	// (and what follows it is padding): then the packet is malformed.
	ipInSnapshot := h.Proto != 0 && h.L3Off+h.L3Len <= len(data)
	cut := !ok && reason == drop.HdrTrunc && len(data) < length && !ipInSnapshot
	var b strings.Builder
	if layer == packet.L2 && len(data) >= packet.EthernetHeaderLen {
		fmt.Fprintf(&b, "%s > %s, ", net.HardwareAddr(data[6:12]), net.HardwareAddr(data[0:6]))
	}
	switch {
	case cut && h.Proto == 0:
		// The network header, or the Ethernet header before it, is cut.
		fmt.Fprintf(&b, "%s, length %d", networkCut(data, layer, &h), length)
		return b.String()
	case !ok && !cut:
		n := min(len(data), 16)
		fmt.Fprintf(&b, "%d bytes, not parsed (%s): %x", length, reason, data[:n])
		return b.String()
	case h.Proto == packet.EtherTypeARP:
		switch h.ARPOp {
		case packet.ARPRequest:
			fmt.Fprintf(&b, "ARP, Request who-has %s tell %s", h.DstIP, h.SrcIP)
		case packet.ARPReply:
			fmt.Fprintf(&b, "ARP, Reply %s is-at %s", h.SrcIP, net.HardwareAddr(h.ARPSenderMAC[:]))
		default:
			fmt.Fprintf(&b, "ARP, op %d", h.ARPOp)
		}
		return b.String()
	case h.Proto == packet.EtherTypeIPv6:
		b.WriteString("IP6 ")
	default:
		b.WriteString("IP ")
	}
	endpoint := func(a fmt.Stringer, port uint16) string {
		if h.L4Off == 0 || (h.IPProto != packet.ProtoTCP && h.IPProto != packet.ProtoUDP) {
			return a.String()
		}
		return a.String() + "." + strconv.Itoa(int(port))
	}
	fmt.Fprintf(&b, "%s > %s: ", endpoint(h.SrcIP, h.SrcPort), endpoint(h.DstIP, h.DstPort))
	if cut {
		// The addresses are in; a transport or extension header is not.
		fmt.Fprintf(&b, "%s, ip length %d", transportCut(&h), h.L3Len)
		return b.String()
	}
	// The lengths are the headers': the snapshot may hold only the
	// first bytes of the payload.
	segment := h.L3Off + h.L3Len - h.L4Off // the transport header and its payload
	switch {
	case h.L4Off == 0 && h.Fragment:
		fmt.Fprintf(&b, "fragment, proto %d, length %d", h.IPProto, ipPayload(data, &h))
	case h.L4Off == 0:
		fmt.Fprintf(&b, "proto %d, length %d", h.IPProto, ipPayload(data, &h))
	case h.IPProto == packet.ProtoUDP:
		switch udpLen := int(binary.BigEndian.Uint16(data[h.L4Off+4:])); {
		case udpLen > segment:
			fmt.Fprintf(&b, "UDP, bad length %d > %d", udpLen-packet.UDPHeaderLen, segment-packet.UDPHeaderLen)
		case udpLen < packet.UDPHeaderLen:
			fmt.Fprintf(&b, "UDP, bad length %d", udpLen)
		default:
			fmt.Fprintf(&b, "UDP, length %d", udpLen-packet.UDPHeaderLen)
		}
	case h.IPProto == packet.ProtoTCP:
		dataOff := int(data[h.L4Off+12]>>4) * 4
		fmt.Fprintf(&b, "TCP, length %d", segment-dataOff)
	case h.IPProto == packet.ProtoICMP:
		fmt.Fprintf(&b, "ICMP type %d code %d, length %d", h.SrcPort, h.DstPort, segment)
	case h.IPProto == packet.ProtoICMPv6:
		fmt.Fprintf(&b, "ICMP6 type %d code %d, length %d", h.SrcPort, h.DstPort, segment)
	}
	return b.String()
}

// ipPayload is the length of what follows the IP header (IPv6: its
// fixed header), as the header says.
func ipPayload(data []byte, h *packet.Headers) int {
	if h.Proto == packet.EtherTypeIPv6 {
		return h.L3Len - packet.IPv6HeaderLen
	}
	return h.L3Len - int(data[h.L3Off]&0x0f)*4
}

// networkCut names the network header a snapshot cut, tcpdump's way.
func networkCut(data []byte, layer packet.Layer, h *packet.Headers) string {
	version := -1
	switch {
	case layer == packet.L2 && h.L3Off == 0:
		return "[|ether]" // the Ethernet header, or its VLAN tag
	case layer == packet.L2:
		switch h.EtherType {
		case packet.EtherTypeIPv4:
			version = 4
		case packet.EtherTypeIPv6:
			version = 6
		case packet.EtherTypeARP:
			return "ARP [|arp]"
		}
	case len(data) > 0:
		version = int(data[0] >> 4)
	}
	switch version {
	case 4:
		return "IP [|ip]"
	case 6:
		return "IP6 [|ip6]"
	}
	return "[|ip]"
}

// transportCut names the header after the IP header a snapshot cut.
func transportCut(h *packet.Headers) string {
	switch h.IPProto {
	case packet.ProtoUDP:
		return "UDP [|udp]"
	case packet.ProtoTCP:
		return "TCP [|tcp]"
	case packet.ProtoICMP:
		return "ICMP [|icmp]"
	case packet.ProtoICMPv6:
		return "ICMP6 [|icmp6]"
	}
	// The IPv6 extension headers: the walk did not reach the transport
	// protocol.
	return "[|ip6]"
}
