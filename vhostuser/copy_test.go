//go:build linux

package vhostuser

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"softnet.dev/buffer"
)

// A packet from the guest stays what the guest sent once the guest
// reuses its buffer: a driver rewrites a transmit buffer as soon as its
// used entry is published, while the packet may still be on its way
// through the switch. And every descriptor is handed back once its
// packet is gone. Both hold whether the port copies the data (it does)
// or holds the descriptor until the packet is freed.
func TestGuestRewritesAfterCompletion(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 1)
	sizes := []int{64, 1500, 60, 1514}
	want := make([][]byte, len(sizes))
	for i, n := range sizes {
		want[i] = testFrame(n, byte(i))
		f.transmit(i, want[i])
	}
	got := receiveAll(t, p, c, len(sizes))
	if len(got) != len(sizes) {
		t.Fatalf("received %d packets, want %d", len(got), len(sizes))
	}
	// The guest reuses each buffer the port handed back.
	reuse := func() int {
		ids, _ := f.used(1)
		for _, id := range ids {
			off := f.bufOff(1, int(id))
			for k := range bufSize {
				f.mem[off+k] = 0xee
			}
		}
		return len(ids)
	}
	completed := reuse()
	for i, b := range got {
		if !bytes.Equal(b.Bytes(), want[i]) {
			t.Errorf("packet %d (%d bytes) changed when the guest reused the buffers of the %d descriptors handed back", i, len(want[i]), completed)
		}
	}
	c.ConsumeBulk(got)
	bufs := make([]*buffer.Buf, 8)
	deadline := time.Now().Add(10 * time.Second)
	for completed < len(sizes) && time.Now().Before(deadline) {
		if n, err := p.RxQueue(0).Receive(c, bufs); n != 0 || err != nil {
			t.Fatalf("Receive = %d, %v from a guest that sent nothing more", n, err)
		}
		completed += reuse()
		time.Sleep(time.Millisecond)
	}
	if completed != len(sizes) {
		t.Errorf("%d of %d descriptors handed back after their packets were freed", completed, len(sizes))
	}
}

// BenchmarkReceive is the guest-to-port path per packet at 64 and 1500
// bytes: walk the chain, copy the packet into a buffer of the burst's
// bulk get, complete the burst, and free the buffers. The guest's part
// is left out: every descriptor holds the frame and available entry i
// names head i, so the guest only moves its index. What the 1500-byte
// packet costs over the 64-byte one is about what the copy costs: the
// most that wrapping guest data instead of copying it could save.
// With VIRTIO_F_IN_ORDER (the "in-order" runs) a burst completes with
// one used entry instead of one per packet.
//
//	go test -run '^$' -bench Receive -benchtime 200000x ./vhostuser/
func BenchmarkReceive(b *testing.B) {
	for _, size := range []int{64, 1500} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { benchmarkReceive(b, size, 0) })
		b.Run(fmt.Sprintf("%dB-in-order", size), func(b *testing.B) { benchmarkReceive(b, size, featInOrder) })
	}
}

func benchmarkReceive(b *testing.B, size int, features uint64) {
	p, _, c := testPort(b, Config{})
	f := newTestFrontend(b, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf | featEventIdx | features)
	waitRunning(b, p, 1)
	frame := testFrame(size, 1)
	for slot := range testNum {
		f.transmit(slot, frame)
	}
	rx := p.RxQueue(0)
	bufs := make([]*buffer.Buf, 64)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n, err := rx.Receive(c, bufs[:min(len(bufs), b.N-done)])
		if n == 0 || err != nil {
			b.Fatalf("Receive = %d, %v with %d entries available", n, err, testNum)
		}
		for _, pkt := range bufs[:n] {
			if pkt.Len() != size {
				b.Fatalf("received %d bytes, want %d", pkt.Len(), size)
			}
		}
		c.ConsumeBulk(bufs[:n])
		done += n
		f.availIdx[1] += uint16(n)
		f.setAvailIdx(1, f.availIdx[1])
	}
}

// BenchmarkTransmit measures the path into the guest's receive ring:
// bursts of 64 frames copied into posted 2 KiB buffers, which the guest
// posts again.
func BenchmarkTransmit(b *testing.B) {
	for _, size := range []int{64, 1500} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { benchmarkTransmit(b, size) })
	}
}

func benchmarkTransmit(b *testing.B, size int) {
	p, _, c := testPort(b, Config{})
	f := newTestFrontend(b, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf | featEventIdx)
	waitRunning(b, p, 0)
	f.postRx(0, testNum, bufSize)
	frame := testFrame(size, 1)
	tx := p.TxQueue(0)
	bufs := make([]*buffer.Buf, 64)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(len(bufs), b.N-done)
		for i := range bufs[:n] {
			buf, err := c.Get(0)
			if err != nil {
				b.Fatal(err)
			}
			buf.SetData(buf.Headroom(), size)
			copy(buf.Bytes(), frame)
			bufs[i] = buf
		}
		if sent, err := tx.Transmit(c, bufs[:n]); sent != n || err != nil {
			b.Fatalf("Transmit = %d, %v with the guest's ring refilled; want %d", sent, err, n)
		}
		done += n
		// The guest takes the packets and posts the same buffers again.
		f.lastUsed[0] += uint16(n)
		f.availIdx[0] += uint16(n)
		f.setAvailIdx(0, f.availIdx[0])
	}
}
