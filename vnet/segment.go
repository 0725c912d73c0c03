package vnet

import (
	"encoding/binary"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
)

// TCP flags that segmentation moves: FIN and PSH belong to the end of the
// data, so only the last segment keeps them; CWR answers one ECE, so only
// the first segment keeps it (as tcp_gso_segment does).
const (
	tcpFIN = 0x01
	tcpPSH = 0x08
	tcpCWR = 0x80
)

// MaxSegments bounds the segments Segment makes of one packet, and so the
// work one packet from a guest can cause: the kernel's UDP_MAX_SEGMENTS,
// which Check already applies to USO, applied to TSO as well. A forged
// header cannot turn a 64 KiB packet into a thousand segments (gso_size
// 60), while real TSO stays within it: 64 KiB at IPv4's default MSS of
// 536 is 123 segments.
const MaxSegments = udpMaxSegments

// SegmentCount returns the number of segments Segment would produce from
// the GSO packet pkt, for sizing out: 1 to MaxSegments for a packet
// Segment can split, and 0 for one it would refuse (an invalid or non-GSO
// header, GSOUDP, or more than MaxSegments segments). It costs a Check.
func SegmentCount(h Header, pkt []byte, layer packet.Layer) int {
	var g gsoPacket
	if ok, _ := g.parse(h, pkt, layer); !ok || g.kind == GSOUDP || g.segments() > MaxSegments {
		return 0
	}
	return g.segments()
}

// Segment splits the GSO packet pkt, which h describes, into packets of at
// most h.GSOSize payload bytes each, in new buffers from c stored in
// out[:n], and returns n. Each segment is a complete packet with finished
// checksums (docs/design.md, "TUN and TAP devices, offloads, GSO and GRO"); pkt is not modified and
// bytes after its IP packet (Ethernet padding) are not copied. All
// segments are of one size class, the smallest that holds the largest of
// them.
//
// The header should have passed Check; Segment checks it again rather
// than trust that, and refuses an invalid one with drop.GsoSeg, as it
// does GSOUDP (IP fragmentation), a packet of more than MaxSegments
// segments and an out shorter than SegmentCount.
// If the pool cannot provide every buffer it returns drop.NoMem. On
// failure it returns 0, owns no buffer and leaves out[:n] nil.
//
// Segment does not allocate.
func Segment(c *buffer.Cache, h Header, pkt []byte, layer packet.Layer, out []*buffer.Buf) (int, drop.Reason) {
	var g gsoPacket
	if ok, _ := g.parse(h, pkt, layer); !ok || g.kind == GSOUDP {
		return 0, drop.GsoSeg
	}
	n := g.segments()
	if n > MaxSegments || n > len(out) {
		return 0, drop.GsoSeg
	}
	class, ok := c.Pool().ClassFor(g.hdrLen + min(g.mss, g.payloadLen()))
	if !ok {
		return 0, drop.GsoSeg // a segment larger than any frame
	}
	segs := out[:n]
	// All or nothing, before any copying: running out part-way would
	// waste the copies and leave buffers to give back.
	if err := c.GetBulk(segs, class); err != nil {
		if err == buffer.ErrExhausted {
			return 0, drop.NoMem
		}
		return 0, drop.GsoSeg
	}
	if !g.fill(pkt, segs) {
		c.DropBulk(segs, drop.GsoSeg)
		clear(segs)
		return 0, drop.GsoSeg
	}
	return n, drop.NotSpecified
}

// fill writes the segments of pkt into segs, fresh buffers of a class that
// holds the largest segment. It reports false if a buffer turns out too
// small, which the class choice rules out; the check stays so that a
// mistake there costs a drop rather than a panic.
func (g *gsoPacket) fill(pkt []byte, segs []*buffer.Buf) bool {
	st := g.start(pkt)
	for i, b := range segs {
		d, ok := b.Append(g.segLen(i))
		if !ok {
			return false
		}
		g.put(pkt, st, i, len(segs), d)
	}
	return true
}

// SegmentBytes is Segment into caller memory: segment i goes to
// out[i][offset:] and its length to sizes[i]. It returns the number of
// segments, or 0 and a reason without writing anything: drop.GsoSeg as
// Segment, and drop.PktTooBig if out or sizes has fewer than
// SegmentCount elements or a segment does not fit its element.
//
// out[0][offset:] may be pkt itself (a packet read into the first
// buffer is split in place): the segments are written last first, so
// that the first, a prefix of pkt, is written after every other has
// copied its headers. No other element may overlap pkt.
//
// SegmentBytes does not allocate.
func SegmentBytes(h Header, pkt []byte, layer packet.Layer, out [][]byte, offset int, sizes []int) (int, drop.Reason) {
	var g gsoPacket
	if ok, _ := g.parse(h, pkt, layer); !ok || g.kind == GSOUDP {
		return 0, drop.GsoSeg
	}
	n := g.segments()
	if n > len(out) || n > len(sizes) || offset < 0 {
		return 0, drop.PktTooBig
	}
	for i := range n {
		if len(out[i])-offset < g.segLen(i) {
			return 0, drop.PktTooBig
		}
	}
	st := g.start(pkt)
	for i := n - 1; i >= 0; i-- {
		sizes[i] = g.segLen(i)
		g.put(pkt, st, i, n, out[i][offset:offset+sizes[i]])
	}
	return n, drop.NotSpecified
}

