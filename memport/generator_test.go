package memport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
	"softnet.dev/port"
)

// checkPacket verifies one generated packet completely, independently of
// the sink's validation code, and returns its flow and sequence number.
// For a HeadersOnly generator's packet (hdrOnly) it checks everything but
// the payload after the payload header.
func checkPacket(t *testing.T, b *buffer.Buf, layer packet.Layer, ipv6, hdrOnly bool, size int) (flow uint32, seq uint64) {
	t.Helper()
	d := b.Bytes()
	var h packet.Headers
	if ok, reason := packet.Parse(d, layer, &h); !ok {
		t.Fatalf("Parse: %v", reason)
	}
	l2 := 0
	if layer == packet.L2 {
		l2 = packet.EthernetHeaderLen
		if h.Src != SrcMAC || h.Dst != DstMAC || h.Src[0]&2 == 0 {
			t.Errorf("MACs %x -> %x", h.Src, h.Dst)
		}
	}
	if len(d) != l2+size || h.L3Len != size {
		t.Errorf("length %d, IP length %d; want %d", len(d), h.L3Len, size)
	}
	prefix := bench4
	if ipv6 {
		prefix = bench6
		if h.Proto != packet.EtherTypeIPv6 {
			t.Errorf("proto %#x, want IPv6", h.Proto)
		}
	} else if h.Proto != packet.EtherTypeIPv4 || !packet.IPv4HeaderChecksumOK(d[l2:]) {
		t.Errorf("proto %#x or IPv4 header checksum wrong", h.Proto)
	}
	if !prefix.Contains(h.SrcIP) || !prefix.Contains(h.DstIP) {
		t.Errorf("addresses %v -> %v outside %v", h.SrcIP, h.DstIP, prefix)
	}
	if h.IPProto != packet.ProtoUDP || h.L4Off == 0 {
		t.Fatalf("not UDP: %+v", h)
	}
	app := d[h.L4Off+packet.UDPHeaderLen:]
	if hdrOnly {
		if csum := binary.BigEndian.Uint16(d[h.L4Off+6:]); csum != 0 {
			t.Errorf("headers only: UDP checksum %#x, want 0 (none)", csum)
		}
		if binary.BigEndian.Uint32(app) != MagicHeadersOnly {
			t.Errorf("headers only: magic %#x", binary.BigEndian.Uint32(app))
		}
	} else {
		if !packet.TransportChecksumOK(d, &h) {
			t.Errorf("bad UDP checksum")
		}
		if binary.BigEndian.Uint32(app) != Magic {
			t.Errorf("magic %#x", binary.BigEndian.Uint32(app))
		}
		for i, c := range app[HeaderLen:] {
			if c != PatternByte(i) {
				t.Fatalf("payload byte %d = %#x, want %#x", i, c, PatternByte(i))
			}
		}
	}
	flow, seq = binary.BigEndian.Uint32(app[4:]), binary.BigEndian.Uint64(app[8:])
	src, dst := FlowAddrs(int(flow), ipv6)
	if h.SrcIP != src.Addr() || h.DstIP != dst.Addr() || h.SrcPort != src.Port() || h.DstPort != dst.Port() {
		t.Errorf("flow %d: %v:%d -> %v:%d, want %v -> %v", flow, h.SrcIP, h.SrcPort, h.DstIP, h.DstPort, src, dst)
	}
	return flow, seq
}

func TestGeneratorPackets(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		for _, layer := range []packet.Layer{packet.L3, packet.L2} {
			for _, bulk := range []bool{false, true} {
				name := fmt.Sprintf("ipv6=%v/%s/bulk=%v", ipv6, layerName(layer), bulk)
				t.Run(name, func(t *testing.T) { testGeneratorPackets(t, ipv6, layer, bulk) })
			}
		}
	}
}

