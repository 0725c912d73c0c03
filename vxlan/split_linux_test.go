package vxlan

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
	"softnet.dev/tun"
	"softnet.dev/vnet"
)

// tso describes a guest's TSO packet for tsoPacket.
type tso struct {
	v6      bool
	l3      bool // an IP packet (a TUN guest's), not a frame
	payload int
	mss     int
	tcpOpts int // bytes of TCP options, a multiple of 4
}

const firstSeq = 0xffff_fc00 // wraps within a few segments

// tsoPacket returns a TSO packet as a guest's TAP or TUN device hands it
// over (partial checksum, ACK|PSH|FIN so that only the last segment
// keeps PSH and FIN), its virtio-net header, and its payload.
func tsoPacket(s tso) ([]byte, vnet.Header, []byte) {
	src, dst := netip.MustParseAddr("198.18.21.1"), netip.MustParseAddr("198.18.22.2")
	et, ipLen, kind := packet.EtherTypeIPv4, 20, uint8(vnet.GSOTCPv4)
	if s.v6 {
		src, dst = netip.MustParseAddr("2001:db8:21::1"), netip.MustParseAddr("2001:db8:22::2")
		et, ipLen, kind = packet.EtherTypeIPv6, 40, vnet.GSOTCPv6
	}
	l2 := 14
	if s.l3 {
		l2 = 0
	}
	tcpLen := 20 + s.tcpOpts
	b := make([]byte, l2+ipLen+tcpLen+s.payload)
	if !s.l3 {
		packet.PutEthernet(b, macB, macA, et)
	}
	ip := b[l2:]
	if s.v6 {
		packet.PutIPv6(ip, src, dst, packet.ProtoTCP, 64, tcpLen+s.payload)
	} else {
		packet.PutIPv4(ip, src, dst, packet.ProtoTCP, 64, tcpLen+s.payload)
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		packet.SetIPv4HeaderChecksum(ip[:20])
	}
	tcp := ip[ipLen:]
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 5001)
	binary.BigEndian.PutUint32(tcp[4:], firstSeq)
	tcp[12] = byte(tcpLen/4) << 4
	tcp[13] = 0x19 // ACK, PSH, FIN
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	for i := 20; i < tcpLen; i++ {
		tcp[i] = 1 // NOP
	}
	binary.BigEndian.PutUint16(tcp[16:], uint16(packet.PseudoHeaderChecksum(packet.ProtoTCP, src, dst, tcpLen+s.payload)))
	payload := tcp[tcpLen:]
	for i := range payload {
		payload[i] = byte(i*7 + i>>8)
	}
	h := vnet.Header{Flags: vnet.FlagNeedsCsum, GSOType: kind, HdrLen: uint16(l2 + ipLen + tcpLen), GSOSize: uint16(s.mss), CsumStart: uint16(l2 + ipLen), CsumOffset: 16}
	return b, h, bytes.Clone(payload)
}

// withVnetHdr returns a buffer of c holding pkt with h before it, flagged
// as a TAP or TUN device's.
func withVnetHdr(t testing.TB, c *buffer.Cache, pkt []byte, h vnet.Header) *buffer.Buf {
	t.Helper()
	class, ok := c.Pool().ClassFor(len(pkt))
	if !ok {
		t.Fatalf("no class for %d bytes", len(pkt))
	}
	b, err := c.Get(class)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := b.Append(len(pkt))
	copy(d, pkt)
	h.Encode(b.Frame()[b.Headroom()-vnet.HeaderLen:])
	b.SetFlags(tun.FlagVnetHdr)
	return b
}

