package memport

import (
	"encoding/binary"

	"softnet.dev/packet"
)

const (
	// maxPrefix is the most bytes of a frame a template holds: every
	// header fits (78 bytes at most), and a 64-byte packet is one copy.
	// The rest of a larger frame is pattern, the same for every flow, and
	// is copied from the pattern instead, so that templates stay small
	// however large the packets.
	maxPrefix = 128
	// maxTemplates bounds Flows × len(Sizes), and so the template memory
	// (maxPrefix bytes each, 32 MiB at most).
	maxTemplates = 1 << 18
	ttl          = 64
)

// templates are the generator's packets with sequence number 0, built once:
// per packet the generator copies one and patches the sequence number and
// the UDP checksum. HeadersOnly templates carry MagicHeadersOnly and no
// checksum.
type templates struct {
	l2      int // Ethernet header length, or 0
	csumOff int // UDP checksum, in the frame
	seqOff  int // sequence number, in the frame
	patOff  int // first pattern byte, in the frame
	stride  int // bytes per template slot
	sizes   []sizeInfo
	slots   []byte // slot (flow*len(sizes) + size index)*stride
	pattern []byte // pattern(), kept to save the sync.Once check per burst
}

type sizeInfo struct {
	frame  int // L2 header and IP packet
	prefix int // leading bytes taken from the template; the rest is pattern
}

func buildTemplates(flows int, sizes []int, ipv6 bool, layer packet.Layer, headersOnly bool) *templates {
	t := &templates{sizes: make([]sizeInfo, len(sizes))}
	ipHdr, etherType := packet.IPv4HeaderLen, packet.EtherTypeIPv4
	if ipv6 {
		ipHdr, etherType = packet.IPv6HeaderLen, packet.EtherTypeIPv6
	}
	if layer == packet.L2 {
		t.l2 = packet.EthernetHeaderLen
	}
	udpOff := t.l2 + ipHdr
	t.csumOff, t.seqOff, t.patOff = udpOff+6, udpOff+packet.UDPHeaderLen+seqOff, udpOff+udpHdrPlusHeader
	largest := 0
	for _, s := range sizes {
		largest = max(largest, t.l2+s)
	}
	t.stride = min(maxPrefix, (largest+15)&^15)
	for i, s := range sizes {
		t.sizes[i] = sizeInfo{frame: t.l2 + s, prefix: min(t.l2+s, t.stride)}
	}
	t.slots = make([]byte, flows*len(sizes)*t.stride)
	pat := pattern()
	t.pattern = pat
	magic := Magic
	if headersOnly {
		magic = MagicHeadersOnly
	}
	for si, size := range sizes {
		sz := t.sizes[si]
		udpLen := size - ipHdr
		// The pattern's share of every flow's checksum, summed once per
		// size; it starts at an even offset of the datagram, so its sum
		// adds to the headers' as is.
		patSum := uint32(^packet.Checksum(pat[:udpLen-udpHdrPlusHeader], 0))
		for f := range flows {
			slot := t.slots[(f*len(sizes)+si)*t.stride:][:sz.prefix]
			src, dst := FlowAddrs(f, ipv6)
			if t.l2 != 0 {
				packet.PutEthernet(slot, DstMAC, SrcMAC, etherType)
			}
			if ipv6 {
				packet.PutIPv6(slot[t.l2:], src.Addr(), dst.Addr(), packet.ProtoUDP, ttl, udpLen)
			} else {
				packet.PutIPv4(slot[t.l2:], src.Addr(), dst.Addr(), packet.ProtoUDP, ttl, udpLen)
			}
			udp := slot[udpOff:]
			binary.BigEndian.PutUint16(udp[0:], src.Port())
			binary.BigEndian.PutUint16(udp[2:], dst.Port())
			binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
			binary.BigEndian.PutUint16(udp[6:], 0)
			putHeader(udp[packet.UDPHeaderLen:], magic, uint32(f), 0)
			copy(udp[udpHdrPlusHeader:], pat)
			if headersOnly {
				continue // no checksum: the payload is not generated
			}
			pseudo := packet.PseudoHeaderChecksum(packet.ProtoUDP, src.Addr(), dst.Addr(), udpLen)
			sum := packet.Checksum(udp[:udpHdrPlusHeader], pseudo+patSum)
			if sum == 0 {
				sum = 0xffff
			}
			binary.BigEndian.PutUint16(udp[6:], sum)
		}
	}
	return t
}