// Split is Segment without copying the payload, for a port that gathers
// each segment from two pieces on its way out (a UDP socket's sendmsg):
// segment i is hdrs[i][:hdrLen], its headers, followed by payloads[i], a
// subslice of pkt. Split writes the headers, finished as Segment
// finishes them (lengths, IPv4 IDs, TCP sequence numbers and flags,
// checksums over headers and payload), sets payloads[i], and returns n
// and hdrLen. pkt is only read: it may be a buffer shared with other
// holders, and must stay unchanged while the segments are in use.
//
// It refuses what Segment refuses, with drop.GsoSeg, and with
// drop.PktTooBig hdrs or payloads with fewer than SegmentCount elements
// or a hdrs element shorter than hdrLen; on failure n is 0 and nothing
// was written. It does not allocate.
func Split(h Header, pkt []byte, layer packet.Layer, hdrs, payloads [][]byte) (n, hdrLen int, reason drop.Reason) {
	var g gsoPacket
	if ok, _ := g.parse(h, pkt, layer); !ok || g.kind == GSOUDP {
		return 0, 0, drop.GsoSeg
	}
	n = g.segments()
	if n > MaxSegments {
		return 0, 0, drop.GsoSeg
	}
	if n > len(hdrs) || n > len(payloads) {
		return 0, 0, drop.PktTooBig
	}
	for _, d := range hdrs[:n] {
		if len(d) < g.hdrLen {
			return 0, 0, drop.PktTooBig
		}
	}
	st := g.start(pkt)
	for i := range n {
		off := g.hdrLen + i*g.mss
		p := pkt[off : off+g.segLen(i)-g.hdrLen]
		d := hdrs[i][:g.hdrLen]
		copy(d, pkt[:g.hdrLen])
		g.fixup(d, p, st.id+uint16(i), st.seq+uint32(i*g.mss), i == 0, i == n-1)
		payloads[i] = p
	}
	return n, g.hdrLen, drop.NotSpecified
}

// segStart is what every segment's headers are derived from, read
// before any segment is written (the first may overwrite pkt).
type segStart struct {
	id  uint16
	seq uint32
}

func (g *gsoPacket) start(pkt []byte) segStart {
	var st segStart
	if g.v4 {
		st.id = binary.BigEndian.Uint16(pkt[g.l3Off+4:])
	}
	if g.tcp {
		st.seq = binary.BigEndian.Uint32(pkt[g.l4Off+4:])
	}
	return st
}

// segLen returns the length of segment i: the headers and its share of
// the payload.
func (g *gsoPacket) segLen(i int) int {
	return g.hdrLen + min(g.mss, g.payloadLen()-i*g.mss)
}

// put writes segment i of n into d, which is segLen(i) bytes long. IPv4
// IDs and TCP sequence numbers wrap, as on the wire.
func (g *gsoPacket) put(pkt []byte, st segStart, i, n int, d []byte) {
	off := g.hdrLen + i*g.mss
	copy(d, pkt[:g.hdrLen])
	copy(d[g.hdrLen:], pkt[off:off+len(d)-g.hdrLen])
	g.fixup(d[:g.hdrLen], d[g.hdrLen:], st.id+uint16(i), st.seq+uint32(i*g.mss), i == 0, i == n-1)
}

// fixup rewrites the headers hdr of one segment (a copy of the original
// headers, hdrLen bytes) for its length and position; payload is the
// segment's payload, which follows hdr on the wire and is only read.
func (g *gsoPacket) fixup(hdr, payload []byte, id uint16, seq uint32, first, last bool) {
	ip := hdr[g.l3Off:]
	ipLen := len(ip) + len(payload)
	if g.v4 {
		binary.BigEndian.PutUint16(ip[2:], uint16(ipLen))
		// Every segment is a datagram of its own and needs its own ID
		// (RFC 6864 allows a fixed one only with DF, and the kernel
		// increments unless told otherwise, which virtio cannot say).
		binary.BigEndian.PutUint16(ip[4:], id)
		packet.SetIPv4HeaderChecksum(ip)
	} else {
		// Extension headers count as payload.
		binary.BigEndian.PutUint16(ip[4:], uint16(ipLen-packet.IPv6HeaderLen))
	}
	l4 := hdr[g.l4Off:]
	l4Len := len(l4) + len(payload)
	// The transport header is of even length (TCP's a multiple of 4,
	// UDP's 8), so the payload's sum continues the header's.
	seed := g.pseudo + uint32(l4Len)
	if g.tcp {
		binary.BigEndian.PutUint32(l4[4:], seq)
		flags := l4[13]
		if !first {
			flags &^= tcpCWR
		}
		if !last {
			flags &^= tcpFIN | tcpPSH
		}
		l4[13] = flags
		l4[16], l4[17] = 0, 0
		binary.BigEndian.PutUint16(l4[16:], packet.Checksum(payload, uint32(^packet.Checksum(l4, seed))))
		return
	}
	binary.BigEndian.PutUint16(l4[4:], uint16(l4Len))
	l4[6], l4[7] = 0, 0
	sum := packet.Checksum(payload, uint32(^packet.Checksum(l4, seed)))
	if sum == 0 {
		sum = 0xffff // 0 would mean "no checksum" (RFC 768)
	}
	binary.BigEndian.PutUint16(l4[6:], sum)
}
