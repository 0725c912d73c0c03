package vnet

import (
	"bytes"
	"encoding/binary"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/packet"
)

// FuzzCoalesce builds a burst from the segments of a GSO packet, damages
// it as the fuzzer says (flipped bytes anywhere, segments dropped,
// repeated or swapped, checksums redone after a header change, checksum
// offload per segment), and plans it. Whatever the burst, every packet
// must leave exactly once, packets of one flow must keep their order, and
// every GSO packet planned must pass Check and segment back into exactly
// the packets it was made of.
func FuzzCoalesce(f *testing.F) {
	f.Add(false, false, false, uint16(1400), uint8(10), []byte{})
	f.Add(true, true, true, uint16(1200), uint8(20), []byte{0, 3, 7, 1, 2, 0, 2, 5, 0, 4, 1, 1})
	f.Add(false, true, false, uint16(100), uint8(70), []byte{3, 10, 40, 5, 3, 0, 1, 9, 9})
	f.Add(true, false, false, uint16(536), uint8(8), []byte{0, 2, 30, 4, 2, 0, 5, 6, 0})
	p, c := fuzzPool(f, 300, 8)
	out := make([]*buffer.Buf, GROMaxSegments)
	scratch := make([]byte, GROHeaderRoom)
	baseline := inUse(p, c)
	f.Fuzz(func(t *testing.T, v6, udp, l2 bool, mss uint16, nseg uint8, ops []byte) {
		if mss < 8 || mss > 1400 || nseg == 0 || nseg > 80 || len(ops) > 60 {
			return
		}
		s := spec{v6: v6, udp: udp, l2: l2, mss: int(mss), payload: fill[:min(int(mss)*int(nseg), 65000-int(mss))]}
		layer := s.layer()
		h, pkt := build(s)
		pkts := segmentCopies(t, c, h, pkt, layer)
		hdrs := make([]Header, len(pkts))
		pkts, hdrs = damage(t, pkts, hdrs, layer, ops)

		g := NewCoalescer(layer, allGRO, 65535+18)
		g.Plan(pkts, hdrs)
		pos := checkPlan(t, g, len(pkts))
		for i := range pkts {
			for j := i + 1; j < len(pkts); j++ {
				si, sj := &g.segs[i], &g.segs[j]
				if si.flow && sj.flow && sameFlow(pkts[i], si, pkts[j], sj) && pos[i] > pos[j] {
					t.Fatalf("packets %d and %d of one flow leave at %d and %d", i, j, pos[i], pos[j])
				}
			}
		}
		for i := range pkts {
			if g.GROCount(i) > 1 {
				checkRun(t, g, c, pkts, i, layer, scratch, out)
			}
		}
		if k := inUse(p, c); k != baseline {
			t.Fatalf("%d buffers in use after the iteration, %d before", k, baseline)
		}
	})
}

// damage applies the fuzzer's operations, three bytes each, to a burst.
func damage(t *testing.T, pkts [][]byte, hdrs []Header, layer packet.Layer, ops []byte) ([][]byte, []Header) {
	for ; len(ops) >= 3; ops = ops[3:] {
		if len(pkts) == 0 {
			break
		}
		i, arg := int(ops[1])%len(pkts), int(ops[2])
		switch ops[0] % 6 {
		case 0: // flip a byte of the headers or just after them
			pkts[i][arg%min(len(pkts[i]), 90)] ^= byte(arg) | 1
		case 1: // drop a packet
			pkts, hdrs = append(pkts[:i], pkts[i+1:]...), append(hdrs[:i], hdrs[i+1:]...)
		case 2: // repeat a packet
			pkts = append(pkts[:i+1], append([][]byte{bytes.Clone(pkts[i])}, pkts[i+1:]...)...)
			hdrs = append(hdrs[:i+1], append([]Header{hdrs[i]}, hdrs[i+1:]...)...)
		case 3: // swap two packets
			j := arg % len(pkts)
			pkts[i], pkts[j] = pkts[j], pkts[i]
			hdrs[i], hdrs[j] = hdrs[j], hdrs[i]
		case 4: // redo the checksums of a packet, as a sender changing a header would
			redoChecksums(pkts[i], layer)
		case 5: // checksum offload: the pseudo-header sum and a header asking for the rest
			var ph packet.Headers
			if ok, _ := packet.Parse(pkts[i], layer, &ph); ok && ph.L4Off != 0 && !ph.Fragment {
				off := uint16(udpCsumOffset)
				if ph.IPProto == packet.ProtoTCP {
					off = tcpCsumOffset
				}
				end := ph.L3Off + ph.L3Len
				if ph.L4Off+int(off)+2 <= end {
					l4 := pkts[i][ph.L4Off:end]
					binary.BigEndian.PutUint16(l4[off:], uint16(packet.PseudoHeaderChecksum(ph.IPProto, ph.SrcIP, ph.DstIP, len(l4))))
					hdrs[i] = Header{Flags: FlagNeedsCsum, CsumStart: uint16(ph.L4Off), CsumOffset: off}
				}
			}
		}
	}
	return pkts, hdrs
}

