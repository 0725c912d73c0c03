package vnet

import (
	"bytes"
	"encoding/binary"
	"net/netip"

	"softnet.dev/packet"
)

// GROKinds are the GSO packets a device takes, and so the ones a
// Coalescer may build for it.
type GROKinds uint8

const (
	GROTCPv4 GROKinds = 1 << iota // TSO over IPv4
	GROTCPv6                      // TSO over IPv6
	GROUDPv4                      // USO over IPv4
	GROUDPv6                      // USO over IPv6
)

const (
	// GROMaxSegments bounds the packets merged into one GSO packet, and
	// so the iovecs of its write; it is half the kernel's
	// UDP_MAX_SEGMENTS.
	GROMaxSegments = 64
	// GROMaxBurst bounds the packets one Plan takes, so that a
	// Coalescer's scratch space is allocated once, by NewCoalescer, and
	// planning never allocates (about 12 KiB per queue with its caller's
	// slices). Twice the engine's default batch (the NAPI budget) and two
	// runs of GROMaxSegments: a round's burst for one port is planned
	// whole. A longer burst is planned in parts, which loses only the
	// merges across a cut.
	GROMaxBurst = 128
	// GROHeaderRoom is the room GROHeaders needs: a vnet header, an
	// Ethernet header with one 802.1Q tag, an IPv6 header (longer than
	// the option-less IPv4 headers merged) and a TCP header with the
	// longest options.
	GROHeaderRoom = HeaderLen + 18 + packet.IPv6HeaderLen + 60

	// groMaxOpen bounds the flows with a group open at once: a burst
	// interleaving more flows than this merges less, never wrongly.
	groMaxOpen = 8

	tcpACK = 0x10
)

// Coalescer plans GRO for the bursts bound for one device that takes GSO
// packets: within a burst, it finds runs of consecutive segments of one
// TCP or UDP flow that the kernel's own GRO would merge, and describes
// each run as one GSO packet whose headers GROHeaders writes and whose
// payload is the run's payloads in order (GROPayload), ready for one
// gathering write. Nothing is copied or modified in the packets.
//
// A run is merged only if segmenting the GSO packet gives back its
// packets: the same headers apart from the lengths, checksums, IPv4 IDs
// and the TCP PSH flag; all segments but the last of the GSO size, the
// first segment's payload length; TCP sequence numbers that follow on;
// IPv4 IDs that count up unless DF is set; no IP options or IPv6
// extension headers; TCP segments that carry data and no flag but ACK and
// PSH (which ends a run); at most GROMaxSegments packets and 65535 bytes
// of IP packet. Every merged packet's transport checksum must be right:
// one with FlagNeedsCsum has it done by whoever takes the GSO packet, and
// one without is verified here, so that merging never makes a corrupted
// packet look whole.
//
// Packets of different flows may leave in a different order than they
// came, as with the kernel's GRO; packets of one flow keep theirs, since a
// run ends at any packet of its flow that cannot join it and leaves at
// the position of its first packet.
//
// A Coalescer is for one goroutine. Its scratch space is sized for
// GROMaxBurst packets when it is made: Plan never allocates.
type Coalescer struct {
	layer  packet.Layer
	kinds  GROKinds
	maxLen int // longest GSO frame the device takes, from the frame's start
	segs   []groSeg
	open   [groMaxOpen]int32 // leaders of the runs still open, oldest first
	nopen  int
	ph     packet.Headers
}

// groSeg is what Plan knows about one packet of the burst.
type groSeg struct {
	leader int32 // the run's first packet; -1 if the packet leaves alone
	next   int32 // the run's next packet, -1 after its last
	flow   bool  // TCP or UDP over IP with headers Plan understands
	merge  bool  // a candidate for merging (implies flow)
	v4     bool
	tcp    bool
	df     bool
	psh    bool
	l3Off  int32
	l4Off  int32
	hdrLen int32 // every header: where the payload starts
	end    int32 // end of the IP packet (Ethernet padding follows)
	seq    uint32
	id     uint16

	// Kept up to date on a run's leader.
	count    int32  // packets in the run
	last     int32  // its last packet
	gsoSize  int32  // payload of its first packet
	l3Len    int32  // IP packet length of the merged packet
	nextSeq  uint32 // sequence number the next TCP segment must have
	nextID   uint16 // IPv4 ID the next segment must have, unless DF
	lastFull bool   // the last packet's payload is gsoSize long
	lastPSH  bool   // the last packet has PSH: the run is over
}