// checkTSOSegments checks the packets that arrived for one TSO packet:
// each within the MSS, its checksums right, sequence numbers that follow
// on from the first (wrapping), IPv4 IDs that count up, PSH and FIN only
// on the last, and the payloads in order making up the original.
func checkTSOSegments(t *testing.T, got [][]byte, layer packet.Layer, s tso, payload []byte) {
	t.Helper()
	want := max(1, (s.payload+s.mss-1)/s.mss)
	if len(got) != want {
		t.Fatalf("%d segments arrived, want %d", len(got), want)
	}
	var joined []byte
	var id0 uint16
	for i, f := range got {
		var h packet.Headers
		if ok, reason := packet.Parse(f, layer, &h); !ok {
			t.Fatalf("segment %d: %v", i, reason)
		}
		if !packet.TransportChecksumOK(f, &h) {
			t.Fatalf("segment %d: TCP checksum does not verify", i)
		}
		ip := f[h.L3Off:]
		if !s.v6 {
			if !packet.IPv4HeaderChecksumOK(ip[:20]) {
				t.Fatalf("segment %d: IPv4 header checksum", i)
			}
			id := binary.BigEndian.Uint16(ip[4:])
			if i == 0 {
				id0 = id
			} else if id != id0+uint16(i) {
				t.Fatalf("segment %d: IPv4 ID %d, first %d", i, id, id0)
			}
		}
		tcp := f[h.L4Off:]
		if seq := binary.BigEndian.Uint32(tcp[4:]); seq != firstSeq+uint32(i*s.mss) {
			t.Fatalf("segment %d: sequence number %#x, want %#x", i, seq, firstSeq+uint32(i*s.mss))
		}
		last := i == len(got)-1
		if fl := tcp[13]; (fl&0x09 == 0x09) != last || fl&0x10 == 0 {
			t.Fatalf("segment %d of %d: flags %#x", i, len(got), fl)
		}
		data := f[h.L4Off+20+s.tcpOpts : h.L3Off+h.L3Len]
		if len(data) > s.mss || !last && len(data) != s.mss {
			t.Fatalf("segment %d: %d payload bytes, MSS %d", i, len(data), s.mss)
		}
		joined = append(joined, data...)
	}
	if !bytes.Equal(joined, payload) {
		t.Fatalf("the segments' payloads (%d bytes) are not the packet's (%d)", len(joined), len(payload))
	}
}

// learnB has pa learn that macB is behind pb.
func learnB(t testing.TB, c *buffer.Cache, pa, pb *Port) {
	t.Helper()
	send(t, c, pb, frame(macA, macB, 1, 2, 10))
	receive(t, c, pa, 1)
}

// A TSO packet from a guest to a learned station leaves as segments whose
// payload the kernel gathers from the guest's buffer (vnet.Split): over
// IPv4 and IPv6, with TCP options, payloads of one byte, around the MSS
// and odd, and sequence numbers that wrap; the shared buffer is not
// written to, and every segment is a datagram of one UDP_SEGMENT send.
func TestPortSplitsTSO(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	ns := underlay(t, a, b)
	_, c := newPool(t)
	pa := openPort(t, Config{Name: "a", VNI: 5, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name})
	pb := openPort(t, Config{Name: "b", VNI: 5, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name})
	learnB(t, c, pa, pb)
	for _, s := range []tso{
		{payload: 1, mss: 1398},
		{payload: 1398, mss: 1398},
		{payload: 1399, mss: 1398},
		{payload: 10007, mss: 1000, tcpOpts: 12},
		{payload: 64000, mss: 1398},
		{v6: true, payload: 5001, mss: 1378},
		{v6: true, payload: 60000, mss: 1378, tcpOpts: 40},
	} {
		t.Run(fmt.Sprintf("v6=%v/%d/mss=%d/opts=%d", s.v6, s.payload, s.mss, s.tcpOpts), func(t *testing.T) {
			pkt, h, payload := tsoPacket(s)
			buf := withVnetHdr(t, c, pkt, h)
			buf.Ref() // shared, as with a frame flooded to other ports too
			s0 := pa.Stats()
			if n, err := pa.TxQueue(0).Transmit(c, []*buffer.Buf{buf}); err != nil || n != 1 {
				t.Fatalf("sent %d, %v; stats %+v", n, err, pa.Stats())
			}
			if !bytes.Equal(buf.Bytes(), pkt) {
				t.Fatal("a shared buffer was written to")
			}
			c.Consume(buf)
			segs := max(1, (s.payload+s.mss-1)/s.mss)
			checkTSOSegments(t, receive(t, c, pb, segs), packet.L2, s, payload)
			st := pa.Stats()
			if st.Segmented-s0.Segmented != 1 || st.SegmentedCopied != s0.SegmentedCopied || st.Segments-s0.Segments != uint64(segs) || st.TxPackets-s0.TxPackets != uint64(segs) {
				t.Fatalf("stats before %+v, after %+v", s0, st)
			}
			// As few UDP_SEGMENT sends as the 64 KiB of a datagram allow.
			want, total, run := 1, 0, 0
			for i := range segs {
				l := HeaderLen + int(h.HdrLen) + min(s.mss, s.payload-i*s.mss)
				if total+l > maxGSOPayload || run == maxGSOSegments {
					want, total, run = want+1, 0, 0
				}
				total, run = total+l, run+1
			}
			if segs > 1 && st.TxGSOSends-s0.TxGSOSends != uint64(want) {
				t.Errorf("%d UDP_SEGMENT sends, want %d", st.TxGSOSends-s0.TxGSOSends, want)
			}
			if st.TxDrops != s0.TxDrops {
				t.Fatalf("drops: %+v", st.TxDrops)
			}
		})
	}
}

