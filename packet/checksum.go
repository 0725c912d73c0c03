package packet

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// Checksum returns the Internet checksum (RFC 1071) of b, with initial
// added to the sum: the ones' complement of the ones' complement sum of b's
// 16-bit big-endian words (an odd last byte is padded with a zero) and
// initial. initial is a partial sum, such as PseudoHeaderChecksum returns,
// or 0.
//
// The result is what goes into a checksum field that was zero while it was
// computed, and a region that includes a correct checksum field checks to
// 0. To continue a sum over a second region, pass uint32(^Checksum(first,
// initial)) as its initial value; the first region must then have an even
// length, or the second one's bytes would land in the wrong halves of the
// words.
func Checksum(b []byte, initial uint32) uint16 {
	// The sum is taken over little-endian words, which is a plain load on
	// most machines; byte-swapping a ones' complement sum gives the sum of
	// the byte-swapped words (RFC 1071, section 2(B)), so one swap at the
	// end makes it big-endian.
	s := bits.ReverseBytes16(fold(sumLittleEndian(b)))
	return ^fold(uint64(s) + uint64(initial))
}

// sumLittleEndian returns the ones' complement sum of b as 64-bit
// little-endian words, with the carries out of bit 63 added back in. Since
// 2^16 is 1 modulo 2^16-1, folding it to 16 bits gives the sum of b's
// 16-bit little-endian words. Starting each word at an offset that is a
// multiple of 8 keeps every byte in the half of the word its offset parity
// asks for, whatever the alignment of b in memory.
func sumLittleEndian(b []byte) uint64 {
	// Each block is one add-with-carry chain that starts from no carry,
	// so the chain lives in the flags register and only its final carry
	// is kept, in a separate counter (at most one per 8 bytes, so it cannot
	// overflow). Carrying one chain across iterations was measured at half
	// this speed (the carry goes through a general register every time),
	// and summing 32-bit halves into a 64-bit accumulator at three
	// quarters.
	var sum, carries uint64
	for len(b) >= 64 {
		var c uint64
		sum, c = bits.Add64(sum, binary.LittleEndian.Uint64(b[0:8]), 0)
		sum, c = bits.Add64(sum, binary.LittleEndian.Uint64(b[8:16]), c)
		sum, c = bits.Add64(sum, binary.LittleEndian.Uint64(b[16:24]), c)
		sum, c = bits.Add64(sum, binary.LittleEndian.Uint64(b[24:32]), c)
		sum, c = bits.Add64(sum, binary.LittleEndian.Uint64(b[32:40]), c)
		sum, c = bits.Add64(sum, binary.LittleEndian.Uint64(b[40:48]), c)
		sum, c = bits.Add64(sum, binary.LittleEndian.Uint64(b[48:56]), c)
		sum, c = bits.Add64(sum, binary.LittleEndian.Uint64(b[56:64]), c)
		carries += c
		b = b[64:]
	}
	for len(b) >= 8 {
		var c uint64
		sum, c = bits.Add64(sum, binary.LittleEndian.Uint64(b), 0)
		carries += c
		b = b[8:]
	}
	// The last 0 to 7 bytes start at an offset that is a multiple of 8 and
	// fill disjoint lanes of one word, so adding them cannot carry.
	var tail uint64
	if len(b) >= 4 {
		tail = uint64(binary.LittleEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		tail |= uint64(binary.LittleEndian.Uint16(b)) << 32
		b = b[2:]
	}
	if len(b) == 1 {
		// An odd last byte sits at an even offset: the low byte of a
		// little-endian word, padded with a zero high byte.
		tail |= uint64(b[0]) << 48
	}
	sum, c := bits.Add64(sum, tail, 0)
	carries += c
	sum, c = bits.Add64(sum, carries, 0)
	// If that wrapped, sum is now less than carries and adding 1 cannot
	// wrap again.
	return sum + c
}

// fold reduces a ones' complement sum to 16 bits with end-around carries.
func fold(s uint64) uint16 {
	s = s>>32 + s&0xffffffff // at most 2^33-2
	s = s>>16 + s&0xffff     // at most 0x2fffe
	s = s>>16 + s&0xffff     // at most 0x10001
	s = s>>16 + s&0xffff     // at most 0xffff
	return uint16(s)
}

// PseudoHeaderChecksum returns the ones' complement sum, folded to 16 bits
// but not complemented, of the pseudo-header that UDP, TCP and ICMPv6
// checksums cover: the addresses, the protocol and the transport length
// (RFC 768, RFC 9293; RFC 8200 section 8.1 for IPv6). It is the initial
// value for Checksum over the transport header and payload, and also what
// checksum offload (a virtio-net NEEDS_CSUM packet) expects in the
// checksum field.
//
// If both addresses are IPv4 the IPv4 pseudo-header is used, otherwise the
// IPv6 one with the 16-byte forms of the addresses.
func PseudoHeaderChecksum(proto uint8, src, dst netip.Addr, length int) uint32 {
	n := uint32(length)
	s := uint64(proto) + uint64(n>>16) + uint64(n&0xffff)
	if src.Is4() && dst.Is4() {
		a, b := src.As4(), dst.As4()
		s += uint64(binary.BigEndian.Uint16(a[0:])) + uint64(binary.BigEndian.Uint16(a[2:]))
		s += uint64(binary.BigEndian.Uint16(b[0:])) + uint64(binary.BigEndian.Uint16(b[2:]))
		return uint32(fold(s))
	}
	a, b := src.As16(), dst.As16()
	for i := 0; i < 16; i += 2 {
		s += uint64(binary.BigEndian.Uint16(a[i:])) + uint64(binary.BigEndian.Uint16(b[i:]))
	}
	return uint32(fold(s))
}

// ipv4HeaderLen returns the header length hdr's IHL field gives, and false
// if that is below the minimum or beyond hdr.
func ipv4HeaderLen(hdr []byte) (int, bool) {
	if len(hdr) < IPv4HeaderLen {
		return 0, false
	}
	n := int(hdr[0]&0x0f) * 4
	return n, n >= IPv4HeaderLen && n <= len(hdr)
}

// IPv4HeaderChecksumOK reports whether the IPv4 header at the start of hdr
// (IHL*4 bytes, options included) has a correct header checksum. It
// reports false if hdr is shorter than its IHL says.
func IPv4HeaderChecksumOK(hdr []byte) bool {
	n, ok := ipv4HeaderLen(hdr)
	if !ok {
		return false
	}
	// A correct header sums to all ones, in either byte order: the sum
	// needs neither Checksum's byte swap nor its complement. An IHL of at
	// least 5 keeps the header from being all zeros, the one other input
	// whose sum folds to a fixed value.
	if n == IPv4HeaderLen {
		// Nearly every header: three loads and two adds, not the loop,
		// since the L3 forwarder checks every packet.
		s, c := bits.Add64(binary.LittleEndian.Uint64(hdr[0:8]), binary.LittleEndian.Uint64(hdr[8:16]), 0)
		s, c2 := bits.Add64(s, uint64(binary.LittleEndian.Uint32(hdr[16:20])), c)
		return fold(s+c2) == 0xffff // s+c2 cannot wrap: c2 == 1 leaves s small
	}
	return fold(sumLittleEndian(hdr[:n])) == 0xffff
}

// SetIPv4HeaderChecksum computes and stores the header checksum of the
// IPv4 header at the start of hdr. It does nothing if hdr is shorter than
// its IHL says.
func SetIPv4HeaderChecksum(hdr []byte) {
	n, ok := ipv4HeaderLen(hdr)
	if !ok {
		return
	}
	hdr[10], hdr[11] = 0, 0
	binary.BigEndian.PutUint16(hdr[10:], Checksum(hdr[:n], 0))
}

// TransportChecksumOK reports whether the UDP, TCP, ICMPv6 or ICMP
// checksum of b is correct; h must come from a successful Parse of b. A
// UDP-over-IPv4 checksum of 0 means "none" and is accepted.
//
// It reports false when it cannot verify: for other protocols, when no
// transport header was parsed, and for fragments, whose checksum covers
// data in other packets. For IPv6 it uses the addresses in the IPv6
// header, so a packet with a routing header that is not at its last hop
// does not verify.
func TransportChecksumOK(b []byte, h *Headers) bool {
	end := h.L3Off + h.L3Len
	// h is trusted to describe b, but checking costs little and turns a
	// mismatch into false rather than a panic.
	if h.Fragment || h.L3Off < 0 || h.L4Off <= h.L3Off || h.L4Off > end || end > len(b) {
		return false
	}
	l4 := b[h.L4Off:end]
	switch {
	case h.IPProto == ProtoUDP:
		if len(l4) < UDPHeaderLen {
			return false
		}
		if l4[6] == 0 && l4[7] == 0 {
			return h.Proto == EtherTypeIPv4 // IPv6 makes the UDP checksum mandatory
		}
	case h.IPProto == ProtoTCP:
	case h.IPProto == ProtoICMPv6 && h.Proto == EtherTypeIPv6:
	case h.IPProto == ProtoICMP && h.Proto == EtherTypeIPv4:
		return Checksum(l4, 0) == 0 // ICMP has no pseudo-header
	default:
		return false
	}
	return Checksum(l4, PseudoHeaderChecksum(h.IPProto, h.SrcIP, h.DstIP, len(l4))) == 0
}
