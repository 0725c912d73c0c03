package vxlan

import (
	"encoding/binary"

	"softnet.dev/drop"
)

// Sizes of the encapsulation (RFC 7348): the VXLAN header, and what the
// outer headers add to an inner Ethernet frame over each underlay.
const (
	HeaderLen   = 8
	udpLen      = 8
	OverheadV4  = 20 + udpLen + HeaderLen + 14 // outer IPv4, UDP, VXLAN and the inner Ethernet header: 50
	OverheadV6  = 40 + udpLen + HeaderLen + 14 // 70
	minInnerLen = 14                           // an Ethernet header
	// DefaultPort is the IANA port of VXLAN. The kernel's vxlan device
	// uses 8472 (Linux's choice before IANA's) unless given dstport.
	DefaultPort = 4789
	// MaxVNI is the largest 24-bit VXLAN network identifier.
	MaxVNI = 1<<24 - 1
)

// flagI is the one flag RFC 7348 defines: the VNI is valid.
const flagI = 0x08

// PutHeader writes the VXLAN header of vni into b[:HeaderLen]: the I
// flag, the VNI and zeros in every reserved field.
func PutHeader(b []byte, vni uint32) {
	binary.BigEndian.PutUint32(b[0:4], flagI<<24)
	binary.BigEndian.PutUint32(b[4:8], vni<<8)
}

// Decode validates a received VXLAN datagram (the UDP payload) for a
// port that serves vni and returns the inner Ethernet frame. As the
// kernel's vxlan does, it refuses a header without the I flag or with
// any reserved bit set (drop.VXLANInvalidHdr: RFC 7348 says to ignore
// them, but a peer that sets them speaks an extension this port does not
// know, such as VXLAN-GPE, whose frames are not Ethernet), another VNI
// (drop.VXLANVNINotFound), and a datagram too short for the header and
// an Ethernet header (drop.HdrTrunc).
func Decode(d []byte, vni uint32) ([]byte, bool, drop.Reason) {
	if len(d) < HeaderLen+minInnerLen {
		return nil, false, drop.HdrTrunc
	}
	w0, w1 := binary.BigEndian.Uint32(d[0:4]), binary.BigEndian.Uint32(d[4:8])
	if w0 != flagI<<24 || w1&0xff != 0 {
		return nil, false, drop.VXLANInvalidHdr
	}
	if w1>>8 != vni {
		return nil, false, drop.VXLANVNINotFound
	}
	return d[HeaderLen:], true, drop.NotSpecified
}