// A routed port splits a TUN guest's TSO packets the same way, each
// segment in a frame between the VTEPs' MACs.
func TestPortSplitsTSORouted(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	ns := underlay(t, a, b)
	_, c := newPool(t)
	macVA, macVB := [6]byte{0x02, 0, 0, 0, 0x42, 1}, [6]byte{0x02, 0, 0, 0, 0x42, 2}
	pa := openPort(t, Config{Name: "a", VNI: 1, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name,
		L3: true, VTEPMAC: macVA, Static: []StaticEntry{{MAC: macVB, Remote: b}}})
	pb := openPort(t, Config{Name: "b", VNI: 1, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name,
		L3: true, VTEPMAC: macVB, Static: []StaticEntry{{MAC: macVA, Remote: a}}})
	if err := pa.SetRoutes([]Route{{Prefix: netip.MustParsePrefix("198.18.22.0/24"), Via: b}, {Prefix: netip.MustParsePrefix("2001:db8:22::/64"), Via: b}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []tso{{l3: true, payload: 30001, mss: 1410}, {l3: true, v6: true, payload: 7777, mss: 1390}} {
		pkt, h, payload := tsoPacket(s)
		s0 := pa.Stats()
		if n, err := pa.TxQueue(0).Transmit(c, []*buffer.Buf{withVnetHdr(t, c, pkt, h)}); err != nil || n != 1 {
			t.Fatalf("v6=%v: sent %d, %v; stats %+v", s.v6, n, err, pa.Stats())
		}
		segs := (s.payload + s.mss - 1) / s.mss
		checkTSOSegments(t, receive(t, c, pb, segs), packet.L3, s, payload)
		if st := pa.Stats(); st.Segmented-s0.Segmented != 1 || st.SegmentedCopied != 0 || st.TxGSOSends-s0.TxGSOSends != 1 {
			t.Fatalf("v6=%v: stats before %+v, after %+v", s.v6, s0, st)
		}
		round := tsoRound(t, c, pa, pb, pkt, h, 2)
		round()
		if n := testing.AllocsPerRun(10, round); n != 0 {
			t.Errorf("v6=%v: %v allocations per burst of TSO packets", s.v6, n)
		}
	}
}

// Hostile GSO headers from a guest to a learned station: each packet is
// a counted drop, none is sent, and no buffer is lost (the pool's leak
// check).
func TestPortSplitRefusesBadGSO(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	ns := underlay(t, a, b)
	_, c := newPool(t)
	pa := openPort(t, Config{Name: "a", VNI: 5, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name})
	pb := openPort(t, Config{Name: "b", VNI: 5, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name})
	learnB(t, c, pa, pb)
	pkt, h, _ := tsoPacket(tso{payload: 20000, mss: 1398})
	bad := []vnet.Header{
		{Flags: h.Flags, GSOType: vnet.GSOTCPv6, GSOSize: h.GSOSize, CsumStart: h.CsumStart, CsumOffset: h.CsumOffset}, // wrong IP version
		{Flags: h.Flags, GSOType: h.GSOType, GSOSize: 7, CsumStart: h.CsumStart, CsumOffset: h.CsumOffset},             // below the kernel's minimum
		{Flags: h.Flags, GSOType: h.GSOType, GSOSize: 60, CsumStart: h.CsumStart, CsumOffset: h.CsumOffset},            // more than MaxSegments
		{Flags: h.Flags, GSOType: h.GSOType, GSOSize: h.GSOSize, CsumStart: h.CsumStart + 2, CsumOffset: 16},           // checksum elsewhere
		{Flags: h.Flags, GSOType: vnet.GSOUDP, GSOSize: h.GSOSize, CsumStart: h.CsumStart, CsumOffset: h.CsumOffset},   // UFO
	}
	bufs := make([]*buffer.Buf, 0, len(bad)+1)
	for _, bh := range bad {
		bufs = append(bufs, withVnetHdr(t, c, pkt, bh))
	}
	// A truncated packet: its IP length says more than there is.
	bufs = append(bufs, withVnetHdr(t, c, pkt[:200], h))
	s0 := pa.Stats()
	if n, err := pa.TxQueue(0).Transmit(c, bufs); err != nil || n != 0 {
		t.Fatalf("sent %d, %v", n, err)
	}
	st := pa.Stats()
	var drops uint64
	for _, n := range st.TxDrops {
		drops += n
	}
	if drops != uint64(len(bufs)) || st.TxPackets != s0.TxPackets || st.Segmented != s0.Segmented {
		t.Fatalf("stats %+v", st)
	}
	if st.TxDrops[drop.GsoSeg] == 0 {
		t.Fatalf("no GSO_SEG drop: %+v", st.TxDrops)
	}
}

// Splitting allocates nothing per packet.
func TestPortSplitSteadyAllocs(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	ns := underlay(t, a, b)
	_, c := newPool(t)
	pa := openPort(t, Config{Name: "a", VNI: 5, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name})
	pb := openPort(t, Config{Name: "b", VNI: 5, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name})
	learnB(t, c, pa, pb)
	pkt, h, _ := tsoPacket(tso{payload: 20000, mss: 1398})
	round := tsoRound(t, c, pa, pb, pkt, h, 4)
	round()
	s0 := pa.Stats()
	if n := testing.AllocsPerRun(20, round); n != 0 {
		t.Errorf("%v allocations per burst of TSO packets", n)
	}
	if st := pa.Stats(); st.Segmented-s0.Segmented < 20*4 || st.SegmentedCopied != 0 {
		t.Errorf("%d packets split in software", st.Segmented-s0.Segmented)
	}
}

// tsoRound returns a function that sends burst copies of a TSO packet
// from pa and receives their segments at pb.
func tsoRound(t testing.TB, c *buffer.Cache, pa, pb *Port, pkt []byte, h vnet.Header, burst int) func() {
	segs := burst * ((len(pkt) - int(h.HdrLen) + int(h.GSOSize) - 1) / int(h.GSOSize))
	class, _ := c.Pool().ClassFor(len(pkt))
	out := make([]*buffer.Buf, burst)
	in := make([]*buffer.Buf, 64)
	return func() {
		if c.GetBulk(out, class) != nil {
			t.Fatal("pool exhausted")
		}
		for _, b := range out {
			d, _ := b.Append(len(pkt))
			copy(d, pkt)
			h.Encode(b.Frame()[b.Headroom()-vnet.HeaderLen:])
			b.SetFlags(tun.FlagVnetHdr)
		}
		if _, err := pa.TxQueue(0).Transmit(c, out); err != nil {
			t.Fatal(err)
		}
		for got, polls := 0, 0; got < segs; polls++ {
			if polls > 1e6 {
				t.Fatalf("%d of %d segments arrived", got, segs)
			}
			n, err := pb.RxQueue(0).Receive(c, in)
			if err != nil {
				t.Fatal(err)
			}
			c.ConsumeBulk(in[:n])
			got += n
		}
	}
}

// BenchmarkPortTSO sends 64 KiB TSO packets from a guest through one
// port to another over loopback and receives their segments: the cost
// of the overlay's sending side with the receive side's split. split
// sends to a learned station (vnet.Split: the payload gathered from the
// guest's buffer), copied to one not learned, flooded to the only
// remote (vnet.Resolve: each segment copied into a buffer of its own),
// the path every TSO packet took before.
func BenchmarkPortTSO(b *testing.B) {
	for _, learned := range []bool{true, false} {
		name := "split"
		if !learned {
			name = "copied"
		}
		b.Run(name, func(b *testing.B) {
			a, z := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
			ns := underlay(b, a, z)
			_, c := newPool(b)
			pa := openPort(b, Config{Name: "a", VNI: 5, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{z}, NetNS: ns.Name})
			pb := openPort(b, Config{Name: "b", VNI: 5, Local: netip.AddrPortFrom(z, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name})
			learnB(b, c, pa, pb)
			pkt, h, _ := tsoPacket(tso{payload: 65000, mss: 1398})
			if !learned {
				pkt[5] = 0xc // a station not learned
			}
			round := tsoRound(b, c, pa, pb, pkt, h, 1)
			s0 := pa.Stats()
			b.SetBytes(65000)
			b.ReportAllocs()
			for b.Loop() {
				round()
			}
			if st := pa.Stats(); (st.SegmentedCopied > s0.SegmentedCopied) == learned {
				b.Fatalf("learned %v: %d of %d packets copied", learned, st.SegmentedCopied-s0.SegmentedCopied, st.Segmented-s0.Segmented)
			}
		})
	}
}
