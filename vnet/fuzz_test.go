package vnet

import (
	"bytes"
	"encoding/binary"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
)

// fuzzPool returns a pool and cache shared by the iterations of one fuzz
// target (each worker process runs them one at a time, so one cache
// owner), checked for leaks when the target ends. Its GSO class is small,
// so that large segments run it out and exercise drop.NoMem.
func fuzzPool(f *testing.F, mtu, gso int) (*buffer.Pool, *buffer.Cache) {
	p, err := buffer.NewPool(buffer.Config{
		Classes:   []buffer.ClassConfig{{Room: 2048, Count: mtu}, {Room: 65536, Count: gso}},
		CacheSize: 32,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		if err := p.Close(); err != nil {
			f.Errorf("pool leak check: %v", err)
		}
	})
	c, err := p.NewCache(nil)
	if err != nil {
		f.Fatal(err)
	}
	return p, c
}

// FuzzCheck feeds random headers and packets to Check, and everything
// Check accepts to FinishChecksum and Segment: none may panic, Check may
// only give the documented reasons, FinishChecksum must accept the offsets
// Check accepted, and Segment must either produce valid segments or fail
// with a reason, leaving no buffer taken.
//
// The packet is the fuzzed prefix followed by fill bytes of a fuzzed
// length. What decides the paths taken is in the headers; leaving the
// payload out of the fuzzer's input keeps inputs short, which matters
// because the fuzzer minimizes each new input with a number of runs that
// grows as the square of its length, and a 64 KiB packet costs it nothing.
func FuzzCheck(f *testing.F) {
	add := func(h Header, prefix []byte, extra int, l2 bool) {
		hdr := make([]byte, HeaderLen)
		h.Encode(hdr)
		f.Add(hdr, prefix, uint16(extra), l2)
	}
	for _, tc := range checkCorpus() {
		if tc.layer > packet.L3 {
			continue
		}
		prefix, extra := splitFill(tc.pkt)
		if len(prefix) <= maxPrefix {
			add(tc.h, prefix, extra, tc.layer == packet.L2)
		}
	}
	for _, s := range []spec{
		{mss: testMSS, payload: fill[:64000]},
		{v6: true, udp: true, l2: true, vlan: true, mss: testMSS, payload: fill[:64000]},
		{v6: true, ext: true, mss: 9000, payload: fill[:30000]},
		{l2: true, udp: true, ipOpts: 8, mss: 100, payload: fill[:12000]},
		{tcpOpts: 12, noCsum: true, mss: 536, payload: fill[:5000]},
	} {
		h, pkt := build(s)
		add(h, pkt[:len(pkt)-len(s.payload)], len(s.payload), s.l2)
	}
	h, pkt := partial(spec{payload: fill[:1000]})
	add(h, pkt[:len(pkt)-1000], 1000, false)
	add(Header{Flags: 1, GSOType: 1}, []byte{0x45}, 0, false)

	const maxOut = 256
	p, c := fuzzPool(f, maxOut+44, 8)
	out := make([]*buffer.Buf, maxOut)
	baseline := inUse(p, c)

	f.Fuzz(func(t *testing.T, hdr, prefix []byte, extra uint16, l2 bool) {
		// The mutator grows inputs to kilobytes, whose minimization
		// then takes the rest of a short run; the headers fit in less.
		if len(hdr) > 2*HeaderLen || len(prefix) > maxPrefix {
			return
		}
		pkt := append(bytes.Clone(prefix), fill[:extra]...)
		h, ok := Decode(hdr)
		if ok != (len(hdr) >= HeaderLen) {
			t.Fatalf("Decode of %d bytes: %v", len(hdr), ok)
		}
		layer := packet.L3
		if l2 {
			layer = packet.L2
		}
		orig := bytes.Clone(pkt)
		ok, reason := Check(h, pkt, layer)
		if !ok {
			switch reason {
			case drop.DevHdr, drop.HdrTrunc, drop.PktTooSmall, drop.PktTooBig, drop.InvalidProto, drop.UnhandledProto:
			default:
				t.Fatalf("Check: undocumented reason %v", reason)
			}
			if n, reason := Segment(c, h, pkt, layer, out); n != 0 || reason != drop.GsoSeg {
				t.Fatalf("Segment of a rejected packet = %d, %v", n, reason)
			}
			if n := SegmentCount(h, pkt, layer); n != 0 {
				t.Fatalf("SegmentCount of a rejected packet = %d", n)
			}
		}
		if ok && h.NeedsCsum() {
			finished := bytes.Clone(pkt)
			if !FinishChecksum(h, finished) {
				t.Fatalf("FinishChecksum refused %+v, which Check accepted", h)
			}
			field := int(h.CsumStart) + int(h.CsumOffset)
			if !bytes.Equal(finished[:field], pkt[:field]) || !bytes.Equal(finished[field+2:], pkt[field+2:]) {
				t.Fatal("FinishChecksum changed more than the checksum field")
			}
		} else {
			FinishChecksum(h, bytes.Clone(pkt)) // must not panic
		}
		if ok && h.IsGSO() {
			fuzzSegment(t, p, c, h, pkt, layer, out)
		}
		if !bytes.Equal(pkt, orig) {
			t.Fatal("the packet was modified")
		}
		if k := inUse(p, c); k != baseline {
			t.Fatalf("%d buffers in use after the iteration, %d before", k, baseline)
		}
	})
}

