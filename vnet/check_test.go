package vnet

import (
	"encoding/binary"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
)

// checkCase is one header and packet with what Check must say about it.
type checkCase struct {
	name  string
	h     Header
	pkt   []byte
	layer packet.Layer
	want  drop.Reason // NotSpecified: ok
}

// variant builds s and lets edit change the header and packet.
func variant(name string, s spec, want drop.Reason, edit func(h *Header, pkt []byte) []byte) checkCase {
	h, pkt := build(s)
	if edit != nil {
		pkt = edit(&h, pkt)
	}
	return checkCase{name: name, h: h, pkt: pkt, layer: s.layer(), want: want}
}

// l3 returns the offset of the IP header of a packet built from s.
func (s spec) l3() int {
	switch {
	case !s.l2:
		return 0
	case s.vlan:
		return packet.EthernetHeaderLen + packet.VLANTagLen
	}
	return packet.EthernetHeaderLen
}

func (s spec) l4() int { return s.l3() + s.ipHeaderLen() }

func checkCorpus() []checkCase {
	// Small packets of three segments keep the corpus quick to minimize
	// when it seeds FuzzCheck.
	payload := pattern(100)
	tcp4 := spec{mss: 40, payload: payload}
	tcp6 := spec{v6: true, mss: 40, payload: payload}
	udp4 := spec{udp: true, mss: 40, payload: payload}
	udp6 := spec{v6: true, udp: true, mss: 40, payload: payload}
	tap4 := spec{l2: true, vlan: true, mss: 40, payload: payload}
	tap6 := spec{l2: true, v6: true, ext: true, mss: 40, payload: payload}
	ok := drop.NotSpecified
	set := func(f func(h *Header)) func(*Header, []byte) []byte {
		return func(h *Header, pkt []byte) []byte { f(h); return pkt }
	}
	with := func(s spec, f func(*spec)) spec { f(&s); return s }
	junk := []byte{0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3}

	cases := []checkCase{
		// Valid packets.
		variant("tcp4", tcp4, ok, nil),
		variant("tcp6", tcp6, ok, nil),
		variant("udp4", udp4, ok, nil),
		variant("udp6", udp6, ok, nil),
		variant("tap tcp4 vlan", tap4, ok, nil),
		variant("tap tcp6 ext header", tap6, ok, nil),
		variant("tap udp4 padded", with(udp4, func(s *spec) { s.l2, s.pad = true, 20 }), ok, nil),
		variant("options", with(tcp4, func(s *spec) { s.ipOpts, s.tcpOpts = 8, 12 }), ok, nil),
		variant("tcp4 ecn", with(tcp4, func(s *spec) { s.ecn = true }), ok, nil),
		variant("tcp6 ecn", with(tcp6, func(s *spec) { s.ecn = true }), ok, nil),
		variant("tso without needs_csum", with(tcp4, func(s *spec) { s.noCsum = true }), ok, nil),
		variant("ufo is checked, not segmented", with(udp6, func(s *spec) { s.ufo = true }), ok, nil),
		variant("ufo without needs_csum", with(udp4, func(s *spec) { s.ufo = true }), ok, set(func(h *Header) { h.Flags = 0 })),
		variant("one segment", with(tcp4, func(s *spec) { s.payload = payload[:40] }), ok, nil),
		variant("no payload", with(tcp6, func(s *spec) { s.payload = nil }), ok, nil),
		variant("gso_size 8", with(tcp4, func(s *spec) { s.mss = 8 }), ok, nil),
		variant("gso_size 0xfffe", with(tcp4, func(s *spec) { s.mss = 0xfffe }), ok, nil),
		variant("data_valid", tcp4, ok, set(func(h *Header) { h.Flags |= FlagDataValid })),
		variant("usos 128 segments", with(udp4, func(s *spec) { s.mss = 10; s.payload = pattern(1280) }), ok, nil),
		variant("largest tcp4", with(tcp4, func(s *spec) { s.mss = 1448; s.payload = pattern(s.maxPayload()) }), ok, nil),
		// Checked as the kernel does, but too many segments for Segment.
		variant("tso 129 segments", with(tcp4, func(s *spec) { s.mss = 10; s.payload = pattern(1281) }), ok, nil),
		variant("tso gso_size 60 of 64 KiB", with(tcp6, func(s *spec) { s.mss = 60; s.payload = pattern(s.maxPayload()) }), ok, nil),
		variant("largest tap udp6", with(udp6, func(s *spec) { s.l2, s.mss = true, 1448; s.payload = pattern(s.maxPayload()) }), ok, nil),

		// hdr_len: only a hint.
		variant("hdr_len 0", tcp4, ok, set(func(h *Header) { h.HdrLen = 0 })),
		variant("hdr_len short", with(tcp6, func(s *spec) { s.hdrLenFix = -7 }), ok, nil),
		variant("hdr_len long", with(udp4, func(s *spec) { s.hdrLenFix = 100 }), ok, nil),
		variant("hdr_len 0xffff", tap4, ok, set(func(h *Header) { h.HdrLen = 0xffff })),

		// Without GSO only the offsets are the header's business.
		{name: "plain junk", pkt: junk, layer: packet.L3},
		{name: "plain empty", pkt: nil, layer: packet.L2},
		{name: "needs_csum anywhere", h: Header{Flags: FlagNeedsCsum, CsumStart: 1, CsumOffset: 3}, pkt: junk, layer: packet.L3},
		{name: "needs_csum at the end", h: Header{Flags: FlagNeedsCsum, CsumStart: 6, CsumOffset: 0}, pkt: junk, layer: packet.L3},
		{name: "needs_csum past the end", h: Header{Flags: FlagNeedsCsum, CsumStart: 6, CsumOffset: 1}, pkt: junk, layer: packet.L3, want: drop.DevHdr},
		{name: "csum_start past the end", h: Header{Flags: FlagNeedsCsum, CsumStart: 8}, pkt: junk, layer: packet.L3, want: drop.DevHdr},
		{name: "csum_start 0xffff", h: Header{Flags: FlagNeedsCsum, CsumStart: 0xffff, CsumOffset: 0}, pkt: junk, layer: packet.L3, want: drop.DevHdr},
		{name: "csum_offset 0xffff", h: Header{Flags: FlagNeedsCsum, CsumStart: 0, CsumOffset: 0xffff}, pkt: junk, layer: packet.L3, want: drop.DevHdr},
		{name: "csum offsets wrap uint16", h: Header{Flags: FlagNeedsCsum, CsumStart: 0xffff, CsumOffset: 0xffff}, pkt: junk, layer: packet.L3, want: drop.DevHdr},
		{name: "csum offsets on empty", h: Header{Flags: FlagNeedsCsum}, pkt: nil, layer: packet.L3, want: drop.DevHdr},
		{name: "offsets ignored without needs_csum", h: Header{CsumStart: 0xffff, CsumOffset: 0xffff}, pkt: junk, layer: packet.L3},

		// flags
		{name: "flag rsc_info", h: Header{Flags: 4}, pkt: junk, layer: packet.L3, want: drop.DevHdr},
		{name: "flag 0x80", h: Header{Flags: 0x80}, pkt: junk, layer: packet.L3, want: drop.DevHdr},
		variant("gso flag 0xff", tcp4, drop.DevHdr, set(func(h *Header) { h.Flags = 0xff })),
		variant("gso flag 0x08", tcp6, drop.DevHdr, set(func(h *Header) { h.Flags |= 0x08 })),

		// gso_type
		{name: "ecn alone", h: Header{GSOType: GSOECN}, pkt: junk, layer: packet.L3, want: drop.DevHdr},
		variant("type 2", tcp4, drop.DevHdr, set(func(h *Header) { h.GSOType = 2 })),
		variant("type 6", udp4, drop.DevHdr, set(func(h *Header) { h.GSOType = 6 })),
		variant("type 0x7f", tcp4, drop.DevHdr, set(func(h *Header) { h.GSOType = 0x7f })),
		variant("type 0x40", tcp4, drop.DevHdr, set(func(h *Header) { h.GSOType = 0x40 | GSOTCPv4 })),
		variant("type 0xff", tcp4, drop.DevHdr, set(func(h *Header) { h.GSOType = 0xff })),
		variant("uso ecn", udp4, drop.DevHdr, set(func(h *Header) { h.GSOType |= GSOECN })),
		variant("ufo ecn", with(udp4, func(s *spec) { s.ufo = true }), drop.DevHdr, set(func(h *Header) { h.GSOType |= GSOECN })),
		variant("tcpv4 on ipv6", tcp6, drop.DevHdr, set(func(h *Header) { h.GSOType = GSOTCPv4 })),
		variant("tcpv6 on ipv4", tap4, drop.DevHdr, set(func(h *Header) { h.GSOType = GSOTCPv6 })),
		variant("uso on tcp", tcp4, drop.DevHdr, set(func(h *Header) { h.GSOType = GSOUDPL4; h.CsumOffset = udpCsumOffset })),
		variant("ufo on tcp", tcp6, drop.DevHdr, set(func(h *Header) { h.GSOType = GSOUDP })),
		variant("tcpv4 on udp", udp4, drop.DevHdr, set(func(h *Header) { h.GSOType = GSOTCPv4; h.CsumOffset = tcpCsumOffset })),
		variant("tcpv6 on udp", udp6, drop.DevHdr, set(func(h *Header) { h.GSOType = GSOTCPv6 })),
		variant("tcpv4 on icmp", tcp4, drop.DevHdr, func(h *Header, pkt []byte) []byte {
			pkt[tcp4.l3()+9] = packet.ProtoICMP
			packet.SetIPv4HeaderChecksum(pkt[tcp4.l3():])
			return pkt
		}),
		variant("tcpv4 on arp", tap4, drop.DevHdr, func(h *Header, pkt []byte) []byte {
			h.Flags = 0 // or the checksum offsets, past the ARP packet, fail first
			pkt = pkt[:tap4.l3()+packet.ARPLen]
			pkt[16], pkt[17] = 0x08, 0x06
			packet.PutARP(pkt[tap4.l3():], packet.ARPRequest, guestMAC, src4, [6]byte{}, dst4)
			return pkt
		}),

		// gso_size
		variant("gso_size 0", tcp4, drop.DevHdr, set(func(h *Header) { h.GSOSize = 0 })),
		variant("gso_size 7", with(tcp4, func(s *spec) { s.mss = 7 }), drop.DevHdr, nil),
		variant("gso_size 1 one segment", with(udp6, func(s *spec) { s.mss = 1; s.payload = payload[:1] }), drop.DevHdr, nil),
		variant("gso_size 0 one segment", with(udp6, func(s *spec) { s.payload = payload[:1] }), drop.DevHdr, set(func(h *Header) { h.GSOSize = 0 })),
		variant("gso_size GSO_BY_FRAGS", tcp4, drop.DevHdr, set(func(h *Header) { h.GSOSize = 0xffff })),
		variant("uso 129 segments", with(udp4, func(s *spec) { s.mss = 10; s.payload = pattern(1281) }), drop.DevHdr, nil),
		variant("uso gso_size 1", with(udp6, func(s *spec) { s.mss = 1; s.payload = pattern(64000) }), drop.DevHdr, nil),

		// csum_start and csum_offset of a GSO packet
		variant("gso csum_start at ip", tcp4, drop.DevHdr, set(func(h *Header) { h.CsumStart = uint16(tcp4.l3()) })),
		variant("gso csum_start off by one", tap6, drop.DevHdr, set(func(h *Header) { h.CsumStart++ })),
		variant("gso csum_start before ext header", tap6, drop.DevHdr, set(func(h *Header) { h.CsumStart -= 8 })),
		variant("gso csum_start past the end", tcp4, drop.DevHdr, set(func(h *Header) { h.CsumStart = 0xfff0 })),
		variant("tso csum_offset 6", tcp4, drop.DevHdr, set(func(h *Header) { h.CsumOffset = udpCsumOffset })),
		variant("uso csum_offset 16", udp6, drop.DevHdr, set(func(h *Header) { h.CsumOffset = tcpCsumOffset })),
		variant("uso csum_offset 0xffff", udp6, drop.DevHdr, set(func(h *Header) { h.CsumOffset = 0xffff })),
		variant("uso without needs_csum", udp4, drop.DevHdr, set(func(h *Header) { h.Flags = 0 })),
		variant("uso data_valid instead", udp4, drop.DevHdr, set(func(h *Header) { h.Flags = FlagDataValid })),

		// The packet behind a GSO header.
		variant("ipv4 more fragments", tcp4, drop.InvalidProto, func(h *Header, pkt []byte) []byte {
			pkt[tcp4.l3()+6] |= 0x20
			packet.SetIPv4HeaderChecksum(pkt[tcp4.l3():])
			return pkt
		}),
		variant("ipv4 fragment offset", udp4, drop.InvalidProto, func(h *Header, pkt []byte) []byte {
			pkt[udp4.l3()+7] = 1
			packet.SetIPv4HeaderChecksum(pkt[udp4.l3():])
			return pkt
		}),
		variant("ipv6 fragment header", tap6, drop.InvalidProto, func(h *Header, pkt []byte) []byte {
			l3 := tap6.l3()
			// The destination options header becomes a fragment header:
			// offset 0, M set.
			pkt[l3+6] = 44
			copy(pkt[l3+packet.IPv6HeaderLen+2:], []byte{0, 1, 0, 0, 0, 1})
			return pkt
		}),
		variant("ip header truncated", tcp4, drop.HdrTrunc, func(h *Header, pkt []byte) []byte {
			h.Flags = 0
			return pkt[:10]
		}),
		variant("ipv6 header truncated", tcp6, drop.HdrTrunc, func(h *Header, pkt []byte) []byte {
			h.Flags = 0
			return pkt[:39]
		}),
		variant("vlan tag truncated", tap4, drop.HdrTrunc, func(h *Header, pkt []byte) []byte {
			h.Flags = 0
			return pkt[:16]
		}),
		variant("tcp header cut by ip length", tcp4, drop.HdrTrunc, func(h *Header, pkt []byte) []byte {
			binary.BigEndian.PutUint16(pkt[2:], packet.IPv4HeaderLen+10)
			packet.SetIPv4HeaderChecksum(pkt)
			h.Flags = 0
			return pkt[:packet.IPv4HeaderLen+10]
		}),
		variant("udp header cut by ipv6 length", udp6, drop.HdrTrunc, func(h *Header, pkt []byte) []byte {
			binary.BigEndian.PutUint16(pkt[4:], 4)
			return pkt
		}),
		variant("ethernet too short", tap4, drop.PktTooSmall, func(h *Header, pkt []byte) []byte {
			h.Flags = 0
			return pkt[:13]
		}),
		variant("tun empty", tcp4, drop.PktTooSmall, func(h *Header, pkt []byte) []byte {
			h.Flags = 0
			return pkt[:0]
		}),
		variant("ip version 5", tcp4, drop.InvalidProto, func(h *Header, pkt []byte) []byte {
			pkt[0] = 5<<4 | pkt[0]&0x0f
			return pkt
		}),
		variant("ipv4 total length past the end", tcp4, drop.InvalidProto, func(h *Header, pkt []byte) []byte {
			return pkt[:len(pkt)-1]
		}),
		variant("tcp data offset 4", tcp6, drop.InvalidProto, func(h *Header, pkt []byte) []byte {
			pkt[tcp6.l4()+12] = 4 << 4
			return pkt
		}),
		variant("qinq", tap4, drop.UnhandledProto, func(h *Header, pkt []byte) []byte {
			pkt[16], pkt[17] = 0x81, 0x00
			return pkt
		}),
		variant("tcp4 frame over 64 KiB", with(tap4, func(s *spec) { s.payload = pattern(s.maxPayload()); s.pad = 1 }), drop.PktTooBig, nil),
		variant("ipv6 packet over 64 KiB", with(tcp6, func(s *spec) { s.payload = pattern(s.maxPayload() + 1) }), drop.PktTooBig, nil),
		variant("tun tcp4 with trailing byte over 64 KiB", with(tcp4, func(s *spec) { s.payload = pattern(s.maxPayload()); s.pad = 1 }), drop.PktTooBig, nil),

		// The layer is the caller's.
		variant("layer 7", tcp4, drop.NotSpecified, func(h *Header, pkt []byte) []byte { return pkt }),
	}
	cases[len(cases)-1].layer = 7
	cases[len(cases)-1].want = 0xff // sentinel: must fail, with NotSpecified
	return cases
}

func TestCheckCorpus(t *testing.T) {
	p, c := newTestPool(t, buffer.Config{})
	out := make([]*buffer.Buf, 4096)
	for _, tc := range checkCorpus() {
		t.Run(tc.name, func(t *testing.T) {
			wantOK, want := tc.want == drop.NotSpecified, tc.want
			if tc.want == 0xff {
				want = drop.NotSpecified
			}
			ok, reason := Check(tc.h, tc.pkt, tc.layer)
			if ok != wantOK || !ok && reason != want {
				t.Fatalf("Check(%+v, %d bytes) = %v, %v; want ok=%v, %v", tc.h, len(tc.pkt), ok, reason, wantOK, want)
			}
			n, reason := Segment(c, tc.h, tc.pkt, tc.layer, out)
			switch {
			case !ok || !tc.h.IsGSO() || tc.h.GSOType == GSOUDP || tooManySegments(tc.h, tc.pkt, tc.layer):
				if n != 0 || reason != drop.GsoSeg {
					t.Fatalf("Segment = %d, %v; want 0, GSO_SEG", n, reason)
				}
				if k := SegmentCount(tc.h, tc.pkt, tc.layer); k != 0 {
					t.Fatalf("SegmentCount = %d for a packet Segment refuses", k)
				}
			case n == 0:
				t.Fatalf("Segment of a checked packet failed: %v", reason)
			default:
				checkSegments(t, p, tc.h, tc.pkt, tc.layer, out[:n], tc.h.NeedsCsum() || tc.h.GSOType != GSOTCPv4)
				c.ConsumeBulk(out[:n])
			}
			for _, b := range out {
				if b != nil && n == 0 {
					t.Fatal("a failed Segment left a buffer in out")
				}
			}
			clear(out)
			if k := inUse(p, c); k != 0 {
				t.Fatalf("%d buffers in use", k)
			}
		})
	}
}

// Every field of the header appears in the corpus with every reason Check
// gives.
func TestCheckCorpusCoverage(t *testing.T) {
	reasons := map[drop.Reason]bool{}
	for _, tc := range checkCorpus() {
		reasons[tc.want] = true
	}
	for _, r := range []drop.Reason{drop.NotSpecified, drop.DevHdr, drop.InvalidProto, drop.HdrTrunc, drop.PktTooSmall, drop.PktTooBig, drop.UnhandledProto} {
		if !reasons[r] {
			t.Errorf("no case for %v", r)
		}
	}
}

func TestCheckAllocatesNothing(t *testing.T) {
	for _, s := range []spec{
		{mss: 1448, payload: pattern(4000)},
		{v6: true, udp: true, l2: true, vlan: true, mss: 1000, payload: pattern(4000)},
	} {
		h, pkt := build(s)
		if n := testing.AllocsPerRun(1000, func() {
			if ok, reason := Check(h, pkt, s.layer()); !ok {
				panic(reason)
			}
		}); n != 0 {
			t.Errorf("Check of %+v: %v allocs/op", h, n)
		}
	}
}
