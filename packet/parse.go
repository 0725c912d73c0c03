package packet

import (
	"encoding/binary"
	"net/netip"

	"softnet.dev/drop"
)

// EtherType values of the protocols Parse understands. Headers.Proto uses
// them for the network protocol even when parsing starts at L3.
const (
	EtherTypeIPv4 uint16 = 0x0800
	EtherTypeARP  uint16 = 0x0806
	EtherTypeVLAN uint16 = 0x8100 // 802.1Q tag
	EtherTypeIPv6 uint16 = 0x86DD
)

// IP protocol numbers (IPv4 protocol, IPv6 next header) of the transport
// protocols Parse understands.
const (
	ProtoICMP   uint8 = 1
	ProtoTCP    uint8 = 6
	ProtoUDP    uint8 = 17
	ProtoICMPv6 uint8 = 58
)

// ARP operations.
const (
	ARPRequest uint16 = 1
	ARPReply   uint16 = 2
)

// Header sizes, for sizing buffers and checking offsets.
const (
	EthernetHeaderLen = 14
	VLANTagLen        = 4
	IPv4HeaderLen     = 20 // without options
	IPv6HeaderLen     = 40
	UDPHeaderLen      = 8
	TCPHeaderLen      = 20 // without options
	ICMPHeaderLen     = 8  // type, code, checksum and the 4-byte rest of header
	ARPLen            = 28 // ARP for Ethernet and IPv4
)

// Broadcast is the Ethernet broadcast address.
var Broadcast = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// IPv6 extension headers that Parse steps over to find the transport
// protocol. Other next-header values (AH, ESP, no next header, ...) end the
// walk and are reported as the transport protocol.
const (
	ipv6HopByHop    uint8 = 0
	ipv6Routing     uint8 = 43
	ipv6Fragment    uint8 = 44
	ipv6DestOptions uint8 = 60
)

const (
	ipv4MoreFragments  = 0x2000
	ipv4DontFragment   = 0x4000
	ipv4FragOffsetMask = 0x1fff
	ipv6ExtUnit        = 8 // extension header lengths count 8-byte units
	ipv6FragHeaderLen  = 8
	arpHeaderFixedLen  = 8 // up to and including the operation
	vlanIDMask         = 0x0fff
)

// Layer says where in a packet Parse starts.
type Layer uint8

const (
	L2 Layer = iota // an Ethernet frame, as read from a TAP device
	L3              // a bare IP packet, as read from a TUN device
)

// Headers holds the fields of one parsed packet. Offsets index the slice
// that was parsed. Parse overwrites every field, so one Headers can be
// reused for every packet of a batch.
type Headers struct {
	// Ethernet; zero when parsing started at L3.
	Dst, Src  [6]byte // destination and source MAC addresses
	EtherType uint16  // after at most one 802.1Q tag
	VLAN      uint16  // VLAN ID of the 802.1Q tag, 0 if untagged
	L3Off     int     // offset of the network header

	// Network.
	Proto        uint16     // EtherTypeIPv4, EtherTypeIPv6 or EtherTypeARP
	SrcIP, DstIP netip.Addr // for ARP: the sender and target addresses
	IPProto      uint8      // transport protocol, after IPv6 extension headers
	TTL          uint8      // IPv4 TTL or IPv6 hop limit
	L3Len        int        // IPv4 total length, IPv6 40+payload length, ARPLen for ARP
	Fragment     bool       // IPv4 MF or offset != 0, or any IPv6 fragment header

	// Transport. L4Off is 0 when no transport header was parsed: an
	// unknown protocol, or a fragment other than the first.
	L4Off            int
	SrcPort, DstPort uint16 // UDP and TCP ports; ICMP and ICMPv6 type and code

	// ARP.
	ARPOp                      uint16
	ARPSenderMAC, ARPTargetMAC [6]byte
}

// Reset clears every field.
func (h *Headers) Reset() { *h = Headers{} }

// Parse parses the headers of b, starting at layer from, into h.
//
// On success it returns ok == true and reason is meaningless. Otherwise
// reason says why b should be dropped (docs/design.md, "Parsing packets") and
// h holds whatever was parsed before the failure. An unknown Layer reports
// drop.NotSpecified.
func Parse(b []byte, from Layer, h *Headers) (ok bool, reason drop.Reason) {
	return parse(b, len(b), from, h)
}