func (s *groSeg) payload() int32 { return s.end - s.hdrLen }

// NewCoalescer returns a Coalescer for a device whose packets start at
// layer, that takes the GSO packets of kinds, and whose frames (from the
// Ethernet header for packet.L2) are at most maxFrame bytes long.
func NewCoalescer(layer packet.Layer, kinds GROKinds, maxFrame int) *Coalescer {
	return &Coalescer{layer: layer, kinds: kinds, maxLen: maxFrame, segs: make([]groSeg, 0, GROMaxBurst)}
}

// Plan plans the burst pkts, in which hdrs[i] is the vnet header that
// came with pkts[i] (the zero Header if none), or its first GROMaxBurst
// packets if it is longer: it returns the number planned, n. After Plan,
// GROCount says for each of pkts[:n] whether it leaves alone, leads a GSO
// packet, or is part of one led by an earlier packet; the caller plans
// pkts[n:] after it is done with those. len(hdrs) must be len(pkts).
func (g *Coalescer) Plan(pkts [][]byte, hdrs []Header) int {
	pkts = pkts[:min(len(pkts), GROMaxBurst)]
	g.segs = g.segs[:len(pkts)]
	g.nopen = 0
	for i := range pkts {
		s := &g.segs[i]
		g.parse(s, pkts[i], hdrs[i])
		if !s.flow {
			continue
		}
		if slot := g.findOpen(pkts, i); slot >= 0 {
			lead := g.open[slot]
			if s.merge && g.join(pkts, lead, int32(i)) {
				if l := &g.segs[lead]; !l.lastFull || l.lastPSH || l.count == GROMaxSegments {
					g.closeSlot(slot)
				}
				continue
			}
			// A packet of the run's flow that cannot join ends it, so
			// that it leaves after the run.
			g.closeSlot(slot)
		}
		if s.merge && !s.psh {
			g.start(int32(i))
		}
	}
	return len(pkts)
}

// GROCount reports what Plan decided for packet i: 1 if it leaves alone,
// n > 1 if it leads a GSO packet of n packets (itself first), and 0 if it
// is part of a GSO packet led by an earlier packet.
func (g *Coalescer) GROCount(i int) int {
	s := &g.segs[i]
	switch s.leader {
	case -1:
		return 1
	case int32(i):
		return int(s.count)
	}
	return 0
}

// GRONext returns the packet that follows packet i in its GSO packet, or
// -1 after the last.
func (g *Coalescer) GRONext(i int) int { return int(g.segs[i].next) }

// GROPayload returns the part of pkt, packet i of the burst, that a GSO
// packet carries: what follows its headers, without Ethernet padding.
func (g *Coalescer) GROPayload(i int, pkt []byte) []byte {
	s := &g.segs[i]
	return pkt[s.hdrLen:s.end]
}

