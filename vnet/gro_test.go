package vnet

import (
	"bytes"
	"encoding/binary"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/packet"
)

const allGRO = GROTCPv4 | GROTCPv6 | GROUDPv4 | GROUDPv6

// segmentsOf builds the GSO packet s describes and returns it, its header
// and copies of the segments Segment makes of it (complete checksums, as
// from a device without offloads).
func segmentsOf(t testing.TB, s spec) (Header, []byte, [][]byte) {
	t.Helper()
	_, c := newTestPool(t, buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 256}, {Room: 65536, Count: 4}}})
	h, pkt := build(s)
	return h, pkt, segmentCopies(t, c, h, pkt, s.layer())
}

// segmentCopies segments pkt with buffers of c and returns copies of the
// segments, the buffers freed.
func segmentCopies(t testing.TB, c *buffer.Cache, h Header, pkt []byte, layer packet.Layer) [][]byte {
	t.Helper()
	out := make([]*buffer.Buf, SegmentCount(h, pkt, layer))
	n, reason := Segment(c, h, pkt, layer, out)
	if n == 0 {
		t.Fatalf("Segment: %v", reason)
	}
	segs := make([][]byte, n)
	for i, b := range out[:n] {
		segs[i] = bytes.Clone(b.Bytes())
		c.Consume(b)
	}
	return segs
}

// offloaded turns a segment with a complete transport checksum into what a
// guest with checksum offload sends: the pseudo-header sum in the field,
// and a header that asks for the rest.
func offloaded(t testing.TB, seg []byte, layer packet.Layer) (Header, []byte) {
	t.Helper()
	seg = bytes.Clone(seg)
	var ph packet.Headers
	if ok, reason := packet.Parse(seg, layer, &ph); !ok {
		t.Fatalf("segment does not parse: %v", reason)
	}
	l4 := seg[ph.L4Off : ph.L3Off+ph.L3Len]
	h := Header{Flags: FlagNeedsCsum, CsumStart: uint16(ph.L4Off), CsumOffset: udpCsumOffset}
	if ph.IPProto == packet.ProtoTCP {
		h.CsumOffset = tcpCsumOffset
	}
	binary.BigEndian.PutUint16(l4[h.CsumOffset:], uint16(packet.PseudoHeaderChecksum(ph.IPProto, ph.SrcIP, ph.DstIP, len(l4))))
	return h, seg
}

// plan runs a Coalescer over pkts (nil hdrs: none has a vnet header).
func plan(layer packet.Layer, kinds GROKinds, pkts [][]byte, hdrs []Header) *Coalescer {
	if hdrs == nil {
		hdrs = make([]Header, len(pkts))
	}
	g := NewCoalescer(layer, kinds, 65535+18)
	g.Plan(pkts, hdrs)
	return g
}

// merged returns the GSO packet led by packet i and its header.
func merged(t testing.TB, g *Coalescer, pkts [][]byte, i int) (Header, []byte) {
	t.Helper()
	scratch := make([]byte, GROHeaderRoom)
	hdr := g.GROHeaders(i, pkts[i], scratch)
	h, _ := Decode(hdr)
	pkt := bytes.Clone(hdr[HeaderLen:])
	n := 0
	for j := i; j >= 0; j = g.GRONext(j) {
		pkt = append(pkt, g.GROPayload(j, pkts[j])...)
		n++
	}
	if n != g.GROCount(i) {
		t.Fatalf("GRONext walks %d packets from %d, GROCount says %d", n, i, g.GROCount(i))
	}
	return h, pkt
}

// counts returns GROCount for every packet.
func counts(g *Coalescer, n int) []int {
	c := make([]int, n)
	for i := range c {
		c[i] = g.GROCount(i)
	}
	return c
}