// redoChecksums recomputes the IPv4 header and transport checksums of a
// packet that parses.
func redoChecksums(pkt []byte, layer packet.Layer) {
	var ph packet.Headers
	if ok, _ := packet.Parse(pkt, layer, &ph); !ok || ph.L4Off == 0 || ph.Fragment {
		return
	}
	if ph.Proto == packet.EtherTypeIPv4 {
		packet.SetIPv4HeaderChecksum(pkt[ph.L3Off:])
	}
	off := udpCsumOffset
	if ph.IPProto == packet.ProtoTCP {
		off = tcpCsumOffset
	}
	h := Header{Flags: FlagNeedsCsum, CsumStart: uint16(ph.L4Off), CsumOffset: uint16(off)}
	end := ph.L3Off + ph.L3Len
	if ph.L4Off+off+2 > end {
		return
	}
	l4 := pkt[ph.L4Off:end]
	binary.BigEndian.PutUint16(l4[off:], uint16(packet.PseudoHeaderChecksum(ph.IPProto, ph.SrcIP, ph.DstIP, len(l4))))
	FinishChecksum(h, pkt[:end])
}

// checkPlan checks that the plan sends every packet exactly once, runs in
// order, and returns the position each packet leaves at: its run's first
// packet's.
func checkPlan(t *testing.T, g *Coalescer, n int) []int {
	pos := make([]int, n)
	seen := make([]bool, n)
	for i := range n {
		k := g.GROCount(i)
		if k == 0 {
			continue
		}
		walked, prev := 0, -1
		for j := i; j >= 0; j = g.GRONext(j) {
			if j <= prev || j >= n || seen[j] || (j != i && g.GROCount(j) != 0) {
				t.Fatalf("run of packet %d reaches packet %d (after %d) wrongly", i, j, prev)
			}
			seen[j], pos[j], prev = true, i, j
			walked++
		}
		if walked != k || k > GROMaxSegments {
			t.Fatalf("run of packet %d: %d packets, GROCount %d", i, walked, k)
		}
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("packet %d is in no run", i)
		}
	}
	return pos
}

// checkRun checks the GSO packet led by packet i: Check accepts it, and
// Segment turns it back into its packets, but for the fields the merged
// packet does not keep per segment (the IPv4 ID where DF makes it
// meaningless, and the checksums, which must be right in what Segment
// makes).
func checkRun(t *testing.T, g *Coalescer, c *buffer.Cache, pkts [][]byte, i int, layer packet.Layer, scratch []byte, out []*buffer.Buf) {
	hdr := g.GROHeaders(i, pkts[i], scratch)
	h, _ := Decode(hdr)
	merged := bytes.Clone(hdr[HeaderLen:])
	var members []int
	for j := i; j >= 0; j = g.GRONext(j) {
		merged = append(merged, g.GROPayload(j, pkts[j])...)
		members = append(members, j)
	}
	if ok, reason := Check(h, merged, layer); !ok {
		t.Fatalf("run of packet %d: Check refuses the merged packet: %v (%+v)", i, reason, h)
	}
	n, reason := Segment(c, h, merged, layer, out)
	if n != len(members) {
		t.Fatalf("run of %d packets segments into %d (%v)", len(members), n, reason)
	}
	defer func() {
		for _, b := range out[:n] {
			c.Consume(b)
		}
	}()
	s := &g.segs[i]
	for k, j := range members {
		got, want := out[k].Bytes(), pkts[j][:g.segs[j].end]
		if len(got) != len(want) {
			t.Fatalf("run of packet %d: segment %d is %d bytes, packet %d was %d", i, k, len(got), j, len(want))
		}
		var ph packet.Headers
		if ok, _ := packet.Parse(got, layer, &ph); !ok || !packet.TransportChecksumOK(got, &ph) {
			t.Fatalf("run of packet %d: segment %d has a bad checksum", i, k)
		}
		skip := func(at int32, n int32) {
			copy(got[at:at+n], want[at:at+n])
		}
		got = bytes.Clone(got)
		if s.v4 {
			skip(s.l3Off+10, 2)
			if s.df {
				skip(s.l3Off+4, 2)
			}
		}
		if s.tcp {
			skip(s.l4Off+tcpCsumOffset, 2)
		} else {
			skip(s.l4Off+udpCsumOffset, 2)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("run of packet %d: segment %d differs from packet %d\n got % x\nwant % x", i, k, j, got[:s.hdrLen], want[:s.hdrLen])
		}
	}
}