func testGeneratorPackets(t *testing.T, ipv6 bool, layer packet.Layer, bulk bool) {
	pool := newPool(t, buffer.Config{})
	c := newCache(t, pool)
	// The largest packet that fits the default GSO class behind an
	// Ethernet header is 65536-14 bytes.
	sizes := []int{64, 1500, 65535, 100, 101}
	if layer == packet.L2 {
		sizes[2] = 65536 - packet.EthernetHeaderLen
	}
	const flows, queues = 5, 2
	g := mustGen(t, GenConfig{Queues: queues, Flows: flows, Sizes: sizes, IPv6: ipv6, Layer: layer, Bulk: bulk, Pool: pool})
	if info := g.Info(); info.Queues != queues || info.Layer != layer || info.MaxFrame < sizes[2] {
		t.Errorf("Info = %v", info)
	}
	if g.TxQueue(0) != nil || g.RxQueue(queues) != nil {
		t.Error("TxQueue or RxQueue out of range not nil")
	}
	bufs := make([]*buffer.Buf, 7)
	next := map[uint32]uint64{}
	total := 0
	for q := range queues {
		rx := g.RxQueue(q)
		if rx.FD() != -1 || !rx.Arm() {
			t.Error("FD or Arm")
		}
		for round := range 3 {
			n, err := rx.Receive(c, bufs)
			if n != len(bufs) || err != nil {
				t.Fatalf("Receive = %d, %v", n, err)
			}
			for i, b := range bufs[:n] {
				k := round*len(bufs) + i
				size := sizes[k%len(sizes)]
				flow, seq := checkPacket(t, b, layer, ipv6, false, size)
				if int(flow)%queues != q {
					t.Errorf("flow %d on queue %d", flow, q)
				}
				if seq != next[flow] {
					t.Errorf("flow %d: seq %d, want %d", flow, seq, next[flow])
				}
				next[flow] = seq + 1
				if wantGSO := size > 2048-14; (b.Class() == buffer.ClassGSO) != wantGSO {
					t.Errorf("%d-byte packet in class %d", size, b.Class())
				}
				if _, ok := checkFull(b.Bytes(), layer, new(packet.Headers)); !ok {
					t.Error("sink full validation rejects a generated packet")
				}
				if _, ok := checkLight(b.Bytes(), len(b.Bytes())-size); !ok {
					t.Error("sink light validation rejects a generated packet")
				}
			}
			c.ConsumeBulk(bufs[:n])
			total += n
		}
	}
	if len(next) != flows {
		t.Errorf("saw %d flows, want %d", len(next), flows)
	}
	if s := g.Stats(); s.Packets != uint64(total) || s.AllocFailures != 0 || s.Bytes == 0 {
		t.Errorf("stats %+v", s)
	}
	if err := g.CloseInto(c); err != nil {
		t.Fatal(err)
	}
	if n, err := g.RxQueue(0).Receive(c, bufs); n != 0 || !errors.Is(err, port.ErrDown) {
		t.Errorf("Receive after Close = %d, %v", n, err)
	}
	leakCheck(t, pool)
}

func TestGeneratorHeadersOnly(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		for _, layer := range []packet.Layer{packet.L3, packet.L2} {
			t.Run(fmt.Sprintf("ipv6=%v/%s", ipv6, layerName(layer)), func(t *testing.T) { testGeneratorHeadersOnly(t, ipv6, layer) })
		}
	}
}

// A HeadersOnly generator writes each packet's headers and payload header
// and leaves the rest of the payload as the frame held it.
func testGeneratorHeadersOnly(t *testing.T, ipv6 bool, layer packet.Layer) {
	pool := newPool(t, buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 8}, {Room: 65536, Count: 4}}})
	c := newCache(t, pool)
	// Every frame of the pool holds stale bytes, whichever the generator
	// takes.
	const stale = 0xa5
	for cl, n := range []int{8, 4} {
		all := make([]*buffer.Buf, n)
		if err := c.GetBulk(all, buffer.Class(cl)); err != nil {
			t.Fatal(err)
		}
		for _, b := range all {
			f := b.Frame()
			for i := range f {
				f[i] = stale
			}
		}
		c.ConsumeBulk(all)
	}
	sizes := []int{64, 1500, 9000}
	const flows = 2
	g := mustGen(t, GenConfig{Flows: flows, Sizes: sizes, IPv6: ipv6, Layer: layer, Bulk: true, HeadersOnly: true, Pool: pool})
	bufs := make([]*buffer.Buf, 6)
	next := map[uint32]uint64{}
	for round := range 3 {
		n, err := g.RxQueue(0).Receive(c, bufs)
		if n != len(bufs) || err != nil {
			t.Fatalf("Receive = %d, %v", n, err)
		}
		for i, b := range bufs[:n] {
			size := sizes[i%len(sizes)]
			flow, seq := checkPacket(t, b, layer, ipv6, true, size)
			if seq != next[flow] {
				t.Errorf("round %d: flow %d: seq %d, want %d", round, flow, seq, next[flow])
			}
			next[flow] = seq + 1
			d := b.Bytes()
			for j, v := range d[g.t.patOff:] {
				if v != stale {
					t.Fatalf("%d-byte packet: payload byte %d written (%#x)", size, HeaderLen+j, v)
				}
			}
			for name, check := range map[string]func() (stamp, bool){
				"full":  func() (stamp, bool) { return checkFull(d, layer, new(packet.Headers)) },
				"light": func() (stamp, bool) { return checkLight(d, len(d)-size) },
			} {
				if st, ok := check(); !ok || !st.headersOnly || st.flow != flow || st.seq != seq {
					t.Errorf("sink %s validation: %+v, %v", name, st, ok)
				}
			}
		}
		c.ConsumeBulk(bufs[:n])
	}
	if len(next) != flows {
		t.Errorf("saw %d flows, want %d", len(next), flows)
	}
	leakCheck(t, pool)
}

