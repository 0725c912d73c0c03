package vnet

import (
	"bytes"
	"fmt"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
)

const testMSS = 1448

// segmentOK segments the packet built from s, checks every segment and
// frees them.
func segmentOK(t *testing.T, p *buffer.Pool, c *buffer.Cache, s spec) {
	t.Helper()
	h, pkt := build(s)
	orig := bytes.Clone(pkt)
	if ok, reason := Check(h, pkt, s.layer()); !ok {
		t.Fatalf("Check: %v", reason)
	}
	out := make([]*buffer.Buf, SegmentCount(h, pkt, s.layer()))
	n, reason := Segment(c, h, pkt, s.layer(), out)
	if n == 0 {
		t.Fatalf("Segment: %v", reason)
	}
	checkSegments(t, p, h, pkt, s.layer(), out[:n], true)
	if !bytes.Equal(pkt, orig) {
		t.Fatal("Segment modified its input")
	}
	c.ConsumeBulk(out[:n])
	if k := inUse(p, c); k != 0 {
		t.Fatalf("%d buffers in use after freeing the segments", k)
	}
}

// The required matrix: both IP versions, both GSO transports, TAP and
// TUN, and payloads around the segment size.
func TestSegmentMatrix(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, udp := range []bool{false, true} {
			for _, l2 := range []bool{false, true} {
				for _, size := range []int{1, testMSS - 1, testMSS, testMSS + 1, 64000} {
					s := spec{v6: v6, udp: udp, l2: l2, mss: testMSS, payload: pattern(size)}
					name := fmt.Sprintf("v6=%v/udp=%v/l2=%v/%d", v6, udp, l2, size)
					t.Run(name, func(t *testing.T) {
						p, c := newTestPool(t, buffer.Config{})
						segmentOK(t, p, c, s)
					})
				}
			}
		}
	}
}

// Headers that are copied whole into each segment, and the variations of
// the guest's checksum request.
func TestSegmentHeaderVariants(t *testing.T) {
	base := spec{mss: 1000, payload: pattern(3500)}
	variants := map[string]func(*spec){
		"vlan":                   func(s *spec) { s.l2, s.vlan = true, true },
		"vlan udp6":              func(s *spec) { s.l2, s.vlan, s.v6, s.udp = true, true, true, true },
		"ipv4 and tcp options":   func(s *spec) { s.ipOpts, s.tcpOpts = 12, 20 },
		"ipv6 extension header":  func(s *spec) { s.v6, s.ext = true, true },
		"ipv6 ext udp tap":       func(s *spec) { s.v6, s.ext, s.udp, s.l2 = true, true, true, true },
		"ethernet padding":       func(s *spec) { s.l2, s.pad = true, 6 },
		"tso without needs_csum": func(s *spec) { s.noCsum = true },
		"tso6 without csum":      func(s *spec) { s.v6, s.noCsum, s.l2 = true, true, true },
		"ecn":                    func(s *spec) { s.ecn, s.tcpFlags = true, 0x10|tcpCWR|0x40 },
		"wrong hdr_len":          func(s *spec) { s.hdrLenFix = -20 },
		"no payload":             func(s *spec) { s.payload = nil },
		"no payload udp":         func(s *spec) { s.udp, s.payload = true, nil },
		"mss 8":                  func(s *spec) { s.mss, s.payload = 8, pattern(100) },
		"128 segments":           func(s *spec) { s.mss, s.payload = 100, pattern(128*100) },
		"odd mss and payload":    func(s *spec) { s.mss, s.payload = 333, pattern(1001) },
		"largest ipv4":           func(s *spec) { s.payload = pattern(s.maxPayload()) },
		"largest ipv6 udp":       func(s *spec) { s.v6, s.udp, s.payload = true, true, pattern(65535-48) },
	}
	for name, f := range variants {
		t.Run(name, func(t *testing.T) {
			s := base
			f(&s)
			p, c := newTestPool(t, buffer.Config{})
			segmentOK(t, p, c, s)
		})
	}
}

// FIN and PSH end up on the last segment only, CWR on the first only; the
// other flags on all. checkSegments checks each segment against that rule;
// here the outcome is also spelled out.
func TestSegmentTCPFlags(t *testing.T) {
	const ack, urg, ece = 0x10, 0x20, 0x40
	all := byte(tcpFIN | tcpPSH | tcpCWR | ack | urg | ece)
	p, c := newTestPool(t, buffer.Config{})
	for _, segs := range []int{1, 2, 3} {
		h, pkt := build(spec{mss: 100, payload: pattern(100*segs - 50), tcpFlags: all})
		out := make([]*buffer.Buf, segs)
		n, reason := Segment(c, h, pkt, packet.L3, out)
		if n != segs {
			t.Fatalf("%d segments (%v), want %d", n, reason, segs)
		}
		checkSegments(t, p, h, pkt, packet.L3, out, true)
		for i, b := range out {
			want := byte(ack | urg | ece)
			if i == 0 {
				want |= tcpCWR
			}
			if i == segs-1 {
				want |= tcpFIN | tcpPSH
			}
			if got := b.Bytes()[packet.IPv4HeaderLen+13]; got != want {
				t.Errorf("%d segments: segment %d flags %#x, want %#x", segs, i, got, want)
			}
		}
		c.ConsumeBulk(out)
	}
}

// The sequence number and the IPv4 ID wrap around as on the wire; the
// builder starts both close to the top.
func TestSegmentWraps(t *testing.T) {
	p, c := newTestPool(t, buffer.Config{})
	h, pkt := build(spec{mss: 4000, payload: pattern(12000)})
	out := make([]*buffer.Buf, 3)
	if n, reason := Segment(c, h, pkt, packet.L3, out); n != 3 {
		t.Fatalf("Segment: %d, %v", n, reason)
	}
	checkSegments(t, p, h, pkt, packet.L3, out, true)
	want := []struct {
		id  uint16
		seq uint32
	}{{0xfffe, 0xffff_f000}, {0xffff, 0xffff_f000 + 4000}, {0, 8000 - 0x1000}}
	for i, b := range out {
		d := b.Bytes()
		id, seq := uint16(d[4])<<8|uint16(d[5]), uint32(d[24])<<24|uint32(d[25])<<16|uint32(d[26])<<8|uint32(d[27])
		if id != want[i].id || seq != want[i].seq {
			t.Errorf("segment %d: id %#x seq %#x, want %#x %#x", i, id, seq, want[i].id, want[i].seq)
		}
	}
	c.ConsumeBulk(out)
}

// A UDP checksum that comes to 0 is sent as 0xffff: 0 would mean "no
// checksum".
func TestSegmentUDPZeroChecksum(t *testing.T) {
	p, c := newTestPool(t, buffer.Config{})
	s := spec{udp: true, l2: true, mss: 64, payload: make([]byte, 64+10)}
	h, pkt := build(s)
	out := make([]*buffer.Buf, 2)
	if n, reason := Segment(c, h, pkt, s.layer(), out); n != 2 {
		t.Fatalf("Segment: %d, %v", n, reason)
	}
	// With the first payload word of the second segment 0 its checksum
	// is w, the complement of the sum; putting w in that word makes the
	// sum 0xffff, whose checksum is 0.
	csumAt := s.l4() + udpCsumOffset
	w := bytes.Clone(out[1].Bytes()[csumAt : csumAt+2])
	c.ConsumeBulk(out)
	copy(pkt[s.l4()+packet.UDPHeaderLen+64:], w)
	if n, reason := Segment(c, h, pkt, s.layer(), out); n != 2 {
		t.Fatalf("Segment: %d, %v", n, reason)
	}
	if got := out[1].Bytes()[csumAt:]; got[0] != 0xff || got[1] != 0xff {
		t.Fatalf("checksum % x, want ff ff", got[:2])
	}
	checkSegments(t, p, h, pkt, s.layer(), out, true)
	c.ConsumeBulk(out)
}

// Segments go into the smallest class that holds the largest of them.
func TestSegmentClass(t *testing.T) {
	p, c := newTestPool(t, buffer.Config{})
	for _, tc := range []struct {
		mss, payload int
		want         buffer.Class
	}{
		{1448, 64000, buffer.ClassMTU},
		{2048 - 40, 5000, buffer.ClassMTU}, // exactly the MTU class's room
		{2048 - 39, 5000, buffer.ClassGSO},
		{9000, 20000, buffer.ClassGSO},
		{60000, 100, buffer.ClassMTU}, // a large mss, a small packet
	} {
		h, pkt := build(spec{mss: tc.mss, payload: pattern(tc.payload)})
		out := make([]*buffer.Buf, SegmentCount(h, pkt, packet.L3))
		n, reason := Segment(c, h, pkt, packet.L3, out)
		if n == 0 {
			t.Fatalf("mss %d: %v", tc.mss, reason)
		}
		checkSegments(t, p, h, pkt, packet.L3, out, true)
		for _, b := range out {
			if b.Class() != tc.want {
				t.Errorf("mss %d: class %d, want %d", tc.mss, b.Class(), tc.want)
			}
		}
		c.ConsumeBulk(out)
	}

	// No class holds a segment: refused, nothing taken.
	small, sc := newTestPool(t, buffer.Config{Classes: []buffer.ClassConfig{{Room: 256, Count: 64}}})
	h, pkt := build(spec{mss: 1448, payload: pattern(3000)})
	out := make([]*buffer.Buf, 3)
	if n, reason := Segment(sc, h, pkt, packet.L3, out); n != 0 || reason != drop.GsoSeg {
		t.Fatalf("segments larger than any class: %d, %v", n, reason)
	}
	if k := inUse(small, sc); k != 0 || out[0] != nil {
		t.Fatalf("%d buffers in use, out[0] = %v", k, out[0])
	}
}

func TestSegmentOutTooSmall(t *testing.T) {
	p, c := newTestPool(t, buffer.Config{})
	h, pkt := build(spec{v6: true, udp: true, l2: true, mss: 1448, payload: pattern(10000)})
	n := SegmentCount(h, pkt, packet.L2)
	if n != 7 {
		t.Fatalf("SegmentCount = %d, want 7", n)
	}
	out := make([]*buffer.Buf, n-1)
	if got, reason := Segment(c, h, pkt, packet.L2, out); got != 0 || reason != drop.GsoSeg {
		t.Fatalf("Segment into %d slots = %d, %v", len(out), got, reason)
	}
	for _, b := range out {
		if b != nil {
			t.Fatal("out was written")
		}
	}
	if k := inUse(p, c); k != 0 {
		t.Fatalf("%d buffers in use", k)
	}
	if got, _ := Segment(c, h, pkt, packet.L2, out[:0]); got != 0 {
		t.Fatal("Segment into an empty out succeeded")
	}
}

func TestSegmentUFORefused(t *testing.T) {
	p, c := newTestPool(t, buffer.Config{})
	h, pkt := build(spec{udp: true, ufo: true, mss: 1448, payload: pattern(4000)})
	if ok, reason := Check(h, pkt, packet.L3); !ok {
		t.Fatalf("Check: %v", reason)
	}
	if n := SegmentCount(h, pkt, packet.L3); n != 0 {
		t.Fatalf("SegmentCount = %d", n)
	}
	out := make([]*buffer.Buf, 8)
	if n, reason := Segment(c, h, pkt, packet.L3, out); n != 0 || reason != drop.GsoSeg {
		t.Fatalf("Segment = %d, %v", n, reason)
	}
	if k := inUse(p, c); k != 0 {
		t.Fatalf("%d buffers in use", k)
	}
}

func TestSegmentNotGSO(t *testing.T) {
	_, c := newTestPool(t, buffer.Config{})
	h, pkt := build(spec{mss: 1448, payload: pattern(100)})
	h.GSOType, h.GSOSize = GSONone, 0
	out := make([]*buffer.Buf, 8)
	if n, reason := Segment(c, h, pkt, packet.L3, out); n != 0 || reason != drop.GsoSeg {
		t.Fatalf("Segment = %d, %v", n, reason)
	}
	if n := SegmentCount(h, pkt, packet.L3); n != 0 {
		t.Fatalf("SegmentCount = %d", n)
	}
}

// Running out of buffers at any point leaves nothing taken: the pool has
// 40 buffers, some of them held elsewhere, some in the cache and some in
// the depot, and packets need one more than are left, or exactly as many.
func TestSegmentExhaustion(t *testing.T) {
	const total = 40
	p, c := newTestPool(t, buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: total}}, CacheSize: 8})
	out := make([]*buffer.Buf, total+1)
	var held []*buffer.Buf
	for len(held) <= total {
		free := total - len(held)
		for _, s := range []spec{
			{mss: 100, payload: pattern(100 * (free + 1))},
			{v6: true, udp: true, l2: true, mss: 100, payload: pattern(100*(free+1) - 99)},
		} {
			h, pkt := build(s)
			if n, reason := Segment(c, h, pkt, s.layer(), out); n != 0 || reason != drop.NoMem {
				t.Fatalf("%d free, %d needed: Segment = %d, %v", free, free+1, n, reason)
			}
			for i, b := range out {
				if b != nil {
					t.Fatalf("failed Segment left out[%d] set", i)
				}
			}
			if k := inUse(p, c); k != len(held) {
				t.Fatalf("%d free, %d needed: %d buffers in use, want %d", free, free+1, k, len(held))
			}
		}
		if free > 0 {
			s := spec{udp: true, mss: 100, payload: pattern(100*free - 1)}
			h, pkt := build(s)
			n, reason := Segment(c, h, pkt, packet.L3, out)
			if n != free {
				t.Fatalf("%d free and needed: Segment = %d, %v", free, n, reason)
			}
			checkSegments(t, p, h, pkt, packet.L3, out[:n], true)
			c.DropBulk(out[:n], drop.FullRing)
			clear(out)
		}
		if len(held) == total {
			break
		}
		b, err := c.Get(0)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, b)
	}
	c.ConsumeBulk(held)
	if k := inUse(p, c); k != 0 {
		t.Fatalf("%d buffers in use", k)
	}
	if st := c.Stats(); st.Drops[drop.NoMem] != 0 || st.Drops[drop.GsoSeg] != 0 {
		t.Fatalf("buffers dropped as NOMEM/GSO_SEG: %v", st.Drops)
	}
}

func TestSegmentAllocatesNothing(t *testing.T) {
	_, c := newTestPool(t, buffer.Config{})
	for _, s := range []spec{
		{mss: testMSS, payload: pattern(64000)},
		{v6: true, udp: true, l2: true, vlan: true, mss: testMSS, payload: pattern(20000)},
	} {
		h, pkt := build(s)
		out := make([]*buffer.Buf, 64)
		if n := testing.AllocsPerRun(200, func() {
			n, reason := Segment(c, h, pkt, s.layer(), out)
			if n == 0 {
				panic(reason)
			}
			c.ConsumeBulk(out[:n])
		}); n != 0 {
			t.Errorf("Segment of %+v: %v allocs/op", h, n)
		}
		if n := testing.AllocsPerRun(1000, func() { SegmentCount(h, pkt, s.layer()) }); n != 0 {
			t.Errorf("SegmentCount: %v allocs/op", n)
		}
	}
}

// BenchmarkSegment splits a 64 KiB TSO packet into 1448-byte segments, as
// a port without TSO would for each super-packet a guest sends.
func BenchmarkSegment(b *testing.B) {
	p, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		b.Fatal(err)
	}
	c, err := p.NewCache(nil)
	if err != nil {
		b.Fatal(err)
	}
	s := spec{mss: testMSS}
	s.payload = pattern(s.maxPayload())
	h, pkt := build(s)
	out := make([]*buffer.Buf, 64)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	segs := 0
	for b.Loop() {
		n, reason := Segment(c, h, pkt, packet.L3, out)
		if n == 0 {
			b.Fatal(reason)
		}
		segs = n
		c.ConsumeBulk(out[:n])
	}
	b.ReportMetric(float64(segs), "segs/op")
	if err := p.Close(); err != nil {
		b.Fatal(err)
	}
}

// SegmentBytes writes what Segment does, into caller memory, also when
// the first element is the packet itself.
func TestSegmentBytes(t *testing.T) {
	for _, s := range []spec{
		{mss: testMSS, payload: pattern(64000)},
		{v6: true, udp: true, l2: true, mss: testMSS, payload: pattern(5000)},
		{v6: true, ext: true, mss: 1000, payload: pattern(3001)},
		{udp: true, mss: 1000, payload: nil},
	} {
		t.Run(fmt.Sprintf("v6=%v/udp=%v/l2=%v/%d", s.v6, s.udp, s.l2, len(s.payload)), func(t *testing.T) {
			_, c := newTestPool(t, buffer.Config{})
			h, pkt := build(s)
			want := make([]*buffer.Buf, SegmentCount(h, pkt, s.layer()))
			n, reason := Segment(c, h, pkt, s.layer(), want)
			if n == 0 {
				t.Fatalf("Segment: %v", reason)
			}
			defer c.ConsumeBulk(want[:n])
			const offset = 16
			for _, inPlace := range []bool{false, true} {
				out := make([][]byte, n+1)
				for i := range out {
					out[i] = make([]byte, offset+testMSS+200)
				}
				src := bytes.Clone(pkt)
				if inPlace {
					out[0] = make([]byte, offset+len(pkt))
					copy(out[0][offset:], pkt)
					src = out[0][offset:]
				}
				sizes := make([]int, n+1)
				got, reason := SegmentBytes(h, src, s.layer(), out, offset, sizes)
				if got != n {
					t.Fatalf("in place %v: SegmentBytes = %d (%v), want %d", inPlace, got, reason, n)
				}
				for i := range n {
					if g := out[i][offset : offset+sizes[i]]; !bytes.Equal(g, want[i].Bytes()) {
						t.Errorf("in place %v: segment %d differs from Segment's", inPlace, i)
					}
				}
				if !inPlace {
					if a := testing.AllocsPerRun(10, func() { SegmentBytes(h, src, s.layer(), out, offset, sizes) }); a != 0 {
						t.Errorf("SegmentBytes allocates %v times", a)
					}
				}
			}
		})
	}
}

