package vnet

import (
	"encoding/binary"

	"softnet.dev/packet"
)

// FinishChecksum completes the checksum of a packet sent with
// FlagNeedsCsum, in place, as a NIC with checksum offload (or the
// kernel's skb_checksum_help) would: the field at CsumStart+CsumOffset
// holds the pseudo-header sum, so the checksum of pkt[CsumStart:] with
// that field left in place is the final checksum. Nothing else of pkt
// changes, and h is not modified: the caller clears FlagNeedsCsum if it
// passes the header on.
//
// It reports false, changing nothing, if the offsets do not fit pkt, and
// true without doing anything if FlagNeedsCsum is not set. It is meant for
// packets without GSO; Segment finishes the checksums of the segments it
// makes.
//
// The sum runs to the end of pkt, as the kernel's does: a TAP frame with
// Ethernet padding should be cut to its IP length first, unless the
// padding is zeros, which add nothing.
func FinishChecksum(h Header, pkt []byte) bool {
	if !h.NeedsCsum() {
		return true
	}
	start, field := int(h.CsumStart), int(h.CsumStart)+int(h.CsumOffset)
	if field+2 > len(pkt) {
		return false
	}
	sum := packet.Checksum(pkt[start:], 0)
	if sum == 0 {
		// A computed 0 is sent as its ones' complement twin 0xffff
		// (the kernel's CSUM_MANGLED_0): for UDP, 0 would mean "no
		// checksum", and for TCP both verify alike.
		sum = 0xffff
	}
	binary.BigEndian.PutUint16(pkt[field:], sum)
	return true
}