// The checksum adjustment must hold for any sequence number, carries
// included: start flows near interesting values and let the UDP checksum
// check judge.
func TestGeneratorSeqChecksum(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	c := newCache(t, pool)
	for _, start := range []uint64{0xfffe, 0xffff_fffe, 1<<48 - 2, 1<<63 - 1, 1<<64 - 3, 0x1234_5678_9abc_def0} {
		for _, ipv6 := range []bool{false, true} {
			g := mustGen(t, GenConfig{IPv6: ipv6, Layer: packet.L3, Sizes: []int{64, 65, 333}})
			g.queues[0].flows[0].seq = start
			bufs := make([]*buffer.Buf, 6)
			n, _ := g.RxQueue(0).Receive(c, bufs)
			for i, b := range bufs[:n] {
				if _, seq := checkPacket(t, b, packet.L3, ipv6, false, []int{64, 65, 333}[i%3]); seq != start+uint64(i) {
					t.Errorf("seq %d, want %d", seq, start+uint64(i))
				}
			}
			c.ConsumeBulk(bufs[:n])
		}
	}
	// Every residue of the old checksum field against the words of seq.
	for _, csum := range []uint16{0, 1, 0x7fff, 0xfffe, 0xffff} {
		for _, seq := range []uint64{0, 1, 0xffff, 1<<64 - 1} {
			got := addSeq(csum, seq)
			s := uint32(^csum) + uint32(seq>>48) + uint32(seq>>32&0xffff) + uint32(seq>>16&0xffff) + uint32(seq&0xffff)
			for s > 0xffff {
				s = s>>16 + s&0xffff
			}
			if want := ^uint16(s); got != want && !(want == 0 && got == 0xffff) {
				t.Errorf("addSeq(%#x, %#x) = %#x, want %#x", csum, seq, got, want)
			}
		}
	}
	leakCheck(t, pool)
}

func TestGeneratorCount(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	c := newCache(t, pool)
	g := mustGen(t, GenConfig{Queues: 2, Flows: 2, Count: 10, Layer: packet.L3})
	bufs := make([]*buffer.Buf, 4)
	for q := range 2 {
		rx := g.RxQueue(q)
		for _, want := range []int{4, 4, 2, 0, 0} {
			if !rx.Arm() && want > 0 {
				t.Errorf("queue %d: Arm false with packets left", q)
			}
			n, err := rx.Receive(c, bufs)
			if n != want || err != nil {
				t.Fatalf("queue %d: Receive = %d, %v; want %d", q, n, err, want)
			}
			c.ConsumeBulk(bufs[:n])
		}
		if rx.Arm() {
			t.Errorf("queue %d: Arm true after Count", q)
		}
		rx.Disarm()
	}
	if s := g.Stats(); s.Packets != 20 || s.Bytes != 20*64 {
		t.Errorf("stats %+v", s)
	}
	// More queues than flows: the extra queue has nothing to send.
	g = mustGen(t, GenConfig{Queues: 3, Flows: 2})
	if g.RxQueue(2).Arm() {
		t.Error("a queue without flows reports packets")
	}
	if n, _ := g.RxQueue(2).Receive(c, bufs); n != 0 {
		t.Errorf("a queue without flows received %d", n)
	}
	leakCheck(t, pool)
}