// GROHeaders writes into dst, which must hold GROHeaderRoom bytes, the
// vnet header and the packet headers of the GSO packet led by packet i
// (GROCount(i) > 1), whose data is pkt; it returns them. The headers are
// pkt's, with the merged packet's lengths, the PSH flag of its last
// segment, and in the transport checksum field the pseudo-header sum that
// FlagNeedsCsum asks for (including the whole transport length, as Linux
// leaves it).
func (g *Coalescer) GROHeaders(i int, pkt, dst []byte) []byte {
	s := &g.segs[i]
	hdr := dst[HeaderLen : HeaderLen+int(s.hdrLen)]
	copy(hdr, pkt[:s.hdrLen])
	ip, l4 := hdr[s.l3Off:], hdr[s.l4Off:]
	l4Len := int(s.l3Len) - int(s.l4Off-s.l3Off)
	var src, dstIP netip.Addr
	if s.v4 {
		binary.BigEndian.PutUint16(ip[2:], uint16(s.l3Len))
		packet.SetIPv4HeaderChecksum(ip)
		src, dstIP = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	} else {
		binary.BigEndian.PutUint16(ip[4:], uint16(s.l3Len-packet.IPv6HeaderLen))
		src, dstIP = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	}
	h := Header{Flags: FlagNeedsCsum, HdrLen: uint16(s.hdrLen), GSOSize: uint16(s.gsoSize), CsumStart: uint16(s.l4Off)}
	proto := uint8(packet.ProtoUDP)
	if s.tcp {
		proto = packet.ProtoTCP
		if s.lastPSH {
			l4[13] |= tcpPSH
		}
		h.GSOType, h.CsumOffset = GSOTCPv6, tcpCsumOffset
		if s.v4 {
			h.GSOType = GSOTCPv4
		}
	} else {
		binary.BigEndian.PutUint16(l4[4:], uint16(l4Len))
		h.GSOType, h.CsumOffset = GSOUDPL4, udpCsumOffset
	}
	sum := uint16(packet.PseudoHeaderChecksum(proto, src, dstIP, l4Len))
	binary.BigEndian.PutUint16(l4[h.CsumOffset:], sum)
	h.Encode(dst)
	return dst[:HeaderLen+int(s.hdrLen)]
}

// parse fills s from one packet of the burst.
func (g *Coalescer) parse(s *groSeg, pkt []byte, h Header) {
	*s = groSeg{leader: -1, next: -1}
	ph := &g.ph
	if ok, _ := packet.Parse(pkt, g.layer, ph); !ok || ph.Fragment || ph.L4Off == 0 {
		return
	}
	switch ph.IPProto {
	case packet.ProtoTCP:
		s.tcp = true
	case packet.ProtoUDP:
	default:
		return
	}
	switch ph.Proto {
	case packet.EtherTypeIPv4:
		s.v4 = true
	case packet.EtherTypeIPv6:
	default:
		return
	}
	s.flow = true
	s.l3Off, s.l4Off, s.end = int32(ph.L3Off), int32(ph.L4Off), int32(ph.L3Off+ph.L3Len)
	s.hdrLen = s.l4Off + packet.UDPHeaderLen
	csumOffset := uint16(udpCsumOffset)
	l4 := pkt[s.l4Off:s.end]
	if s.tcp {
		// Parse has checked that the data offset fits the packet.
		s.hdrLen = s.l4Off + int32(l4[12]>>4)*4
		s.seq = binary.BigEndian.Uint32(l4[4:])
		flags := l4[13]
		s.psh = flags&tcpPSH != 0
		if flags&^(tcpACK|tcpPSH) != 0 || flags&tcpACK == 0 {
			return
		}
		csumOffset = tcpCsumOffset
	} else if int(binary.BigEndian.Uint16(l4[4:])) != len(l4) {
		return
	}
	if s.hdrLen > int32(GROHeaderRoom-HeaderLen) || s.payload() <= 0 || !g.accepts(s) {
		return
	}
	if s.v4 {
		ip := pkt[s.l3Off:]
		// Options are per packet and the merged packet has the
		// first's; a header checksum is verified like the transport's.
		if s.l4Off-s.l3Off != packet.IPv4HeaderLen || !packet.IPv4HeaderChecksumOK(ip) {
			return
		}
		s.df = ip[6]&0x40 != 0
		s.id = binary.BigEndian.Uint16(ip[4:])
	} else if s.l4Off-s.l3Off != packet.IPv6HeaderLen {
		return // extension headers
	}
	switch {
	case h.IsGSO():
		return
	case h.NeedsCsum():
		if int32(h.CsumStart) != s.l4Off || h.CsumOffset != csumOffset {
			return
		}
	case !packet.TransportChecksumOK(pkt, ph):
		return
	}
	s.merge = true
}

func (g *Coalescer) accepts(s *groSeg) bool {
	var k GROKinds
	switch {
	case s.tcp && s.v4:
		k = GROTCPv4
	case s.tcp:
		k = GROTCPv6
	case s.v4:
		k = GROUDPv4
	default:
		k = GROUDPv6
	}
	return g.kinds&k != 0
}