// TestCoalesceRoundTrip segments GSO packets of every shape the
// Coalescer merges and checks that it puts each back together exactly:
// the same headers and payload, and the header a guest would have sent
// (the checksum field holds the pseudo-header sum over the whole length,
// as the builder leaves it).
func TestCoalesceRoundTrip(t *testing.T) {
	for _, s := range []spec{
		{},
		{v6: true},
		{udp: true},
		{udp: true, v6: true},
		{l2: true},
		{l2: true, vlan: true, v6: true, udp: true},
		{tcpOpts: 12},
	} {
		s.payload, s.mss = pattern(20*1400+321), 1400
		for _, offload := range []bool{false, true} {
			h, pkt, segs := segmentsOf(t, s)
			var hdrs []Header
			if offload {
				hdrs = make([]Header, len(segs))
				for i := range segs {
					hdrs[i], segs[i] = offloaded(t, segs[i], s.layer())
				}
			}
			g := plan(s.layer(), allGRO, segs, hdrs)
			if got := g.GROCount(0); got != len(segs) {
				t.Fatalf("%+v offload %v: first packet leads %d of %d", s, offload, got, len(segs))
			}
			gh, gpkt := merged(t, g, segs, 0)
			h.GSOType &^= GSOECN
			if gh != h {
				t.Errorf("%+v offload %v: header %+v, want %+v", s, offload, gh, h)
			}
			if !bytes.Equal(gpkt, pkt) {
				t.Errorf("%+v offload %v: merged packet differs from the original\n got % x\nwant % x", s, offload, gpkt[:64], pkt[:64])
			}
			if ok, reason := Check(gh, gpkt, s.layer()); !ok {
				t.Errorf("%+v offload %v: Check refuses the merged packet: %v", s, offload, reason)
			}
		}
	}
}

func TestCoalesceSplits(t *testing.T) {
	base := spec{payload: pattern(6 * 1000), mss: 1000}
	_, _, segs := segmentsOf(t, base)
	corrupt := func(seg []byte) []byte {
		seg = bytes.Clone(seg)
		seg[len(seg)-1] ^= 0xff
		return seg
	}
	withFlags := func(seg []byte, flags byte) []byte {
		seg = bytes.Clone(seg)
		seg[packet.IPv4HeaderLen+13] = flags
		return fixTCPv4(t, seg)
	}
	otherFlow := func(seg []byte) []byte {
		seg = bytes.Clone(seg)
		seg[packet.IPv4HeaderLen+1]++ // source port
		return fixTCPv4(t, seg)
	}
	pureACK := func(seg []byte) []byte {
		seg = bytes.Clone(seg[:packet.IPv4HeaderLen+packet.TCPHeaderLen])
		binary.BigEndian.PutUint16(seg[2:], uint16(len(seg)))
		seg[packet.IPv4HeaderLen+13] = 0x10
		return fixTCPv4(t, seg)
	}
	for _, tc := range []struct {
		name string
		pkts [][]byte
		want []int
	}{
		{"whole run", segs, []int{6, 0, 0, 0, 0, 0}},
		{"gap in sequence", [][]byte{segs[0], segs[1], segs[3], segs[4]}, []int{2, 0, 2, 0}},
		{"repeat", [][]byte{segs[0], segs[1], segs[1], segs[2]}, []int{2, 0, 2, 0}},
		{"bad checksum", [][]byte{segs[0], segs[1], corrupt(segs[2]), segs[3], segs[4]}, []int{2, 0, 1, 2, 0}},
		{"FIN ends the run and leaves after it", [][]byte{segs[0], segs[1], withFlags(segs[2], 0x11), segs[3]}, []int{2, 0, 1, 1}},
		{"pure ACK", [][]byte{segs[0], pureACK(segs[1]), segs[1]}, []int{1, 1, 1}},
		{"SYN", [][]byte{withFlags(segs[0], 0x12), segs[1]}, []int{1, 1}},
		{"PSH ends the run", [][]byte{segs[0], withFlags(segs[1], 0x18), segs[2], segs[3]}, []int{2, 0, 2, 0}},
		{"other flows interleave", [][]byte{segs[0], otherFlow(segs[0]), segs[1], otherFlow(segs[1]), segs[2]}, []int{3, 2, 0, 0, 0}},
		{"single packet", segs[:1], []int{1}},
	} {
		g := plan(packet.L3, allGRO, tc.pkts, nil)
		if got := counts(g, len(tc.pkts)); !equalInts(got, tc.want) {
			t.Errorf("%s: GROCount %v, want %v", tc.name, got, tc.want)
		}
	}
}

