package vnet

import (
	"bytes"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
)

// marked returns a buffer holding pkt with h in front of it, as a port
// with offloads hands it over (tun.FlagVnetHdr).
func marked(t *testing.T, c *buffer.Cache, class buffer.Class, h Header, pkt []byte) *buffer.Buf {
	t.Helper()
	b, err := c.Get(class)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := b.Append(len(pkt))
	copy(d, pkt)
	h.Encode(b.Frame()[b.Headroom()-HeaderLen:])
	return b
}

// verify checks that every packet verifies: what no receiver behind a
// port without offloads could tell from a packet sent whole.
func verify(t *testing.T, pkts []*buffer.Buf, layer packet.Layer) {
	t.Helper()
	for i, b := range pkts {
		var h packet.Headers
		if ok, reason := packet.Parse(b.Bytes(), layer, &h); !ok || !packet.TransportChecksumOK(b.Bytes(), &h) {
			t.Fatalf("packet %d: parse %v %v, or its checksum does not verify", i, ok, reason)
		}
	}
}

func TestResolve(t *testing.T) {
	pool, c := newTestPool(t, buffer.Config{})
	out := make([]*buffer.Buf, MaxSegments)

	// GSO: segments, the original consumed.
	h, pkt := build(spec{l2: true, payload: pattern(10000), mss: 1400})
	b := marked(t, c, buffer.ClassGSO, h, pkt)
	n, how, _ := Resolve(c, b, packet.L2, out)
	if n != 8 || how != Segmented {
		t.Fatalf("GSO: %d packets, %v", n, how)
	}
	verify(t, out[:n], packet.L2)
	c.ConsumeBulk(out[:n])

	// A partial checksum, finished in place.
	h, pkt = partial(spec{l2: true, udp: true, payload: pattern(100)})
	b = marked(t, c, buffer.ClassMTU, h, pkt)
	if n, how, _ := Resolve(c, b, packet.L2, out); n != 1 || how != Finished || out[0] != b {
		t.Fatalf("partial: %d, %v, same buffer %v", n, how, out[0] == b)
	}
	verify(t, out[:1], packet.L2)
	c.Consume(b)

	// Shared: its other holder's bytes stay as they were.
	b = marked(t, c, buffer.ClassMTU, h, pkt)
	b.Ref()
	if n, how, _ := Resolve(c, b, packet.L2, out); n != 1 || how != Finished || out[0] == b {
		t.Fatalf("shared partial: %d, %v, same buffer %v", n, how, out[0] == b)
	}
	if !bytes.Equal(b.Bytes(), pkt) {
		t.Fatal("a shared buffer was changed")
	}
	verify(t, out[:1], packet.L2)
	c.Consume(out[0])
	c.Consume(b)

	// Nothing asked: the buffer as it is.
	b = marked(t, c, buffer.ClassMTU, Header{}, pkt)
	if n, how, _ := Resolve(c, b, packet.L2, out); n != 1 || how != Untouched || out[0] != b {
		t.Fatalf("plain: %d, %v", n, how)
	}
	c.Consume(b)

	// Refused: the caller keeps the buffer and drops it with the reason.
	bad := h
	bad.CsumOffset = 60000
	b = marked(t, c, buffer.ClassMTU, bad, pkt)
	if n, _, reason := Resolve(c, b, packet.L2, out); n != 0 || reason != drop.DevHdr {
		t.Fatalf("bad offsets: %d, %v", n, reason)
	}
	c.Drop(b, drop.DevHdr)
	b, _ = c.Get(buffer.ClassMTU)
	if !b.SetData(4, 20) { // less headroom than a header
		t.Fatal("SetData")
	}
	if n, _, reason := Resolve(c, b, packet.L2, out); n != 0 || reason != drop.DevHdr {
		t.Fatalf("no room for a header: %d, %v", n, reason)
	}
	c.Drop(b, drop.DevHdr)

	if n := testing.AllocsPerRun(100, func() {
		b := marked(t, c, buffer.ClassGSO, h, pkt)
		n, _, _ := Resolve(c, b, packet.L2, out)
		c.ConsumeBulk(out[:n])
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
	if inUse(pool, c) != 0 {
		t.Fatal("buffers left in use")
	}
}

// FinishPartial finishes only what holds its pseudo-header sum, and is
// idempotent: a finished packet, or one whose correct checksum happens
// to equal that sum, keeps its checksum.
func TestFinishPartial(t *testing.T) {
	for _, udp := range []bool{false, true} {
		for _, v6 := range []bool{false, true} {
			_, pkt := partial(spec{l2: true, udp: udp, v6: v6, payload: pattern(333)})
			if !FinishPartial(pkt, packet.L2) {
				t.Fatalf("udp=%v v6=%v: not finished", udp, v6)
			}
			var h packet.Headers
			if ok, _ := packet.Parse(pkt, packet.L2, &h); !ok || !packet.TransportChecksumOK(pkt, &h) {
				t.Fatalf("udp=%v v6=%v: does not verify", udp, v6)
			}
			done := bytes.Clone(pkt)
			if FinishPartial(pkt, packet.L2) || !bytes.Equal(pkt, done) {
				t.Fatalf("udp=%v v6=%v: a finished packet changed", udp, v6)
			}
		}
	}
	_, pkt := partial(spec{l2: true, payload: pattern(40)})
	if FinishPartial(pkt[:20], packet.L2) {
		t.Fatal("a truncated frame was finished")
	}
	if n := testing.AllocsPerRun(100, func() { FinishPartial(pkt, packet.L2) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