// ParseSnapshot parses snap, the first bytes of a packet of length bytes
// (what a capture or a drop sample keeps of it), as Parse would parse the
// whole packet: lengths are judged against length and taken from the
// headers, so h.L3Len may reach past the end of snap. A header that snap
// cuts short is reported as drop.HdrTrunc, with h holding what came
// before it; a length shorter than snap counts as len(snap).
func ParseSnapshot(snap []byte, length int, from Layer, h *Headers) (ok bool, reason drop.Reason) {
	return parse(snap, max(length, len(snap)), from, h)
}

// parse parses b, the first bytes of a packet of wire >= len(b) bytes.
// Reads are bounded by b, lengths by wire.
func parse(b []byte, wire int, from Layer, h *Headers) (bool, drop.Reason) {
	h.Reset()
	switch from {
	case L2:
		return h.parseEthernet(b, wire)
	case L3:
		if len(b) == 0 {
			return false, truncated(wire > 0)
		}
		// A TUN device carries no EtherType: the version nibble is the
		// only hint of what follows.
		switch b[0] >> 4 {
		case 4:
			return h.parseIPv4(b, wire, 0)
		case 6:
			return h.parseIPv6(b, wire, 0)
		}
		return false, drop.InvalidProto
	}
	return false, drop.NotSpecified
}

// truncated is the reason for a packet too short for its first header:
// the snapshot's (HdrTrunc) if the packet itself was long enough.
func truncated(snapshotCut bool) drop.Reason {
	if snapshotCut {
		return drop.HdrTrunc
	}
	return drop.PktTooSmall
}

func (h *Headers) parseEthernet(b []byte, wire int) (bool, drop.Reason) {
	if len(b) < EthernetHeaderLen {
		return false, truncated(wire >= EthernetHeaderLen)
	}
	h.Dst = [6]byte(b[0:6])
	h.Src = [6]byte(b[6:12])
	etherType := be16(b[12:])
	off := EthernetHeaderLen
	if etherType == EtherTypeVLAN {
		if len(b) < EthernetHeaderLen+VLANTagLen {
			return false, drop.HdrTrunc
		}
		h.VLAN = be16(b[14:]) & vlanIDMask
		etherType = be16(b[16:])
		off += VLANTagLen
	}
	h.EtherType = etherType
	h.L3Off = off
	switch etherType {
	case EtherTypeIPv4:
		return h.parseIPv4(b, wire, off)
	case EtherTypeIPv6:
		return h.parseIPv6(b, wire, off)
	case EtherTypeARP:
		return h.parseARP(b, off)
	}
	// Includes a second VLAN tag: one tag is all a port may add.
	return false, drop.UnhandledProto
}

func (h *Headers) parseIPv4(b []byte, wire, off int) (bool, drop.Reason) {
	ip := b[off:]
	if len(ip) < IPv4HeaderLen {
		return false, drop.HdrTrunc
	}
	if ip[0]>>4 != 4 {
		return false, drop.InvalidProto
	}
	hdrLen := int(ip[0]&0x0f) * 4
	if hdrLen < IPv4HeaderLen {
		return false, drop.InvalidProto
	}
	if len(ip) < hdrLen {
		return false, drop.HdrTrunc
	}
	totalLen := int(be16(ip[2:]))
	if totalLen < hdrLen || totalLen > wire-off {
		return false, drop.InvalidProto
	}
	h.Proto = EtherTypeIPv4
	h.L3Off = off
	h.L3Len = totalLen
	h.TTL = ip[8]
	h.IPProto = ip[9]
	h.SrcIP = netip.AddrFrom4([4]byte(ip[12:16]))
	h.DstIP = netip.AddrFrom4([4]byte(ip[16:20]))
	frag := be16(ip[6:])
	h.Fragment = frag&(ipv4MoreFragments|ipv4FragOffsetMask) != 0
	if frag&ipv4FragOffsetMask != 0 {
		// Only the first fragment carries the transport header.
		return true, drop.NotSpecified
	}
	// The transport header must fit in the IP packet, not merely in the
	// buffer, whose tail may be Ethernet padding.
	end := off + totalLen
	return h.parseTransport(b[:min(end, len(b))], off+hdrLen, end)
}

