package control

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"softnet.dev/packet"
)

// Summary is a one-line decode of a packet's headers, in the manner of
// tcpdump's: "IP 198.18.1.1.1000 > 198.18.2.1.53: UDP, length 29". data
// may be the first bytes of the packet only; length is the whole
// packet's.
func Summary(data []byte, layer packet.Layer, length int) string {
	var h packet.Headers
	ok, reason := packet.Parse(data, layer, &h)
	var b strings.Builder
	if layer == packet.L2 && len(data) >= packet.EthernetHeaderLen {
		fmt.Fprintf(&b, "%s > %s, ", net.HardwareAddr(h.Src[:]), net.HardwareAddr(h.Dst[:]))
	}
	if !ok {
		n := min(len(data), 16)
		fmt.Fprintf(&b, "%d bytes, not parsed (%s): %x", length, reason, data[:n])
		return b.String()
	}
	switch h.Proto {
	case packet.EtherTypeARP:
		switch h.ARPOp {
		case packet.ARPRequest:
			fmt.Fprintf(&b, "ARP, Request who-has %s tell %s", h.DstIP, h.SrcIP)
		case packet.ARPReply:
			fmt.Fprintf(&b, "ARP, Reply %s is-at %s", h.SrcIP, net.HardwareAddr(h.ARPSenderMAC[:]))
		default:
			fmt.Fprintf(&b, "ARP, op %d", h.ARPOp)
		}
		return b.String()
	case packet.EtherTypeIPv6:
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
	payload := h.L3Off + h.L3Len - h.L4Off
	switch {
	case h.L4Off == 0 && h.Fragment:
		fmt.Fprintf(&b, "fragment, proto %d, length %d", h.IPProto, length)
	case h.IPProto == packet.ProtoUDP:
		fmt.Fprintf(&b, "UDP, length %d", payload-packet.UDPHeaderLen)
	case h.IPProto == packet.ProtoTCP:
		fmt.Fprintf(&b, "TCP, length %d", length-h.L4Off)
	case h.IPProto == packet.ProtoICMP:
		fmt.Fprintf(&b, "ICMP type %d code %d, length %d", h.SrcPort, h.DstPort, payload)
	case h.IPProto == packet.ProtoICMPv6:
		fmt.Fprintf(&b, "ICMP6 type %d code %d, length %d", h.SrcPort, h.DstPort, payload)
	default:
		fmt.Fprintf(&b, "proto %d, length %d", h.IPProto, length)
	}
	return b.String()
}
