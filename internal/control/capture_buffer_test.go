package control

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"softnet.dev/buffer"
	"softnet.dev/engine"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/program"
)

// A capture's buffer is its budget, chunks and records together, and
// one worker alone can fill all of it: how many copies a capture keeps
// before it misses does not depend on how many workers copy into it.
func TestCaptureBufferIsOneBudget(t *testing.T) {
	for _, kib := range []int{MinCaptureBufferKiB, DefaultCaptureBufferKiB, MaxCaptureBufferKiB} {
		cb, err := newCaptureBuffer(kib << 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := cb.footprint(); got > kib<<10 || got <= kib<<10-captureChunkCost {
			t.Errorf("%d KiB: the buffer holds %d bytes", kib, got)
		}
		if want := uint64(kib << 10 / captureChunkCost); cb.chunks != want {
			t.Errorf("%d KiB: %d chunks, want %d", kib, cb.chunks, want)
		}
	}
	// The largest frame fits a few times in the smallest buffer.
	if cb, _ := newCaptureBuffer(MinCaptureBufferKiB << 10); cb.chunks < 3*chunksFor(65535+18) {
		t.Errorf("the smallest buffer has %d chunks, too few for three frames of 64 KiB", cb.chunks)
	}
	if _, err := newCaptureBuffer(captureChunkCost - 1); err == nil {
		t.Error("a buffer smaller than a chunk was made")
	}

	const budget = 64 << 10
	for _, size := range []int{60, 128, 129, 1500, 9000} {
		pkt := make([]byte, size)
		var kept []int
		for _, workers := range []int{1, 2, 8} {
			cb, _ := newCaptureBuffer(budget)
			n := 0
			for w := 0; ; w = (w + 1) % workers {
				// Each worker copies in turn from its own goroutine.
				done := make(chan bool)
				go func() { done <- cb.put(pkt, size) }()
				if !<-done {
					break
				}
				n++
			}
			kept = append(kept, n)
		}
		want := int(uint64(budget/captureChunkCost) / chunksFor(size))
		for i, n := range kept {
			if n != want {
				t.Errorf("%d-byte packets, %d workers: kept %d before the first miss, want %d", size, []int{1, 2, 8}[i], n, want)
			}
		}
	}
}

// Copies made by many workers at once while the writer takes them come
// out whole, each worker's in its order, with every miss counted; copies
// that would wrap start at the beginning.
func TestCaptureBufferConcurrent(t *testing.T) {
	const (
		workers   = 4
		perWorker = 5000
	)
	cb, err := newCaptureBuffer(16 << 10)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			pkt := make([]byte, 1500)
			for seq := range perWorker {
				size := 8 + (seq*37+w*101)%len(pkt[8:])
				binary.BigEndian.PutUint32(pkt, uint32(w))
				binary.BigEndian.PutUint32(pkt[4:], uint32(seq))
				for i := 8; i < size; i++ {
					pkt[i] = byte(w + seq + i)
				}
				cb.put(pkt[:size], size+1)
				runtime.Gosched() // so that the writer takes copies between them
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var next [workers]int
	kept := 0
	for finished := false; ; {
		ci, data, ok := cb.next()
		if !ok {
			if finished {
				break
			}
			select {
			case <-done:
				finished = true // one more pass takes what is left
			default:
				runtime.Gosched()
			}
			continue
		}
		w, seq := int(binary.BigEndian.Uint32(data)), int(binary.BigEndian.Uint32(data[4:]))
		if w >= workers || seq < next[w] || ci.Length != len(data)+1 || ci.CaptureLength != len(data) {
			t.Fatalf("copy %d: worker %d seq %d (want at least %d), %d of %d bytes", kept, w, seq, next[w], len(data), ci.Length)
		}
		for i := 8; i < len(data); i++ {
			if data[i] != byte(w+seq+i) {
				t.Fatalf("copy %d (worker %d seq %d): byte %d is %d, want %d", kept, w, seq, i, data[i], byte(w+seq+i))
			}
		}
		next[w] = seq + 1
		kept++
		cb.release(ci)
	}
	t.Logf("kept %d, missed %d, %d laps", kept, cb.missed.Load(), cb.tail.Load()/cb.chunks)
	if missed := cb.missed.Load(); uint64(kept)+missed != workers*perWorker {
		t.Errorf("kept %d and missed %d of %d copies", kept, missed, workers*perWorker)
	}
	if cb.tail.Load() < 2*cb.chunks {
		t.Errorf("the copies went %d times round the buffer, want at least 2", cb.tail.Load()/cb.chunks)
	}
	if cb.head.Load() != cb.tail.Load() {
		t.Errorf("drained, head %d and tail %d differ", cb.head.Load(), cb.tail.Load())
	}
}

// A capture with a tiny buffer on a busy port that nobody reads keeps
// what fits, counts the rest lost and never holds the workers up: every
// packet is forwarded. What it kept reads back as pcap.
func TestCaptureTinyBufferBusyPort(t *testing.T) {
	const perQueue = 20_000
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gen, err := memport.NewGenerator("busy", memport.GenConfig{Layer: packet.L3, Queues: 2, Flows: 4, Count: perQueue, Sizes: []int{64, 1400}})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := memport.NewSink("sink", memport.SinkConfig{Layer: packet.L3, Queues: 2, Validate: memport.ValidateLight})
	if err != nil {
		t.Fatal(err)
	}
	toSink := program.Func{ProgramName: "to-sink", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	e, err := engine.New(engine.Config{Pool: pool, Workers: 2, Programs: []program.Program{toSink}}, gen, sink)
	if err != nil {
		t.Fatal(err)
	}
	filter, err := parseCaptureFilter("proto udp")
	if err != nil {
		t.Fatal(err)
	}
	c, err := newCapture(captureOptions{port: 0, layer: packet.L3, rx: true, tx: true, snaplen: 65535, buffer: 8 << 10, filter: filter})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetTap(0, c); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for sink.Stats().Packets < 2*perQueue && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	e.Stop()
	if st := sink.Stats(); st.Packets != 2*perQueue || st.Bad != 0 {
		t.Fatalf("the sink got %+v of %d packets: the capture held the workers up", st, 2*perQueue)
	}
	lost := c.lost()
	if lost == 0 || lost >= 2*perQueue {
		t.Fatalf("lost %d of %d copies in a buffer of %d chunks", lost, 2*perQueue, c.buf.chunks)
	}
	c.opts.count = 2*perQueue - int(lost)
	if c.opts.count > int(c.buf.chunks) {
		t.Fatalf("%d copies kept in a buffer of %d chunks", c.opts.count, c.buf.chunks)
	}
	var out bytes.Buffer
	n, end, err := c.write(context.Background(), &out, func() {}, func() bool { return true })
	if err != nil || end != endCount || n != c.opts.count {
		t.Fatalf("write: %d packets, end %s, %v; want %d", n, end, err, c.opts.count)
	}
	r, err := pcapgo.NewReader(&out)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if ci.Length != len(data) || (len(data) != 64 && len(data) != 1400) {
			t.Fatalf("packet %d: %d of %d bytes", i, len(data), ci.Length)
		}
	}
	if _, _, err := r.ReadPacketData(); !errors.Is(err, io.EOF) {
		t.Errorf("after %d packets: %v", n, err)
	}
	if !e.ClearTap(0, c) {
		t.Error("the capture's tap was gone")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Close(); err != nil {
		t.Fatalf("leak check: %v", err)
	}
}

// Copying a packet into the capture allocates nothing, filter or not.
func TestCaptureTappedAllocatesNothing(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := pool.NewCache(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cache.Get(0)
	if err != nil {
		t.Fatal(err)
	}
	pkt := udpPacket(t, "198.18.1.1:1000", "198.18.2.1:53")
	room, ok := b.Append(len(pkt))
	if !ok {
		t.Fatal("a buffer has no room for a small packet")
	}
	copy(room, pkt)
	for _, expr := range []string{"", "proto udp and port 53"} {
		filter, err := parseCaptureFilter(expr)
		if err != nil {
			t.Fatal(err)
		}
		c, err := newCapture(captureOptions{layer: packet.L3, rx: true, snaplen: 65535, buffer: 16 << 10, filter: filter})
		if err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(1000, func() { c.Tapped(0, 0, false, b) }); n != 0 {
			t.Errorf("filter %q: %v allocations a packet", expr, n)
		}
		if c.lost() == 0 {
			t.Errorf("filter %q: a buffer nobody read never filled", expr)
		}
	}
	cache.Consume(b)
	cache.Close()
	if err := pool.Close(); err != nil {
		t.Fatalf("leak check: %v", err)
	}
}