func (h *Headers) parseIPv6(b []byte, wire, off int) (bool, drop.Reason) {
	ip := b[off:]
	if len(ip) < IPv6HeaderLen {
		return false, drop.HdrTrunc
	}
	if ip[0]>>4 != 6 {
		return false, drop.InvalidProto
	}
	totalLen := IPv6HeaderLen + int(be16(ip[4:]))
	if totalLen > wire-off {
		return false, drop.InvalidProto
	}
	h.Proto = EtherTypeIPv6
	h.L3Off = off
	h.L3Len = totalLen
	h.TTL = ip[7]
	h.SrcIP = netip.AddrFrom16([16]byte(ip[8:24]))
	h.DstIP = netip.AddrFrom16([16]byte(ip[24:40]))

	end := off + totalLen
	pkt := b[:min(end, len(b))]
	next := ip[6]
	l4Off := off + IPv6HeaderLen
	// Each extension header is at least 8 bytes long and must fit in the
	// packet, so the walk ends within len(pkt)/8 steps whatever the input.
	for {
		switch next {
		case ipv6HopByHop, ipv6Routing, ipv6DestOptions:
			if len(pkt)-l4Off < ipv6ExtUnit {
				return false, drop.HdrTrunc
			}
			extLen := (int(pkt[l4Off+1]) + 1) * ipv6ExtUnit
			if len(pkt)-l4Off < extLen {
				return false, drop.HdrTrunc
			}
			next = pkt[l4Off]
			l4Off += extLen
		case ipv6Fragment:
			if len(pkt)-l4Off < ipv6FragHeaderLen {
				return false, drop.HdrTrunc
			}
			h.Fragment = true
			fragOffset := be16(pkt[l4Off+2:]) >> 3
			next = pkt[l4Off]
			l4Off += ipv6FragHeaderLen
			if fragOffset != 0 {
				h.IPProto = next
				return true, drop.NotSpecified
			}
		default:
			h.IPProto = next
			return h.parseTransport(pkt, l4Off, end)
		}
	}
}

// parseTransport parses the transport header at l4Off; the IP packet ends
// at end, pkt where it or the snapshot ends.
func (h *Headers) parseTransport(pkt []byte, l4Off, end int) (bool, drop.Reason) {
	l4 := pkt[l4Off:]
	switch h.IPProto {
	case ProtoUDP:
		if len(l4) < UDPHeaderLen {
			return false, drop.HdrTrunc
		}
		h.SrcPort, h.DstPort = be16(l4[0:]), be16(l4[2:])
	case ProtoTCP:
		if len(l4) < TCPHeaderLen {
			return false, drop.HdrTrunc
		}
		dataOff := int(l4[12]>>4) * 4
		if dataOff < TCPHeaderLen || dataOff > end-l4Off {
			return false, drop.InvalidProto
		}
		h.SrcPort, h.DstPort = be16(l4[0:]), be16(l4[2:])
	case ProtoICMP, ProtoICMPv6:
		// ICMP belongs to IPv4 and ICMPv6 to IPv6; the other pairing is
		// some unknown use of the number and is left unparsed.
		if (h.IPProto == ProtoICMP) != (h.Proto == EtherTypeIPv4) {
			return true, drop.NotSpecified
		}
		if len(l4) < ICMPHeaderLen {
			return false, drop.HdrTrunc
		}
		h.SrcPort, h.DstPort = uint16(l4[0]), uint16(l4[1])
	default:
		return true, drop.NotSpecified
	}
	h.L4Off = l4Off
	return true, drop.NotSpecified
}

func (h *Headers) parseARP(b []byte, off int) (bool, drop.Reason) {
	arp := b[off:]
	if len(arp) < arpHeaderFixedLen {
		return false, drop.HdrTrunc
	}
	// Only ARP that maps IPv4 addresses to 6-byte MACs makes sense on an
	// Ethernet switch; the sizes also fix where the addresses are.
	if be16(arp[2:]) != EtherTypeIPv4 || arp[4] != 6 || arp[5] != 4 {
		return false, drop.InvalidProto
	}
	if len(arp) < ARPLen {
		return false, drop.HdrTrunc
	}
	h.Proto = EtherTypeARP
	h.L3Off = off
	h.L3Len = ARPLen
	h.ARPOp = be16(arp[6:])
	h.ARPSenderMAC = [6]byte(arp[8:14])
	h.SrcIP = netip.AddrFrom4([4]byte(arp[14:18]))
	h.ARPTargetMAC = [6]byte(arp[18:24])
	h.DstIP = netip.AddrFrom4([4]byte(arp[24:28]))
	return true, drop.NotSpecified
}

func be16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }
