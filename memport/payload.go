package memport

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync"

	"softnet.dev/packet"
)

// Payload header constants; the layout is in docs/design.md, "In-memory ports".
const (
	// Magic starts every generated UDP payload ("snet") whose bytes after
	// the payload header are the pattern.
	Magic uint32 = 0x736e6574
	// MagicHeadersOnly starts the UDP payload of a HeadersOnly generator
	// ("snho"), whose bytes after the payload header are not generated.
	MagicHeadersOnly uint32 = 0x736e686f
	// HeaderLen is the size of the payload header: magic, flow, sequence.
	HeaderLen = 16
	// MaxFlows bounds the flow ids a generator produces and a sink tracks,
	// so that a sink's per-flow table, indexed by an id read from an
	// untrusted packet, stays bounded.
	MaxFlows = 1 << 16
	// MinSize and MaxSize bound the IP packet sizes of a generator: the
	// smallest holds an IPv6 and a UDP header and the payload header, the
	// largest is the IPv4 total length limit.
	MinSize = 64
	MaxSize = 65535
)

const (
	udpHdrPlusHeader = packet.UDPHeaderLen + HeaderLen // offset of the pattern in a datagram
	flowOff          = 4                               // in the payload header
	seqOff           = 8
	srcPortBase      = 49152 // ephemeral range; flows vary the source port
	dstPort          = 9     // discard
)

// Locally administered MAC addresses of generated Ethernet frames.
var (
	SrcMAC = [6]byte{0x02, 0x73, 0x6e, 0x00, 0x00, 0x01}
	DstMAC = [6]byte{0x02, 0x73, 0x6e, 0x00, 0x00, 0x02}
)

// PatternByte returns byte i of the payload pattern that follows the
// payload header.
func PatternByte(i int) byte { return byte(i) ^ byte(i>>8)*31 ^ 0x5a }

// pattern returns MaxSize bytes of the payload pattern, computed once: the
// generator copies it behind its templates and a sink compares against it.
var pattern = sync.OnceValue(func() []byte {
	p := make([]byte, MaxSize)
	for i := range p {
		p[i] = PatternByte(i)
	}
	return p
})

// FlowAddrs returns the addresses and ports of a generated flow: each flow
// has its own source address (198.18.0.1 + flow, or 2001:db8:0:1::1 +
// flow) and source port, towards one destination (198.19.255.254:9 or
// [2001:db8:0:2::1]:9). flow must be in [0, MaxFlows).
func FlowAddrs(flow int, ipv6 bool) (src, dst netip.AddrPort) {
	f := uint32(flow) + 1
	sport := uint16(srcPortBase + flow%(65536-srcPortBase))
	if ipv6 {
		s := [16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1}
		binary.BigEndian.PutUint32(s[12:], f)
		d := [16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 2, 15: 1}
		return netip.AddrPortFrom(netip.AddrFrom16(s), sport), netip.AddrPortFrom(netip.AddrFrom16(d), dstPort)
	}
	var s [4]byte
	binary.BigEndian.PutUint32(s[:], (198<<24|18<<16)+f)
	return netip.AddrPortFrom(netip.AddrFrom4(s), sport), netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, 255, 254}), dstPort)
}

// putHeader writes a payload header.
func putHeader(b []byte, magic, flow uint32, seq uint64) {
	_ = b[HeaderLen-1]
	binary.BigEndian.PutUint32(b[0:], magic)
	binary.BigEndian.PutUint32(b[flowOff:], flow)
	binary.BigEndian.PutUint64(b[seqOff:], seq)
}

// addSeq returns the UDP checksum field of a datagram whose field was
// csum while its sequence number was 0, now that it is seq: the ones'
// complement sum grows by seq's four 16-bit words (RFC 1624, eqn. 3, with
// the old words all zero). A result of 0 is sent as 0xffff (RFC 768).
func addSeq(csum uint16, seq uint64) uint16 {
	s := uint64(^csum) + seq>>48 + seq>>32&0xffff + seq>>16&0xffff + seq&0xffff
	s = s>>16 + s&0xffff // at most 0xffff + 4
	s = s>>16 + s&0xffff
	if c := ^uint16(s); c != 0 {
		return c
	}
	return 0xffff
}

// stamp is what a valid payload header says.
type stamp struct {
	flow        uint32
	seq         uint64
	headersOnly bool // MagicHeadersOnly: the payload after the header was not generated
}

// checkLight validates what the benchmark can afford: the IP version and
// protocol, that the IP and UDP lengths agree with each other and fit the
// packet, and the magic. It reads only fixed offsets, each after a length
// check, so any bytes are safe.
func checkLight(d []byte, l2 int) (stamp, bool) {
	if len(d) < l2+packet.IPv4HeaderLen+udpHdrPlusHeader {
		return stamp{}, false
	}
	ip := d[l2:]
	var hdr, ipLen int
	switch ip[0] >> 4 {
	case 4:
		if ip[0] != 0x45 || ip[9] != packet.ProtoUDP || l2 != 0 && binary.BigEndian.Uint16(d[12:]) != packet.EtherTypeIPv4 {
			return stamp{}, false
		}
		hdr, ipLen = packet.IPv4HeaderLen, int(binary.BigEndian.Uint16(ip[2:]))
	case 6:
		if ip[6] != packet.ProtoUDP || l2 != 0 && binary.BigEndian.Uint16(d[12:]) != packet.EtherTypeIPv6 {
			return stamp{}, false
		}
		hdr, ipLen = packet.IPv6HeaderLen, packet.IPv6HeaderLen+int(binary.BigEndian.Uint16(ip[4:]))
	default:
		return stamp{}, false
	}
	// Bytes after the IP packet (Ethernet padding) are allowed, as
	// packet.Parse allows them; a packet shorter than its header says is
	// truncated.
	if ipLen > len(ip) || ipLen < hdr+udpHdrPlusHeader {
		return stamp{}, false
	}
	return checkUDP(ip[hdr:ipLen])
}

// checkUDP checks the UDP length and the payload header magic (either
// one) of a whole datagram of at least udpHdrPlusHeader bytes.
func checkUDP(udp []byte) (stamp, bool) {
	app := udp[packet.UDPHeaderLen:]
	if int(binary.BigEndian.Uint16(udp[4:])) != len(udp) {
		return stamp{}, false
	}
	magic := binary.BigEndian.Uint32(app)
	if magic != Magic && magic != MagicHeadersOnly {
		return stamp{}, false
	}
	return stamp{
		flow:        binary.BigEndian.Uint32(app[flowOff:]),
		seq:         binary.BigEndian.Uint64(app[seqOff:]),
		headersOnly: magic == MagicHeadersOnly,
	}, true
}

// checkFull parses the packet with packet.Parse and checks everything
// checkLight does. For a Magic packet it also verifies the UDP checksum
// (which must be present) and compares the payload after the header with
// the pattern; a MagicHeadersOnly packet must have no checksum, and its
// payload is not generated, so there is nothing to compare it with.
func checkFull(d []byte, layer packet.Layer, h *packet.Headers) (stamp, bool) {
	if ok, _ := packet.Parse(d, layer, h); !ok || h.IPProto != packet.ProtoUDP || h.L4Off == 0 || h.Fragment {
		return stamp{}, false
	}
	end := h.L3Off + h.L3Len
	if end-h.L4Off < udpHdrPlusHeader {
		return stamp{}, false
	}
	udp := d[h.L4Off:end]
	st, ok := checkUDP(udp)
	if !ok {
		return stamp{}, false
	}
	noSum := udp[6] == 0 && udp[7] == 0
	if st.headersOnly {
		return st, noSum
	}
	// A Magic packet always has a checksum.
	if noSum || !packet.TransportChecksumOK(d, h) {
		return stamp{}, false
	}
	rest := udp[udpHdrPlusHeader:]
	if !bytes.Equal(rest, pattern()[:len(rest)]) {
		return stamp{}, false
	}
	return st, true
}