// fixTCPv4 recomputes, in place, the checksums of a TCP/IPv4 segment
// whose headers a test changed, so that only the change decides.
func fixTCPv4(t testing.TB, seg []byte) []byte {
	t.Helper()
	packet.SetIPv4HeaderChecksum(seg)
	h, p := offloaded(t, seg, packet.L3)
	if !FinishChecksum(h, p) {
		t.Fatal("FinishChecksum refused a segment")
	}
	return append(seg[:0], p...)
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCoalesceUDPSizes(t *testing.T) {
	_, _, big := segmentsOf(t, spec{udp: true, payload: pattern(3 * 1200), mss: 1200})
	_, _, small := segmentsOf(t, spec{udp: true, payload: pattern(3 * 800), mss: 800})
	for _, tc := range []struct {
		name string
		pkts [][]byte
		want []int
	}{
		// A shorter datagram may end a run; nothing may follow it.
		{"short last", [][]byte{big[0], big[1], small[0], big[2]}, []int{3, 0, 0, 1}},
		// A longer datagram cannot join: segmenting would cut it.
		{"longer after shorter", [][]byte{small[0], big[0], big[1]}, []int{1, 2, 0}},
	} {
		g := plan(packet.L3, allGRO, tc.pkts, nil)
		if got := counts(g, len(tc.pkts)); !equalInts(got, tc.want) {
			t.Errorf("%s: GROCount %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCoalesceLimits(t *testing.T) {
	// 100 segments of 100 bytes: runs of GROMaxSegments.
	_, _, many := segmentsOf(t, spec{payload: pattern(100 * 100), mss: 100})
	g := plan(packet.L3, allGRO, many, nil)
	if a, b := g.GROCount(0), g.GROCount(GROMaxSegments); a != GROMaxSegments || b != 100-GROMaxSegments {
		t.Errorf("100 segments: runs of %d and %d, want %d and %d", a, b, GROMaxSegments, 100-GROMaxSegments)
	}
	// 80 segments of 1400 bytes, from two GSO packets, the second's
	// sequence numbers moved to follow on: the IP packet must stay within
	// 65535 bytes.
	_, _, long := segmentsOf(t, spec{payload: pattern(40 * 1400), mss: 1400})
	long[39][packet.IPv4HeaderLen+13] &^= tcpPSH
	fixTCPv4(t, long[39])
	_, _, more := segmentsOf(t, spec{payload: pattern(40 * 1400), mss: 1400})
	for _, seg := range more {
		seq := seg[packet.IPv4HeaderLen+4:]
		binary.BigEndian.PutUint32(seq, binary.BigEndian.Uint32(seq)+40*1400)
		long = append(long, fixTCPv4(t, seg))
	}
	g = plan(packet.L3, allGRO, long, nil)
	per := (65535 - packet.IPv4HeaderLen - packet.TCPHeaderLen) / 1400
	if a, b := g.GROCount(0), g.GROCount(per); a != per || b != 80-per {
		t.Errorf("80 x 1400 bytes: runs of %d and %d, want %d and %d", a, b, per, 80-per)
	}
	// A device with a smaller maximum frame.
	small := NewCoalescer(packet.L3, allGRO, 9000)
	small.Plan(long[:10], make([]Header, 10))
	if got := small.GROCount(0); got != (9000-packet.IPv4HeaderLen-packet.TCPHeaderLen)/1400 {
		t.Errorf("max frame 9000: first run of %d", got)
	}
	// Kinds the device does not take are left alone.
	g = plan(packet.L3, GROTCPv6|GROUDPv4, long[:4], nil)
	if got := counts(g, 4); !equalInts(got, []int{1, 1, 1, 1}) {
		t.Errorf("TCPv4 to a device without it: %v", got)
	}
	// Flows interleaved segment by segment: as many as there are open
	// runs all merge; with one more, the first flow's run is evicted
	// before its second segment comes, which leaves alone (less merging,
	// never wrong). A second segment with PSH starts no run, so it evicts
	// none.
	for _, nflows := range []int{groMaxOpen, groMaxOpen + 1} {
		var firsts, seconds [][]byte
		for f := range nflows {
			_, _, segs := segmentsOf(t, spec{payload: pattern(2 * 500), mss: 500})
			for _, s := range segs {
				s[packet.IPv4HeaderLen+1] += byte(f) // source port
				fixTCPv4(t, s)
			}
			firsts, seconds = append(firsts, segs[0]), append(seconds, segs[1])
		}
		burst := append(firsts, seconds...)
		g = plan(packet.L3, allGRO, burst, nil)
		want := make([]int, len(burst))
		for i := range nflows {
			want[i] = 2
		}
		if nflows > groMaxOpen {
			want[0], want[nflows] = 1, 1
		}
		if got := counts(g, len(burst)); !equalInts(got, want) {
			t.Errorf("%d flows interleaved: GROCount %v, want %v", nflows, got, want)
		}
	}
}

func TestCoalesceRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    spec
	}{
		{"IPv4 options", spec{ipOpts: 4}},
		{"IPv6 extension header", spec{v6: true, ext: true}},
	} {
		tc.s.payload, tc.s.mss = pattern(3*600), 600
		_, _, segs := segmentsOf(t, tc.s)
		g := plan(tc.s.layer(), allGRO, segs, nil)
		if got := counts(g, len(segs)); !equalInts(got, []int{1, 1, 1}) {
			t.Errorf("%s: GROCount %v, want all alone", tc.name, got)
		}
	}
	// A GSO packet, and a checksum request for the wrong field.
	h, pkt, segs := segmentsOf(t, spec{payload: pattern(3 * 600), mss: 600})
	ph, p1 := offloaded(t, segs[1], packet.L3)
	ph.CsumOffset = 2
	g := plan(packet.L3, allGRO, [][]byte{pkt, segs[0], p1, segs[2]}, []Header{h, {}, ph, {}})
	if got := counts(g, 4); !equalInts(got, []int{1, 1, 1, 1}) {
		t.Errorf("GSO packet and bad checksum request: GROCount %v", got)
	}
	// IPv4 without DF: IDs must count up.
	_, _, nodf := segmentsOf(t, spec{payload: pattern(3 * 600), mss: 600})
	for i, s := range nodf {
		s[6] &^= 0x40
		if i == 2 {
			s[5]++ // skips an ID
		}
		packet.SetIPv4HeaderChecksum(s)
	}
	g = plan(packet.L3, allGRO, nodf, nil)
	if got := counts(g, 3); !equalInts(got, []int{2, 0, 1}) {
		t.Errorf("IDs without DF: GROCount %v, want [2 0 1]", got)
	}
	// TAP frames from different MACs.
	_, _, l2 := segmentsOf(t, spec{l2: true, payload: pattern(2 * 600), mss: 600})
	l2[1][0] ^= 2
	g = plan(packet.L2, allGRO, l2, nil)
	if got := counts(g, 2); !equalInts(got, []int{1, 1}) {
		t.Errorf("different MACs: GROCount %v", got)
	}
}

func TestCoalescePlanAllocs(t *testing.T) {
	_, _, segs := segmentsOf(t, spec{payload: pattern(30 * 1400), mss: 1400})
	hdrs := make([]Header, len(segs))
	g := NewCoalescer(packet.L3, allGRO, 65535)
	scratch := make([]byte, GROHeaderRoom)
	allocs := testing.AllocsPerRun(100, func() {
		g.Plan(segs, hdrs)
		g.GROHeaders(0, segs[0], scratch)
	})
	if allocs != 0 {
		t.Errorf("Plan and GROHeaders allocate %.1f times per burst", allocs)
	}
}

// A new Coalescer plans bursts of every length without allocating: its
// scratch space is made with it, not grown by the first long bursts. It
// used to grow in the switch's worker while the lab's overlay TCP ran.
func TestCoalescePlanAllocsNew(t *testing.T) {
	_, _, segs := segmentsOf(t, spec{payload: pattern(100 * 100), mss: 100})
	hdrs := make([]Header, len(segs))
	g := NewCoalescer(packet.L3, allGRO, 65535)
	n := 1
	allocs := testing.AllocsPerRun(len(segs)-2, func() {
		n++
		g.Plan(segs[:n], hdrs[:n])
	})
	if allocs != 0 {
		t.Errorf("Plan of ever longer bursts allocates %.2f times per burst", allocs)
	}
}

// A burst longer than GROMaxBurst is planned in parts: Plan takes its
// first GROMaxBurst packets, and the rest plan as a burst of their own.
func TestCoalescePlanLongBurst(t *testing.T) {
	_, _, a := segmentsOf(t, spec{payload: pattern(100 * 100), mss: 100})
	_, _, b := segmentsOf(t, spec{payload: pattern(100 * 100), mss: 100, v6: true})
	pkts := append(a, b...)
	hdrs := make([]Header, len(pkts))
	g := NewCoalescer(packet.L3, allGRO, 65535)
	if n := g.Plan(pkts, hdrs); n != GROMaxBurst {
		t.Fatalf("Plan of %d packets planned %d, want %d", len(pkts), n, GROMaxBurst)
	}
	// 100 IPv4 segments (runs of 64 and 36), then the first 28 IPv6 ones.
	if got := counts(g, GROMaxBurst); got[0] != GROMaxSegments || got[GROMaxSegments] != 100-GROMaxSegments || got[100] != GROMaxBurst-100 {
		t.Errorf("first part: runs of %d, %d and %d", got[0], got[GROMaxSegments], got[100])
	}
	rest := pkts[GROMaxBurst:]
	if n := g.Plan(rest, hdrs[:len(rest)]); n != len(rest) {
		t.Fatalf("Plan of the %d left planned %d", len(rest), n)
	}
	// The other 72 IPv6 segments: runs of 64 and 8.
	if a, b := g.GROCount(0), g.GROCount(GROMaxSegments); a != GROMaxSegments || b != len(rest)-GROMaxSegments {
		t.Errorf("second part: runs of %d and %d", a, b)
	}
}
