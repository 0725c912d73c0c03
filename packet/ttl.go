package packet

import "encoding/binary"

// DecrementTTL decrements the IPv4 TTL or IPv6 hop limit of the packet b,
// which h describes, in place, as a router does before forwarding, and
// keeps h.TTL in step. It returns false, changing nothing, if the TTL was
// already 1 or 0 (the caller drops the packet with drop.IPTTL and may send
// an ICMP time exceeded), if the packet is not IP, or if h does not fit b.
//
// The IPv4 header checksum is updated incrementally (RFC 1624) rather than
// recomputed, so the cost does not depend on the header's options.
func DecrementTTL(b []byte, h *Headers) bool {
	if h.L3Off < 0 || h.TTL <= 1 {
		return false
	}
	switch h.Proto {
	case EtherTypeIPv4:
		if len(b)-h.L3Off < IPv4HeaderLen {
			return false
		}
		ip := b[h.L3Off : h.L3Off+IPv4HeaderLen]
		if ip[8] <= 1 {
			return false
		}
		// The TTL is the high byte of the 16-bit word it shares with the
		// protocol. RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), which unlike
		// eqn. 2 never yields 0xffff where a full recomputation would
		// yield 0x0000.
		oldWord := binary.BigEndian.Uint16(ip[8:])
		newWord := oldWord - 0x0100
		oldSum := binary.BigEndian.Uint16(ip[10:])
		s := uint64(^oldSum) + uint64(^oldWord) + uint64(newWord)
		binary.BigEndian.PutUint16(ip[10:], ^fold(s))
		ip[8]--
		h.TTL = ip[8]
		return true
	case EtherTypeIPv6:
		if len(b)-h.L3Off < IPv6HeaderLen || b[h.L3Off+7] <= 1 {
			return false
		}
		b[h.L3Off+7]--
		h.TTL = b[h.L3Off+7]
		return true
	}
	return false
}
