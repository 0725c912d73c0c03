package vnet

import (
	"encoding/binary"

	"softnet.dev/drop"
	"softnet.dev/packet"
)

const (
	// gsoByFrags is the kernel's GSO_BY_FRAGS: a gso_size of 0xffff means
	// "segment along the fragment list", which a guest cannot ask for;
	// virtio_net_hdr_to_skb rejects it.
	gsoByFrags = 0xffff
	// udpMaxSegments is the kernel's UDP_MAX_SEGMENTS: USO packets that
	// would make more segments are rejected by virtio_net_hdr_to_skb.
	udpMaxSegments = 128
	// minGSOSize is the kernel's TCP_MIN_GSO_SIZE (TCP_MIN_SND_MSS less
	// the largest TCP options): no Linux stack builds GSO packets with
	// smaller segments, and its SACK code refuses to make them.
	minGSOSize = 8
	// maxGSOLen bounds a GSO packet after its Ethernet header: what an
	// IPv4 total length can describe, and what TUN accepts.
	maxGSOLen = 65535

	tcpCsumOffset = 16 // offsetof(struct tcphdr, check)
	udpCsumOffset = 6  // offsetof(struct udphdr, check)
)

// Check validates h against pkt, the packet that follows it: pkt starts
// with the IP header if layer is packet.L3 (TUN) and with the Ethernet
// header if it is packet.L2 (TAP). It reports ok, or the reason to drop
// the packet with (the rules: docs/design.md, "TUN and TAP devices, offloads, GSO and GRO").
//
// A packet without GSO is only checked as far as the header describes it
// (its flags and checksum offsets): parsing it is the datapath's job, and
// a frame the header says nothing about, such as ARP, is not the header's
// fault. A GSO packet is parsed, since segmenting it depends on every
// header in front of the payload. A layer other than L2 and L3 is the
// caller's mistake and fails with drop.NotSpecified. Check does not
// allocate.
func Check(h Header, pkt []byte, layer packet.Layer) (ok bool, reason drop.Reason) {
	if !h.IsGSO() {
		return checkFields(h, pkt, layer)
	}
	var g gsoPacket
	return g.parse(h, pkt, layer)
}

// checkFields checks what can be judged without parsing the packet.
func checkFields(h Header, pkt []byte, layer packet.Layer) (bool, drop.Reason) {
	if layer != packet.L2 && layer != packet.L3 {
		return false, drop.NotSpecified // a caller's bug, not the guest's
	}
	if h.Flags&^knownFlags != 0 {
		return false, drop.DevHdr
	}
	switch h.GSOType &^ GSOECN {
	case GSONone:
		// The kernel rejects ECN without a GSO type as an unknown type.
		if h.GSOType != GSONone {
			return false, drop.DevHdr
		}
	case GSOTCPv4, GSOTCPv6:
	case GSOUDP, GSOUDPL4:
		// ECN describes TCP's CWR; the kernel refuses it with USO.
		if h.GSOType&GSOECN != 0 {
			return false, drop.DevHdr
		}
	default:
		return false, drop.DevHdr
	}
	// int arithmetic: the uint16 sum could wrap and pass.
	if h.NeedsCsum() && int(h.CsumStart)+int(h.CsumOffset)+2 > len(pkt) {
		return false, drop.DevHdr
	}
	return true, drop.NotSpecified
}

// gsoPacket is what parse learns about a GSO packet and Segment needs.
type gsoPacket struct {
	kind   uint8 // GSOType without ECN
	v4     bool
	tcp    bool
	l3Off  int // IP header
	l4Off  int // TCP or UDP header
	hdrLen int // every header: what each segment starts with
	end    int // end of the IP packet; bytes after it are Ethernet padding
	mss    int
	// pseudo is the pseudo-header sum without its length field (a ones'
	// complement sum, not folded): adding a segment's transport length
	// gives that segment's checksum seed.
	pseudo uint32
}

// parse checks a GSO header and its packet and fills g.
func (g *gsoPacket) parse(h Header, pkt []byte, layer packet.Layer) (bool, drop.Reason) {
	if ok, reason := checkFields(h, pkt, layer); !ok {
		return false, reason
	}
	g.kind = h.GSOType &^ GSOECN
	if g.kind == GSONone {
		return false, drop.DevHdr
	}
	if h.GSOSize < minGSOSize || h.GSOSize == gsoByFrags {
		return false, drop.DevHdr
	}
	var ph packet.Headers
	if ok, reason := packet.Parse(pkt, layer, &ph); !ok {
		return false, reason
	}
	if len(pkt)-ph.L3Off > maxGSOLen {
		return false, drop.PktTooBig
	}
	switch ph.Proto {
	case packet.EtherTypeIPv4:
		g.v4 = true
	case packet.EtherTypeIPv6:
	default:
		return false, drop.DevHdr // ARP: no GSO type describes it
	}
	switch g.kind {
	case GSOTCPv4, GSOTCPv6:
		if ph.IPProto != packet.ProtoTCP || g.v4 != (g.kind == GSOTCPv4) {
			return false, drop.DevHdr
		}
		g.tcp = true
	case GSOUDP, GSOUDPL4:
		if ph.IPProto != packet.ProtoUDP {
			return false, drop.DevHdr
		}
	}
	// Only a whole datagram can be segmented: a fragment's payload does
	// not start with the transport header, or does not end the datagram.
	if ph.Fragment || ph.L4Off == 0 {
		return false, drop.InvalidProto
	}
	g.l3Off, g.l4Off, g.end = ph.L3Off, ph.L4Off, ph.L3Off+ph.L3Len
	g.mss = int(h.GSOSize)
	csumOffset := udpCsumOffset
	g.hdrLen = g.l4Off + packet.UDPHeaderLen
	if g.tcp {
		csumOffset = tcpCsumOffset
		// Parse has checked that the data offset is at least 20 and
		// that the header fits in the IP packet.
		g.hdrLen = g.l4Off + int(pkt[g.l4Off+12]>>4)*4
	}
	l4Len := g.end - g.l4Off
	if h.NeedsCsum() {
		// The checksum a guest asks for with a GSO packet must be the
		// transport header's, or the segments' would be left unfinished
		// somewhere else.
		if int(h.CsumStart) != g.l4Off || int(h.CsumOffset) != csumOffset {
			return false, drop.DevHdr
		}
		// The guest left the pseudo-header sum over the whole packet's
		// transport length; take that length back out (adding its
		// ones' complement subtracts it).
		field := binary.BigEndian.Uint16(pkt[g.l4Off+csumOffset:])
		g.pseudo = uint32(field) + uint32(^uint16(l4Len))
	} else {
		// USO has no fallback in the kernel: the guest must ask for the
		// checksum (virtio_net_hdr_to_skb). TSO without it is
		// checksummed from the addresses, as tcp_gso_segment does.
		if g.kind == GSOUDPL4 {
			return false, drop.DevHdr
		}
		g.pseudo = packet.PseudoHeaderChecksum(ph.IPProto, ph.SrcIP, ph.DstIP, 0)
	}
	if g.kind == GSOUDPL4 && g.segments() > udpMaxSegments {
		return false, drop.DevHdr
	}
	return true, drop.NotSpecified
}

// payloadLen returns the number of payload bytes to distribute.
func (g *gsoPacket) payloadLen() int { return g.end - g.hdrLen }

// segments returns the number of segments: at least one, since a GSO
// packet whose payload fits in one segment (or that has none) is still
// sent, as a single packet.
func (g *gsoPacket) segments() int {
	return max(1, (g.payloadLen()+g.mss-1)/g.mss)
}
