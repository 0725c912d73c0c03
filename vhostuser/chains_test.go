//go:build linux

package vhostuser

import (
	"bytes"
	"encoding/binary"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/drop"
)

// bigBuf is bufWith for a frame of any size the pool has a class for.
func bigBuf(t *testing.T, c *buffer.Cache, data []byte) *buffer.Buf {
	t.Helper()
	class, ok := c.Pool().ClassFor(len(data))
	if !ok {
		t.Fatalf("no class for %d bytes", len(data))
	}
	b, err := c.Get(class)
	if err != nil {
		t.Fatal(err)
	}
	b.SetData(b.Headroom(), len(data))
	copy(b.Bytes(), data)
	return b
}

// rxChain is a receive chain the test posted: its descriptors' guest
// offsets and lengths, in order.
type rxChain struct {
	offs []int
	lens []uint32
}

// postChain writes a chain of device-writable descriptors from index
// first on, one per length, with buffers laid out back to back from
// guest offset off, and makes it available on ring 0.
func (f *testFrontend) postChain(first, off int, lens ...uint32) rxChain {
	var ch rxChain
	for k, n := range lens {
		flags, next := uint16(descWrite), uint16(0)
		if k < len(lens)-1 {
			flags |= descNext
			next = uint16(first + k + 1)
		}
		f.setDesc(0, first+k, guestBase+uint64(off), n, flags, next)
		ch.offs = append(ch.offs, off)
		ch.lens = append(ch.lens, n)
		off += int(n)
	}
	f.offer(0, uint16(first))
	return ch
}

// read returns the first n bytes the device wrote into the chain.
func (f *testFrontend) read(ch rxChain, n int) []byte {
	var b []byte
	for k, off := range ch.offs {
		m := min(int(ch.lens[k]), n-len(b))
		b = append(b, f.mem[off:off+m]...)
	}
	return b
}

// TestLongReceiveChains: a guest without mergeable buffers posts receive
// chains longer than any packet, as Linux's virtio_net does (a header
// buffer, then 17 pages: "big packets"), and one that uses every
// descriptor of the ring. Each packet uses as much of its chain as it
// needs, and the rest of the chain goes back unused; the ring runs on.
// (The port used to refuse a chain of more bytes than a packet has, and
// gave the ring up on the guest's first packet.)
func TestLongReceiveChains(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1) // a 12-byte header, and no merging
	waitRunning(t, p, 0)
	const page = 4096
	big := []uint32{hdrMrg}
	for range 17 {
		big = append(big, page)
	}
	span := int(hdrMrg + 17*page)
	var chains []rxChain
	for k := range 4 {
		chains = append(chains, f.postChain(k*len(big), f.bufOff(0, 0)+k*span, big...))
	}
	frames := [][]byte{testFrame(60, 1), testFrame(1514, 2), testFrame(9000, 3), testFrame(65000, 4)}
	for i, fr := range frames {
		if n, err := p.TxQueue(0).Transmit(c, []*buffer.Buf{bigBuf(t, c, fr)}); n != 1 || err != nil {
			t.Fatalf("frame %d (%d bytes) into a %d-byte chain: Transmit = %d, %v; port %+v", i, len(fr), span, n, err, p.Stats())
		}
	}
	ids, lens := f.used(0)
	if len(ids) != len(frames) {
		t.Fatalf("%d used entries, want %d", len(ids), len(frames))
	}
	for i, fr := range frames {
		if want := uint32(i * len(big)); ids[i] != want || lens[i] != uint32(hdrMrg+len(fr)) {
			t.Errorf("used entry %d: id %d len %d, want id %d len %d", i, ids[i], lens[i], want, hdrMrg+len(fr))
			continue
		}
		got := f.read(chains[i], int(lens[i]))
		if nb := binary.LittleEndian.Uint16(got[10:]); nb != 1 {
			t.Errorf("frame %d: num_buffers %d, want 1", i, nb)
		}
		if !bytes.Equal(got[hdrMrg:], fr) {
			t.Errorf("frame %d: the guest's chain does not hold it", i)
		}
	}

	// A chain of every descriptor of the ring, 300 bytes each: 75 KiB.
	all := make([]uint32, testNum)
	for k := range all {
		all[k] = 300
	}
	ch := f.postChain(0, f.bufOff(0, 0), all...)
	fr := testFrame(1000, 5)
	if n, _ := p.TxQueue(0).Transmit(c, []*buffer.Buf{bigBuf(t, c, fr)}); n != 1 {
		t.Fatalf("a frame into a chain of the whole ring was not sent; port %+v", p.Stats())
	}
	ids, lens = f.used(0)
	if len(ids) != 1 || ids[0] != 0 || lens[0] != uint32(hdrMrg+len(fr)) || !bytes.Equal(f.read(ch, int(lens[0]))[hdrMrg:], fr) {
		t.Errorf("a chain of the whole ring: used %v %v, want id 0 holding the frame", ids, lens)
	}
	if s := p.Stats(); s.BadChains != 0 || s.BrokenRings != 0 || s.TxPackets != uint64(len(frames)+1) || s.TxDrops.Total() != 0 {
		t.Fatalf("port %+v: want every frame sent, nothing refused", s)
	}

	// Every descriptor is still checked, also past the bytes the packet
	// needs: a chain whose last buffer lies outside the guest's memory
	// is refused, and the ring given up.
	f.setDesc(0, 1, guestBase+memSize-8, 64, descWrite, 0)
	f.setDesc(0, 0, guestBase+uint64(f.bufOff(0, 0)), 2048, descWrite|descNext, 1)
	f.offer(0, 0)
	if n, _ := p.TxQueue(0).Transmit(c, []*buffer.Buf{bigBuf(t, c, testFrame(60, 6))}); n != 0 {
		t.Error("a frame was sent into a chain with a buffer outside the guest's memory")
	}
	if s := p.Stats(); s.BadChains != 1 || s.BrokenRings != 1 || s.TxDrops[drop.DevHdr] != 1 {
		t.Errorf("port %+v: want the chain refused (one bad chain, one DEV_HDR) and the ring given up", s)
	}
}

// TestForgedChainsShareDescriptors: a guest with mergeable buffers that
// makes every available entry name the same chain of the whole ring,
// with nothing in it, cannot make a packet walk the ring once per entry:
// a packet's chains together read at most as many descriptors as the
// ring has, and the ring is given up.
func TestForgedChainsShareDescriptors(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 0)
	empty := make([]uint32, testNum)
	f.postChain(0, f.bufOff(0, 0), empty...)
	for range testNum - 1 {
		f.offer(0, 0)
	}
	if n, _ := p.TxQueue(0).Transmit(c, []*buffer.Buf{bufWith(t, c, testFrame(60, 1))}); n != 0 {
		t.Fatal("a frame was sent into empty chains")
	}
	if s := p.Stats(); s.BadChains != 1 || s.BrokenRings != 1 {
		t.Errorf("port %+v: want one bad chain and the ring given up", s)
	}
}
