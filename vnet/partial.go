package vnet

import (
	"encoding/binary"

	"softnet.dev/packet"
)

// FinishPartial finishes the TCP or UDP checksum of a received packet
// that holds only its pseudo-header sum, and reports whether it did. A
// sender's checksum offload leaves packets that way (the kernel's
// CHECKSUM_PARTIAL) and a physical NIC finishes them on the way out;
// but where the metadata that says so is lost on the way (a veth
// underlay under VXLAN, an AF_XDP socket on a veth), nothing does, and
// the receiver would drop every one: the checksum offload trap that cost
// Flannel's users a minute per connection.
//
// A field that equals the pseudo-header sum is finished whatever it
// came from: the result depends only on the field's value, so a packet
// whose correct checksum happens to be that value keeps it. Only then
// is the packet's data summed; other packets cost a header parse. It
// does not allocate.
func FinishPartial(pkt []byte, layer packet.Layer) bool {
	var h packet.Headers
	if ok, _ := packet.Parse(pkt, layer, &h); !ok || h.Fragment || h.L4Off == 0 {
		return false
	}
	field := 0
	switch h.IPProto {
	case packet.ProtoTCP:
		field = 16
	case packet.ProtoUDP:
		field = 6
	default:
		return false
	}
	end := h.L3Off + h.L3Len
	if end > len(pkt) || h.L4Off+field+2 > end {
		return false
	}
	l4 := pkt[h.L4Off:end]
	got := binary.BigEndian.Uint16(l4[field:])
	if got == 0 && h.IPProto == packet.ProtoUDP {
		return false // no checksum (UDP over IPv4)
	}
	if uint32(got) != packet.PseudoHeaderChecksum(h.IPProto, h.SrcIP, h.DstIP, len(l4)) {
		return false
	}
	return FinishChecksum(Header{Flags: FlagNeedsCsum, CsumStart: uint16(h.L4Off), CsumOffset: uint16(field)}, pkt[:end])
}
