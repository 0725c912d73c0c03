package vxlan

import (
	"encoding/binary"

	"softnet.dev/packet"
)

// flowHash hashes what identifies the flow of an inner Ethernet frame:
// its MAC addresses and, for IPv4 and IPv6, the addresses, the protocol
// and, for TCP, UDP and SCTP, the ports (not for IP fragments, whose
// later pieces carry none). The frames of one flow thus leave with one
// outer source port and stay in order across an ECMP underlay, while
// different flows spread over its paths (RFC 7348 section 5). FNV-1a:
// cheap, and spreading is all it has to do.
func flowHash(f []byte) uint32 {
	h := uint32(fnvBasis)
	mix := func(b []byte) {
		for _, x := range b {
			h ^= uint32(x)
			h *= 16777619
		}
	}
	mix(f[:12])
	off := 12
	et := binary.BigEndian.Uint16(f[12:14])
	if et == packet.EtherTypeVLAN && len(f) >= 18 {
		et, off = binary.BigEndian.Uint16(f[16:18]), 16
	}
	return ipFlowHash(h, et, f[off+2:])
}

// ipFlowHash continues hash h over what identifies the flow of the IP
// packet ip, of EtherType et; packets of a routed port (no Ethernet
// header) start from FNV-1a's offset basis.
func ipFlowHash(h uint32, et uint16, ip []byte) uint32 {
	mix := func(b []byte) {
		for _, x := range b {
			h ^= uint32(x)
			h *= 16777619
		}
	}
	var l4 []byte
	switch {
	case et == packet.EtherTypeIPv4 && len(ip) >= 20:
		ihl := int(ip[0]&0x0f) * 4
		mix(ip[9:10])
		mix(ip[12:20])
		fragment := binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0
		if !fragment && ihl >= 20 && len(ip) >= ihl {
			l4 = portsOf(ip[9], ip[ihl:])
		}
	case et == packet.EtherTypeIPv6 && len(ip) >= 40:
		mix(ip[6:7])
		mix(ip[8:40])
		l4 = portsOf(ip[6], ip[40:])
	}
	mix(l4)
	return h
}

const fnvBasis = 2166136261

// portsOf returns the source and destination ports of a transport
// header of protocol proto, or nil.
func portsOf(proto byte, l4 []byte) []byte {
	switch proto {
	case 6, 17, 132: // TCP, UDP, SCTP
		if len(l4) >= 4 {
			return l4[:4]
		}
	}
	return nil
}