func TestGeneratorExhausted(t *testing.T) {
	pool := newPool(t, buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 16}, {Room: 65536, Count: 2}}, CacheSize: 8})
	c := newCache(t, pool)
	bufs := make([]*buffer.Buf, 32)

	bulk := mustGen(t, GenConfig{Bulk: true, Layer: packet.L3})
	if n, err := bulk.RxQueue(0).Receive(c, bufs); n != 0 || err != nil {
		t.Errorf("bulk beyond the pool: %d, %v; want nothing", n, err)
	}
	if s := bulk.Stats(); s.AllocFailures != 1 || s.Packets != 0 {
		t.Errorf("bulk stats %+v", s)
	}
	single := mustGen(t, GenConfig{Layer: packet.L3})
	n, err := single.RxQueue(0).Receive(c, bufs)
	if n != 16 || err != nil {
		t.Errorf("single beyond the pool: %d, %v; want 16", n, err)
	}
	if s := single.Stats(); s.AllocFailures != 1 || s.Packets != 16 {
		t.Errorf("single stats %+v", s)
	}
	c.ConsumeBulk(bufs[:n])

	// Mixed classes, all or nothing: 3 GSO packets do not fit.
	mixed := mustGen(t, GenConfig{Bulk: true, Layer: packet.L3, Sizes: []int{64, 9000}})
	if n, _ := mixed.RxQueue(0).Receive(c, bufs[:4]); n != 4 {
		t.Errorf("mixed burst of 4 = %d", n)
	} else {
		c.ConsumeBulk(bufs[:4])
	}
	if n, _ := mixed.RxQueue(0).Receive(c, bufs[:6]); n != 0 {
		t.Errorf("mixed burst of 6 with 2 GSO buffers = %d", n)
	}
	c.Publish()
	if s := pool.Stats(); s.Drops[drop.NoMem] != 3 {
		t.Errorf("NOMEM drops %d, want 3 (the MTU part of the failed burst)", s.Drops[drop.NoMem])
	}

	// Sizes no class of this pool holds.
	huge := mustGen(t, GenConfig{Layer: packet.L2, Sizes: []int{65535}})
	if _, err := huge.RxQueue(0).Receive(c, bufs); err == nil || !strings.Contains(err.Error(), "memport: generator gen: ") {
		t.Errorf("Receive with no class for the size: %v", err)
	}
	if _, err := NewGenerator("g", GenConfig{Layer: packet.L2, Sizes: []int{65535}, Pool: pool}); err == nil {
		t.Error("NewGenerator accepted a size no class holds")
	}
	leakCheck(t, pool)
}

func TestGeneratorConfigErrors(t *testing.T) {
	for _, cfg := range []GenConfig{
		{Queues: -1},
		{Flows: MaxFlows + 1},
		{Sizes: []int{63}},
		{Sizes: []int{64, 65536}},
		{Layer: 3},
		{Flows: MaxFlows, Sizes: make([]int, 5)},
	} {
		if _, err := NewGenerator("g", cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		} else if !strings.HasPrefix(err.Error(), "memport: generator g: ") {
			t.Errorf("error without context: %v", err)
		}
	}
	// The most flows there are, each with its own address.
	g := mustGen(t, GenConfig{Flows: MaxFlows, IPv6: true})
	if len(g.queues[0].flows) != MaxFlows {
		t.Errorf("%d flows", len(g.queues[0].flows))
	}
	seen := map[string]bool{}
	for _, f := range []int{0, 1, MaxFlows - 1} {
		s4, d4 := FlowAddrs(f, false)
		s6, d6 := FlowAddrs(f, true)
		if !bench4.Contains(s4.Addr()) || !bench4.Contains(d4.Addr()) || !bench6.Contains(s6.Addr()) || !bench6.Contains(d6.Addr()) {
			t.Errorf("flow %d: %v -> %v, %v -> %v outside the benchmark ranges", f, s4, d4, s6, d6)
		}
		if seen[s4.String()] || seen[s6.String()] {
			t.Errorf("flow %d: source address reused", f)
		}
		seen[s4.String()], seen[s6.String()] = true, true
	}
}