func TestSegmentBytesRefuses(t *testing.T) {
	h, pkt := build(spec{mss: 1000, payload: pattern(3500)})
	out := [][]byte{make([]byte, 1100), make([]byte, 1100), make([]byte, 1100), make([]byte, 1100)}
	sizes := make([]int, 4)
	for name, tc := range map[string]struct {
		out    [][]byte
		sizes  []int
		offset int
		want   drop.Reason
	}{
		"too few buffers": {out[:3], sizes, 0, drop.PktTooBig},
		"too few sizes":   {out, sizes[:3], 0, drop.PktTooBig},
		"short buffer":    {out, sizes, 100, drop.PktTooBig},
		"negative offset": {out, sizes, -1, drop.PktTooBig},
	} {
		if n, reason := SegmentBytes(h, pkt, packet.L3, tc.out, tc.offset, tc.sizes); n != 0 || reason != tc.want {
			t.Errorf("%s: SegmentBytes = %d, %v; want 0, %v", name, n, reason, tc.want)
		}
	}
	if n, reason := SegmentBytes(Header{}, pkt, packet.L3, out, 0, sizes); n != 0 || reason != drop.GsoSeg {
		t.Errorf("without GSO: SegmentBytes = %d, %v; want 0, GSO_SEG", n, reason)
	}
}

// splitMatches checks that Split describes the segments Segment makes of
// the same packet, byte for byte, without modifying the packet, and
// without allocating.
func splitMatches(t testing.TB, h Header, pkt []byte, layer packet.Layer, want []*buffer.Buf) {
	t.Helper()
	orig := bytes.Clone(pkt)
	hdrs := make([][]byte, len(want)+1)
	for i := range hdrs {
		hdrs[i] = make([]byte, 256)
	}
	payloads := make([][]byte, len(want)+1)
	n, hdrLen, reason := Split(h, pkt, layer, hdrs, payloads)
	if n != len(want) {
		t.Fatalf("Split = %d (%v), Segment made %d", n, reason, len(want))
	}
	for i := range n {
		got := append(bytes.Clone(hdrs[i][:hdrLen]), payloads[i]...)
		if !bytes.Equal(got, want[i].Bytes()) {
			t.Fatalf("segment %d of %d: Split's differs from Segment's", i, n)
		}
		if len(payloads[i]) > 0 && !within(payloads[i], pkt) {
			t.Fatalf("segment %d: payload is not a piece of the packet", i)
		}
	}
	if !bytes.Equal(pkt, orig) {
		t.Fatal("Split modified its input")
	}
	if a := testing.AllocsPerRun(5, func() { Split(h, pkt, layer, hdrs, payloads) }); a != 0 {
		t.Fatalf("Split allocates %v times", a)
	}
}

// within reports whether p is a subslice of pkt.
func within(p, pkt []byte) bool {
	for i := range pkt {
		if &pkt[i] == &p[0] {
			return i+len(p) <= len(pkt)
		}
	}
	return false
}

