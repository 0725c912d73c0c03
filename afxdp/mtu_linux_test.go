package afxdp

import (
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
)

// With a 9000-byte MTU a frame is longer than a page-sized UMEM frame:
// it arrives in pieces (multi-buffer XDP), is joined into a buffer of the
// pool's large class, and leaves in pieces again; a TCP transfer at that
// MTU arrives whole. A fill ring left with fewer frames than such a
// frame's pieces counts as dry (the kernel drops the frame, and counts it
// only as rx_dropped): the receiving queue's fill target grows past its
// floor, where it stayed while only an empty ring counted (a quarter of
// the frames lost, a few hundred retransmits).
func TestJumboFrames(t *testing.T) {
	r := newRig(t, 2, 9000)
	pool := newPool(t)
	a := r.open(pool, r.guests[0], Config{})
	b := r.open(pool, r.guests[1], Config{})
	if _, _, sg := a.Mode(); !sg {
		t.Skip("the kernel takes no multi-buffer AF_XDP sockets (Linux 6.6)")
	}
	r.bridge(pool, 1, a, b)
	g1, g2 := r.guests[0], r.guests[1]
	netnstest.RequireTools(t, "ping")
	out, err := g1.ns.ExecTimeout(testTimeout, "ping", "-c", "3", "-i", "0.1", "-W", "5", "-M", "do", "-s", "8000", g2.v4.Addr().String())
	if err != nil {
		t.Fatalf("jumbo ping: %v\n%s", err, out)
	}
	transfer(t, g1, g2, g2.v4.Addr(), 5011, 16<<20)
	sa, sb := a.Stats(), b.Stats()
	t.Logf("a: rx %d joined %d, tx %d in pieces %d; b: rx joined %d, tx in pieces %d", sa.RxPackets, sa.RxMultiBuf, sa.TxPackets, sa.TxMultiBuf, sb.RxMultiBuf, sb.TxMultiBuf)
	if sa.RxMultiBuf == 0 || sb.TxMultiBuf == 0 {
		t.Fatalf("no frame received or sent in pieces: a %+v, b %+v", sa, sb)
	}
	t.Logf("a: rx drops %v, fill target %d", sa.RxDrops, sa.FillTarget)
	room := a.slab.Frame - xdpHeadroom
	// The port's count, which each queue takes at every reap (the
	// worker's own field is not the test's to read).
	if need := a.piecesPerFrame(); need*room < 9018 || (need-1)*room >= 9018 {
		t.Errorf("a 9018-byte frame takes %d fill frames of %d bytes, want %d", need, room, (9018+room-1)/room)
	}
	if sa.FillTarget <= uint64(maxFloor) {
		t.Errorf("fill target %d after %d frames in pieces, want it grown past the floor %d", sa.FillTarget, sa.RxMultiBuf, maxFloor)
	}
}

// A frame longer than any buffer of the pool is counted as PKT_TOO_BIG
// and not delivered; smaller ones pass.
func TestFrameLongerThanAnyBuffer(t *testing.T) {
	r := newRig(t, 2, 9000)
	pool := newPool(t, buffer.ClassConfig{Room: 2048, Count: 2048})
	a := r.open(pool, r.guests[0], Config{})
	b := r.open(pool, r.guests[1], Config{})
	r.bridge(pool, 1, a, b)
	g1, g2 := r.guests[0], r.guests[1]
	r.ping(g1, g2.v4.Addr(), 2)
	netnstest.RequireTools(t, "ping")
	out, err := g1.ns.ExecTimeout(testTimeout, "ping", "-c", "3", "-i", "0.1", "-W", "1", "-M", "do", "-s", "8000", g2.v4.Addr().String())
	if err == nil {
		t.Fatalf("a ping of 8000 bytes got through a pool of 2 KiB buffers:\n%s", out)
	}
	s := a.Stats()
	if s.RxDrops[drop.PktTooBig] < 3 {
		t.Fatalf("PKT_TOO_BIG %d, want at least 3 (%v)", s.RxDrops[drop.PktTooBig], s.RxDrops)
	}
	r.ping(g1, g2.v4.Addr(), 2)
	t.Logf("drops %v", s.RxDrops)
}