// fill is what follows the fuzzed prefix of FuzzCheck's packets: the
// bytes pattern gives, so that a prefix with the headers of a packet
// built from a spec is followed by that packet's payload.
var fill = pattern(65535)

// maxPrefix bounds the fuzzed part of FuzzCheck's packets: enough for
// every header Check looks at (a VLAN tag, IPv6 with extension headers,
// TCP with 40 bytes of options) and some payload.
const maxPrefix = 256

// splitFill splits a packet that ends with a payload build put there into
// the headers before it and the payload's length: the payload is what
// fill starts with.
func splitFill(pkt []byte) (prefix []byte, extra int) {
	for o := range pkt {
		if len(pkt)-o <= len(fill) && bytes.Equal(pkt[o:], fill[:len(pkt)-o]) {
			return pkt[:o], len(pkt) - o
		}
	}
	return pkt, 0
}

// fuzzSegment segments a packet Check accepted and checks the outcome.
func fuzzSegment(t *testing.T, p *buffer.Pool, c *buffer.Cache, h Header, pkt []byte, layer packet.Layer, out []*buffer.Buf) {
	want := SegmentCount(h, pkt, layer)
	n, reason := Segment(c, h, pkt, layer, out)
	switch {
	case h.GSOType == GSOUDP:
		if want != 0 || n != 0 || reason != drop.GsoSeg {
			t.Fatalf("UFO: SegmentCount %d, Segment %d, %v", want, n, reason)
		}
		return
	case tooManySegments(h, pkt, layer):
		if want != 0 || n != 0 || reason != drop.GsoSeg {
			t.Fatalf("more than %d segments: SegmentCount %d, Segment %d, %v", MaxSegments, want, n, reason)
		}
		return
	case want < 1:
		t.Fatalf("SegmentCount = %d for a checked GSO packet", want)
	case want > len(out):
		if n != 0 || reason != drop.GsoSeg {
			t.Fatalf("%d segments into %d slots: %d, %v", want, len(out), n, reason)
		}
		return
	case n == 0:
		if reason != drop.NoMem {
			t.Fatalf("Segment of a checked packet: %v", reason)
		}
		return
	case n != want:
		t.Fatalf("Segment made %d segments, SegmentCount said %d", n, want)
	}
	defer c.ConsumeBulk(out[:n])
	checkSegments(t, p, h, pkt, layer, out[:n], guestSumMatches(h, pkt, layer))
}

// tooManySegments reports whether a packet Check accepts would make more
// than MaxSegments segments, which Segment refuses.
func tooManySegments(h Header, pkt []byte, layer packet.Layer) bool {
	var g gsoPacket
	ok, _ := g.parse(h, pkt, layer)
	return ok && g.segments() > MaxSegments
}

// guestSumMatches reports whether the transport checksums of the segments
// must verify: the guest's pseudo-header sum, which Segment follows, must
// be that of the IP header's addresses, which TransportChecksumOK uses.
func guestSumMatches(h Header, pkt []byte, layer packet.Layer) bool {
	if !h.NeedsCsum() {
		return true
	}
	var ph packet.Headers
	packet.Parse(pkt, layer, &ph)
	want := packet.PseudoHeaderChecksum(ph.IPProto, ph.SrcIP, ph.DstIP, ph.L3Off+ph.L3Len-ph.L4Off)
	got := uint32(binary.BigEndian.Uint16(pkt[int(h.CsumStart)+int(h.CsumOffset):]))
	return got%0xffff == want%0xffff // 0 and 0xffff are the same number
}

// FuzzSegment builds valid TSO and USO packets from fuzzed sizes, options
// and flags, and checks every segment Segment makes of them, and that
// Split describes the same segments.
func FuzzSegment(f *testing.F) {
	f.Add(false, false, false, false, uint8(0), uint8(0x18), uint16(3000), uint16(1448), byte(0))
	f.Add(true, true, true, true, uint8(0xff), uint8(0xff), uint16(64000), uint16(1448), byte(0x5a))
	f.Add(false, true, true, false, uint8(0x42), uint8(0), uint16(1), uint16(1), byte(1))
	f.Add(true, false, false, true, uint8(0x39), uint8(0x99), uint16(65535), uint16(9000), byte(7))
	f.Add(false, false, true, true, uint8(0x86), uint8(0x11), uint16(1448), uint16(1448), byte(2))
	// Forged GSO headers: a 64 KiB TSO packet in segments of 60 bytes,
	// and a gso_size below the kernel's minimum.
	f.Add(false, false, false, false, uint8(0), uint8(0x10), uint16(64000), uint16(60), byte(3))
	f.Add(true, false, true, false, uint8(0), uint8(0x10), uint16(500), uint16(7), byte(4))

	const maxOut = 512
	p, c := fuzzPool(f, maxOut+88, 40)
	out := make([]*buffer.Buf, maxOut)
	baseline := inUse(p, c)

	f.Fuzz(func(t *testing.T, v6, udp, l2, vlan bool, opts, flags uint8, size, mss uint16, fill byte) {
		s := spec{
			v6: v6, udp: udp, l2: l2, vlan: vlan && l2,
			ext:      v6 && opts&1 != 0,
			ipOpts:   int(opts>>1&3) * 4,
			tcpOpts:  int(opts>>3&7) * 4,
			noCsum:   !udp && opts&0x80 != 0,
			ecn:      !udp && flags&tcpCWR != 0,
			tcpFlags: flags,
		}
		if v6 {
			s.ipOpts = 0
		}
		if udp {
			s.tcpOpts = 0
		}
		if l2 && opts&0x40 != 0 {
			s.pad = 5
		}
		// Padding counts toward the 64 KiB a GSO frame may have after
		// its Ethernet header.
		s.payload = make([]byte, int(size)%(s.maxPayload()-s.pad+1))
		for i := range s.payload {
			s.payload[i] = byte(i*7+i>>9) ^ fill
		}
		// Keep the number of segments within out: mss as small as 1
		// still gets tried, on small packets.
		s.mss = max(int(mss), 1, (len(s.payload)+maxOut-1)/maxOut)
		h, pkt := build(s)
		segs := max(1, (len(s.payload)+s.mss-1)/s.mss)
		ok, reason := Check(h, pkt, s.layer())
		switch {
		case s.mss < minGSOSize || s.mss == 0xffff || udp && segs > udpMaxSegments:
			if ok || reason != drop.DevHdr {
				t.Fatalf("Check of %+v = %v, %v; want DEV_HDR", h, ok, reason)
			}
			return
		case !ok:
			t.Fatalf("Check of a valid packet (%+v): %v", h, reason)
		case segs > MaxSegments:
			// A TSO packet the kernel takes, but too costly to split.
			if n := SegmentCount(h, pkt, s.layer()); n != 0 {
				t.Fatalf("SegmentCount = %d of %d segments, want 0", n, segs)
			}
			if n, reason := Segment(c, h, pkt, s.layer(), out); n != 0 || reason != drop.GsoSeg {
				t.Fatalf("Segment of %d segments = %d, %v; want 0, GSO_SEG", segs, n, reason)
			}
			return
		}
		if n := SegmentCount(h, pkt, s.layer()); n != segs {
			t.Fatalf("SegmentCount = %d, want %d", n, segs)
		}
		n, reason := Segment(c, h, pkt, s.layer(), out)
		if n != segs {
			t.Fatalf("Segment = %d, %v; want %d segments", n, reason, segs)
		}
		checkSegments(t, p, h, pkt, s.layer(), out[:n], true)
		splitMatches(t, h, pkt, s.layer(), out[:n])
		c.ConsumeBulk(out[:n])
		if k := inUse(p, c); k != baseline {
			t.Fatalf("%d buffers in use, %d before", k, baseline)
		}
	})
}