// findOpen returns the slot of the open run of packet i's flow, or -1.
func (g *Coalescer) findOpen(pkts [][]byte, i int) int {
	p, s := pkts[i], &g.segs[i]
	for slot, lead := range g.open[:g.nopen] {
		if l := &g.segs[lead]; sameFlow(pkts[lead], l, p, s) {
			return slot
		}
	}
	return -1
}

// sameFlow reports whether two parsed packets share protocol, addresses
// and ports.
func sameFlow(a []byte, sa *groSeg, b []byte, sb *groSeg) bool {
	if sa.v4 != sb.v4 || sa.tcp != sb.tcp {
		return false
	}
	addrs, n := int32(12), int32(8) // IPv4 source and destination
	if !sa.v4 {
		addrs, n = 8, 32
	}
	return bytes.Equal(a[sa.l3Off+addrs:sa.l3Off+addrs+n], b[sb.l3Off+addrs:sb.l3Off+addrs+n]) &&
		bytes.Equal(a[sa.l4Off:sa.l4Off+4], b[sb.l4Off:sb.l4Off+4])
}

// start opens a run led by packet i, closing the oldest if all slots are
// taken.
func (g *Coalescer) start(i int32) {
	if g.nopen == groMaxOpen {
		g.closeSlot(0)
	}
	g.open[g.nopen] = i
	g.nopen++
	s := &g.segs[i]
	s.leader, s.count, s.last = i, 1, i
	s.gsoSize, s.l3Len = s.payload(), s.end-s.l3Off
	s.nextSeq, s.nextID = s.seq+uint32(s.payload()), s.id+1
	s.lastFull, s.lastPSH = true, false
}

func (g *Coalescer) closeSlot(slot int) {
	copy(g.open[slot:], g.open[slot+1:g.nopen])
	g.nopen--
}

// join appends packet i to the run led by lead if it may follow the
// run's last packet, and reports whether it did.
func (g *Coalescer) join(pkts [][]byte, lead, i int32) bool {
	l, s := &g.segs[lead], &g.segs[i]
	n := s.payload()
	switch {
	case !l.lastFull || l.lastPSH || l.count >= GROMaxSegments:
	case l.l3Off != s.l3Off || l.l4Off != s.l4Off || l.hdrLen != s.hdrLen:
	case n > l.gsoSize || int(l.l3Off+l.l3Len+n) > g.maxLen || int(l.l3Len+n) > maxGSOLen:
	case s.tcp && s.seq != l.nextSeq:
	case s.v4 && !s.df && s.id != l.nextID:
	case !sameHeaders(pkts[lead], l, pkts[i]):
	default:
		g.segs[l.last].next = i
		s.leader = lead
		l.last = i
		l.count++
		l.l3Len += n
		l.nextSeq += uint32(n)
		l.nextID = s.id + 1
		l.lastFull = n == l.gsoSize
		l.lastPSH = s.psh
		return true
	}
	return false
}

// sameHeaders reports whether b's headers match a's, a run's leader
// described by l, in every byte that segmenting the merged packet copies
// from the leader's: all but the lengths, checksums, IPv4 ID, TCP
// sequence number and PSH flag.
func sameHeaders(a []byte, l *groSeg, b []byte) bool {
	eq := func(from, to int32) bool { return bytes.Equal(a[from:to], b[from:to]) }
	ip, t := l.l3Off, l.l4Off
	if !eq(0, ip) {
		return false
	}
	if l.v4 {
		// version to TOS; flags to protocol; addresses
		if !eq(ip, ip+2) || !eq(ip+6, ip+10) || !eq(ip+12, ip+20) {
			return false
		}
	} else if !eq(ip, ip+4) || !eq(ip+6, ip+packet.IPv6HeaderLen) {
		// version, traffic class and flow label; next header to addresses
		return false
	}
	if !l.tcp {
		return eq(t, t+4) // ports
	}
	// ports; acknowledgment and data offset; flags but PSH; window;
	// urgent pointer and options
	return eq(t, t+4) && eq(t+8, t+13) && (a[t+13]^b[t+13])&^tcpPSH == 0 &&
		eq(t+14, t+16) && eq(t+18, l.hdrLen)
}
