package vxlan

import (
	"encoding/binary"

	"softnet.dev/packet"
	"softnet.dev/vnet"
)

// finishPartial finishes the TCP or UDP checksum of a received inner
// frame that holds only its pseudo-header sum, and reports whether it
// did. A sender's checksum offload leaves frames that way (the kernel's
// CHECKSUM_PARTIAL), and a physical NIC finishes them on the way out;
// but over a veth underlay nothing does, and a kernel vxlan peer with
// transmit checksum offload on delivers them to this port's socket
// unfinished. The guest would drop every one: the checksum offload trap
// that cost Flannel's users a minute per connection.
//
// A field that equals the pseudo-header sum is finished whatever it
// came from: the result depends only on the field's value, so a frame
// whose correct checksum happens to be that value keeps it. Only then
// is the frame's data summed; other frames cost a header parse.
func finishPartial(f []byte) bool {
	var h packet.Headers
	if ok, _ := packet.Parse(f, packet.L2, &h); !ok || h.Fragment || h.L4Off == 0 {
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
	if end > len(f) || h.L4Off+field+2 > end {
		return false
	}
	l4 := f[h.L4Off:end]
	got := binary.BigEndian.Uint16(l4[field:])
	if got == 0 && h.IPProto == packet.ProtoUDP {
		return false // no checksum (UDP over IPv4)
	}
	if uint32(got) != packet.PseudoHeaderChecksum(h.IPProto, h.SrcIP, h.DstIP, len(l4)) {
		return false
	}
	return vnet.FinishChecksum(vnet.Header{Flags: vnet.FlagNeedsCsum, CsumStart: uint16(h.L4Off), CsumOffset: uint16(field)}, f[:end])
}