// Split against Segment: both IP versions and transports, TAP and TUN,
// options and extension headers, payloads around the segment size and
// odd ones, IDs and sequence numbers that wrap (build starts near the
// wrap), TCP flags that only the first or last segment keeps, and
// Ethernet padding that is not payload.
func TestSplitMatchesSegment(t *testing.T) {
	var specs []spec
	for _, v6 := range []bool{false, true} {
		for _, udp := range []bool{false, true} {
			for _, l2 := range []bool{false, true} {
				for _, size := range []int{0, 1, 999, testMSS - 1, testMSS, testMSS + 1, 3*testMSS + 7, 64001} {
					specs = append(specs, spec{v6: v6, udp: udp, l2: l2, mss: testMSS, payload: pattern(size)})
				}
			}
		}
	}
	specs = append(specs,
		spec{ipOpts: 8, tcpOpts: 12, mss: 1000, payload: pattern(5555)},
		spec{v6: true, ext: true, mss: 1000, payload: pattern(3001)},
		spec{l2: true, vlan: true, mss: 536, payload: pattern(60000)},
		spec{l2: true, pad: 5, mss: 1000, payload: pattern(10)},
		spec{tcpFlags: tcpFIN | tcpPSH | tcpCWR | tcpACK, ecn: true, mss: 1000, payload: pattern(2500)},
		spec{noCsum: true, mss: 1000, payload: pattern(4097)},
		spec{mss: 9, payload: pattern(1001)},
	)
	for _, s := range specs {
		name := fmt.Sprintf("v6=%v/udp=%v/l2=%v/mss=%d/%d", s.v6, s.udp, s.l2, s.mss, len(s.payload))
		t.Run(name, func(t *testing.T) {
			_, c := newTestPool(t, buffer.Config{})
			h, pkt := build(s)
			want := make([]*buffer.Buf, SegmentCount(h, pkt, s.layer()))
			n, reason := Segment(c, h, pkt, s.layer(), want)
			if n == 0 {
				t.Fatalf("Segment: %v", reason)
			}
			defer c.ConsumeBulk(want[:n])
			splitMatches(t, h, pkt, s.layer(), want[:n])
		})
	}
}

func TestSplitRefuses(t *testing.T) {
	h, pkt := build(spec{mss: 1000, payload: pattern(3500)}) // 4 segments, 40 bytes of headers
	hdrs := [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64), make([]byte, 64)}
	payloads := make([][]byte, 4)
	short := [][]byte{make([]byte, 64), make([]byte, 39), make([]byte, 64), make([]byte, 64)}
	for name, tc := range map[string]struct {
		h        Header
		hdrs     [][]byte
		payloads [][]byte
		want     drop.Reason
	}{
		"too few header slots":    {h, hdrs[:3], payloads, drop.PktTooBig},
		"too few payloads":        {h, hdrs, payloads[:3], drop.PktTooBig},
		"a header slot too short": {h, short, payloads, drop.PktTooBig},
		"not GSO":                 {Header{}, hdrs, payloads, drop.GsoSeg},
		"UFO":                     {Header{Flags: h.Flags, GSOType: GSOUDP, GSOSize: h.GSOSize, CsumStart: h.CsumStart, CsumOffset: h.CsumOffset}, hdrs, payloads, drop.GsoSeg},
	} {
		before := bytes.Clone(pkt)
		if n, _, reason := Split(tc.h, pkt, packet.L3, tc.hdrs, tc.payloads); n != 0 || reason != tc.want {
			t.Errorf("%s: Split = %d, %v; want 0, %v", name, n, reason, tc.want)
		}
		if !bytes.Equal(before, pkt) {
			t.Errorf("%s: Split modified the packet", name)
		}
	}
	// More segments than MaxSegments: a forged gso_size.
	h, pkt = build(spec{mss: 100, payload: pattern(100*MaxSegments + 1)})
	big := make([][]byte, MaxSegments+1)
	for i := range big {
		big[i] = make([]byte, 64)
	}
	if n, _, reason := Split(h, pkt, packet.L3, big, make([][]byte, MaxSegments+1)); n != 0 || reason != drop.GsoSeg {
		t.Errorf("%d segments: Split = %d, %v; want 0, GSO_SEG", MaxSegments+1, n, reason)
	}
}

func BenchmarkSplit(b *testing.B) {
	h, pkt := build(spec{mss: testMSS, payload: pattern(64000)})
	hdrs := make([][]byte, MaxSegments)
	for i := range hdrs {
		hdrs[i] = make([]byte, 128)
	}
	payloads := make([][]byte, MaxSegments)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		if n, _, reason := Split(h, pkt, packet.L3, hdrs, payloads); n == 0 {
			b.Fatal(reason)
		}
	}
}
