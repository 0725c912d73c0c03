package vnet

import "encoding/binary"

// HeaderLen is the size of struct virtio_net_hdr, the header TUN and TAP
// devices opened with IFF_VNET_HDR exchange by default.
const HeaderLen = 10

// Flags.
const (
	FlagNeedsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM: finish the checksum at CsumStart+CsumOffset
	FlagDataValid = 2 // VIRTIO_NET_HDR_F_DATA_VALID: the checksum was verified (receive only)
)

// GSO types.
const (
	GSONone  = 0    // VIRTIO_NET_HDR_GSO_NONE
	GSOTCPv4 = 1    // VIRTIO_NET_HDR_GSO_TCPV4: TSO over IPv4
	GSOUDP   = 3    // VIRTIO_NET_HDR_GSO_UDP: UFO, IP fragmentation of a UDP datagram
	GSOTCPv6 = 4    // VIRTIO_NET_HDR_GSO_TCPV6: TSO over IPv6
	GSOUDPL4 = 5    // VIRTIO_NET_HDR_GSO_UDP_L4: USO, one UDP datagram per segment
	GSOECN   = 0x80 // VIRTIO_NET_HDR_GSO_ECN: the TCP packet has CWR set
)

// knownFlags are the flag bits Check accepts. RSC_INFO (4) is only
// meaningful from a device to a driver and is rejected like any unknown
// bit.
const knownFlags = FlagNeedsCsum | FlagDataValid

// Header is a decoded struct virtio_net_hdr. CsumStart counts from the
// first byte after the header: the Ethernet header for TAP, the IP header
// for TUN.
type Header struct {
	Flags      uint8
	GSOType    uint8
	HdrLen     uint16 // length of the headers to copy into each segment; a hint only
	GSOSize    uint16 // payload bytes per segment (the MSS for TCP)
	CsumStart  uint16 // where checksumming starts
	CsumOffset uint16 // where the checksum goes, from CsumStart
}

// Decode reads a header from the first HeaderLen bytes of b. It reports
// false if b is shorter. It does not validate the header: see Check.
func Decode(b []byte) (Header, bool) {
	if len(b) < HeaderLen {
		return Header{}, false
	}
	return Header{
		Flags:      b[0],
		GSOType:    b[1],
		HdrLen:     binary.LittleEndian.Uint16(b[2:]),
		GSOSize:    binary.LittleEndian.Uint16(b[4:]),
		CsumStart:  binary.LittleEndian.Uint16(b[6:]),
		CsumOffset: binary.LittleEndian.Uint16(b[8:]),
	}, true
}

// Encode writes h to the first HeaderLen bytes of b, which the caller
// sizes (typically headroom taken with Buf.Prepend); like the builders of
// package packet it panics if b is shorter.
func (h Header) Encode(b []byte) {
	_ = b[HeaderLen-1] // one bounds check, and the panic says why
	b[0] = h.Flags
	b[1] = h.GSOType
	binary.LittleEndian.PutUint16(b[2:], h.HdrLen)
	binary.LittleEndian.PutUint16(b[4:], h.GSOSize)
	binary.LittleEndian.PutUint16(b[6:], h.CsumStart)
	binary.LittleEndian.PutUint16(b[8:], h.CsumOffset)
}

// IsGSO reports whether h asks for segmentation: a GSO type other than
// none, whatever the ECN bit says.
func (h Header) IsGSO() bool { return h.GSOType&^GSOECN != GSONone }

// NeedsCsum reports whether FlagNeedsCsum is set.
func (h Header) NeedsCsum() bool { return h.Flags&FlagNeedsCsum != 0 }
