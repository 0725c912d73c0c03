package memport

import (
	"encoding/binary"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/port"
)

func mustPair(t testing.TB, cfg PairConfig) (*PairPort, *PairPort) {
	t.Helper()
	a, b, err := NewPair("a", "b", cfg)
	if err != nil {
		t.Fatalf("NewPair: %v", err)
	}
	return a, b
}

// send transmits n packets of size bytes on queue q of from, each tagged
// with the queue and its index, and returns their first bytes.
func send(t *testing.T, from *PairPort, c *buffer.Cache, q, n, size int) {
	t.Helper()
	bufs := fill(t, c, n, size)
	for i, b := range bufs {
		b.Bytes()[0], b.Bytes()[1] = byte(q), byte(i)
	}
	sent, err := from.TxQueue(q).Transmit(c, bufs)
	if err != nil || sent != n {
		t.Fatalf("%s queue %d: Transmit = %d, %v; want %d", from.Info().Name, q, sent, err, n)
	}
}

// expect receives exactly n packets on queue q of to, in order, and frees
// them into c.
func expect(t *testing.T, to *PairPort, c *buffer.Cache, q, n int) {
	t.Helper()
	out := make([]*buffer.Buf, n+1)
	got, err := to.RxQueue(q).Receive(c, out)
	if err != nil || got != n {
		t.Fatalf("%s queue %d: Receive = %d, %v; want %d", to.Info().Name, q, got, err, n)
	}
	for i, b := range out[:got] {
		if d := b.Bytes(); d[0] != byte(q) || d[1] != byte(i) {
			t.Errorf("%s queue %d packet %d: got tag %d/%d", to.Info().Name, q, i, d[0], d[1])
		}
	}
	c.ConsumeBulk(out[:got])
}

func TestPairRoundTrip(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	ca, cb := newCache(t, pool), newCache(t, pool)
	a, b := mustPair(t, PairConfig{Queues: 3, RingSize: 16})
	if got := a.Info(); got.Queues != 3 || got.Name != "a" || got.MaxFrame != DefaultMaxFrame || b.Peer() != a {
		t.Fatalf("Info = %v", got)
	}
	for q := range 3 {
		send(t, a, ca, q, 5+q, 100)
		send(t, b, cb, q, 7, 60)
	}
	for q := range 3 {
		expect(t, b, cb, q, 5+q)
		expect(t, a, ca, q, 7)
	}
	if a.RxQueue(3) != nil || a.TxQueue(-1) != nil {
		t.Error("queue out of range is not nil")
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.TxPackets != 18 || sa.TxBytes != 1800 || sb.RxPackets != 18 || sb.RxBytes != 1800 {
		t.Errorf("a->b stats: %+v / %+v", sa, sb)
	}
	if sb.TxPackets != 21 || sa.RxPackets != 21 || sa.RxBytes != 21*60 {
		t.Errorf("b->a stats: %+v / %+v", sb, sa)
	}
	ca.Publish()
	cb.Publish()
	// Each side freed the other's buffers: deferred remote frees.
	if s := pool.Stats(); s.RemoteFrees != 39 || s.Consumed != 39 {
		t.Errorf("pool: remote frees %d, consumed %d; want 39", s.RemoteFrees, s.Consumed)
	}
	if err := errors.Join(a.CloseInto(ca), b.CloseInto(cb)); err != nil {
		t.Fatal(err)
	}
	leakCheck(t, pool)
}

func TestPairFullRing(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	ca, cb := newCache(t, pool), newCache(t, pool)
	a, b := mustPair(t, PairConfig{RingSize: 8})
	bufs := fill(t, ca, 20, 64)
	for i, b := range bufs {
		b.Bytes()[0], b.Bytes()[1] = 0, byte(i)
	}
	if n, err := a.TxQueue(0).Transmit(ca, bufs); n != 8 || err != nil {
		t.Fatalf("Transmit = %d, %v; want 8", n, err)
	}
	ca.Publish()
	if s := pool.Stats(); s.Drops[drop.FullRing] != 12 {
		t.Errorf("FULL_RING drops = %d, want 12", s.Drops[drop.FullRing])
	}
	if s := a.Stats(); s.FullRing != 12 || s.TxPackets != 8 || s.TxBytes != 8*64 {
		t.Errorf("stats = %+v", s)
	}
	expect(t, b, cb, 0, 8)
	if err := errors.Join(a.CloseInto(ca), b.CloseInto(cb)); err != nil {
		t.Fatal(err)
	}
	leakCheck(t, pool)
}

func TestPairTooBig(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	ca, cb := newCache(t, pool), newCache(t, pool)
	a, b := mustPair(t, PairConfig{MaxFrame: 100})
	bufs := append(fill(t, ca, 2, 100), fill(t, ca, 1, 101)...)
	bufs = append(bufs, fill(t, ca, 1, 50)...)
	want := []*buffer.Buf{bufs[0], bufs[1], bufs[3]}
	if n, err := a.TxQueue(0).Transmit(ca, bufs); n != 3 || err != nil {
		t.Fatalf("Transmit = %d, %v; want 3", n, err)
	}
	out := make([]*buffer.Buf, 4)
	n, _ := b.RxQueue(0).Receive(cb, out)
	for i := range want {
		if i >= n || out[i] != want[i] {
			t.Errorf("packet %d out of order or missing", i)
		}
	}
	cb.ConsumeBulk(out[:n])
	ca.Publish()
	if s := pool.Stats(); s.Drops[drop.PktTooBig] != 1 || a.Stats().TooBig != 1 {
		t.Errorf("PKT_TOO_BIG drops = %d, stats %+v", s.Drops[drop.PktTooBig], a.Stats())
	}
	if err := errors.Join(a.CloseInto(ca), b.CloseInto(cb)); err != nil {
		t.Fatal(err)
	}
	leakCheck(t, pool)
}

func TestPairDown(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	ca, cb := newCache(t, pool), newCache(t, pool)
	a, b := mustPair(t, PairConfig{})
	send(t, b, cb, 0, 2, 64) // waiting in a's ring across the down period
	a.SetDown(true)
	if n, err := a.TxQueue(0).Transmit(ca, fill(t, ca, 3, 64)); n != 0 || !errors.Is(err, port.ErrDown) {
		t.Errorf("Transmit on a down end = %d, %v", n, err)
	}
	if n, err := a.RxQueue(0).Receive(ca, make([]*buffer.Buf, 4)); n != 0 || !errors.Is(err, port.ErrDown) {
		t.Errorf("Receive on a down end = %d, %v", n, err)
	}
	// The peer is up: its queue still works, but nothing reaches a.
	if n, err := b.TxQueue(0).Transmit(cb, fill(t, cb, 4, 64)); n != 0 || err != nil {
		t.Errorf("Transmit toward a down peer = %d, %v; want 0, nil", n, err)
	}
	ca.Publish()
	cb.Publish()
	if s := pool.Stats(); s.Drops[drop.DevReady] != 7 {
		t.Errorf("DEV_READY drops = %d, want 7", s.Drops[drop.DevReady])
	}
	if a.Stats().Down != 3 || b.Stats().Down != 4 {
		t.Errorf("down drops: a %+v, b %+v", a.Stats(), b.Stats())
	}
	a.SetDown(false)
	expect(t, a, ca, 0, 2)
	send(t, a, ca, 0, 1, 64)
	expect(t, b, cb, 0, 1)
	if err := errors.Join(a.CloseInto(ca), b.CloseInto(cb)); err != nil {
		t.Fatal(err)
	}
	leakCheck(t, pool)
}

func TestPairCloseInFlight(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	ca, cb := newCache(t, pool), newCache(t, pool)
	a, b := mustPair(t, PairConfig{Queues: 2, RingSize: 128})
	for q := range 2 {
		send(t, a, ca, q, 100, 64)
		send(t, b, cb, q, 30, 64)
	}
	// Close a first: it purges what b sent it, and b's transmits toward
	// it fail from then on.
	if err := a.CloseInto(ca); err != nil {
		t.Fatal(err)
	}
	if err := a.CloseInto(ca); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if n, err := b.TxQueue(0).Transmit(cb, fill(t, cb, 5, 64)); n != 0 || !errors.Is(err, port.ErrDown) {
		t.Errorf("Transmit toward a closed peer = %d, %v", n, err)
	}
	if n, err := a.TxQueue(0).Transmit(ca, fill(t, ca, 1, 64)); n != 0 || !errors.Is(err, port.ErrDown) {
		t.Errorf("Transmit on a closed end = %d, %v", n, err)
	}
	if fd := a.RxQueue(0).FD(); fd != -1 {
		t.Errorf("FD after Close = %d", fd)
	}
	if err := b.CloseInto(cb); err != nil {
		t.Fatal(err)
	}
	ca.Publish()
	cb.Publish()
	s := pool.Stats()
	if s.Drops[drop.QueuePurge] != 260 || s.Drops[drop.DevReady] != 6 {
		t.Errorf("drops: QUEUE_PURGE %d (want 260), DEV_READY %d (want 6)", s.Drops[drop.QueuePurge], s.Drops[drop.DevReady])
	}
	leakCheck(t, pool)
}

// poll reports whether fd becomes readable within d.
func poll(t *testing.T, fd int, d time.Duration) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(d.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		return n == 1 && fds[0].Revents&unix.POLLIN != 0
	}
}

func TestPairWakeup(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	cb := newCache(t, pool)
	a, b := mustPair(t, PairConfig{})
	rx := b.RxQueue(0)
	if rx.FD() < 0 {
		t.Fatal("no eventfd")
	}

	// Not armed: a transmit makes no wakeup.
	ca := newCache(t, pool)
	send(t, a, ca, 0, 1, 64)
	if poll(t, rx.FD(), 0) {
		t.Error("fd readable without Arm")
	}
	if !rx.Arm() {
		t.Error("Arm with a packet queued reported nothing pending")
	}
	rx.Disarm()
	expect(t, b, cb, 0, 1)

	// Armed and empty: a transmit from another goroutine wakes us.
	if rx.Arm() {
		t.Fatal("Arm on an empty queue reported pending")
	}
	var wg sync.WaitGroup
	bufs := fill(t, ca, 2, 64)
	wg.Go(func() {
		time.Sleep(20 * time.Millisecond)
		tx := a.TxQueue(0)
		n1, err1 := tx.Transmit(ca, bufs[:1])
		n2, err2 := tx.Transmit(ca, bufs[1:]) // the flag was claimed: no second write
		if n1+n2 != 2 || err1 != nil || err2 != nil {
			t.Errorf("Transmit = %d, %v; %d, %v", n1, err1, n2, err2)
		}
	})
	if !poll(t, rx.FD(), 5*time.Second) {
		t.Fatal("fd not readable after the peer transmitted")
	}
	rx.Disarm()
	wg.Wait()
	if poll(t, rx.FD(), 0) {
		t.Error("fd still readable after Disarm")
	}
	out := make([]*buffer.Buf, 4)
	if n, _ := rx.Receive(cb, out); n != 2 {
		t.Fatalf("received %d, want 2", n)
	}
	cb.ConsumeBulk(out[:2])
	if err := errors.Join(a.CloseInto(ca), b.CloseInto(cb)); err != nil {
		t.Fatal(err)
	}
	leakCheck(t, pool)
}

// TestPairSleepingConsumer runs a producer and a consumer that sleeps on
// the eventfd whenever its queue is empty: a lost wakeup would stall it.
func TestPairSleepingConsumer(t *testing.T) {
	const total = 20000
	pool := newPool(t, buffer.Config{})
	a, b := mustPair(t, PairConfig{RingSize: 64})
	ca, cb := newCache(t, pool), newCache(t, pool)
	var wg sync.WaitGroup
	wg.Go(func() {
		bufs := make([]*buffer.Buf, 16)
		for sent := 0; sent < total; {
			k := min(len(bufs), total-sent)
			if err := ca.GetBulk(bufs[:k], buffer.ClassMTU); err != nil {
				t.Errorf("GetBulk: %v", err)
				return
			}
			for i, b := range bufs[:k] {
				d, _ := b.Append(4)
				binary.LittleEndian.PutUint32(d, uint32(sent+i))
			}
			// A full ring drops the rest of the burst; the next burst
			// numbers them again, so the consumer sees no gap.
			n, err := a.TxQueue(0).Transmit(ca, bufs[:k])
			if err != nil {
				t.Errorf("Transmit: %v", err)
				return
			}
			sent += n
			if n < k {
				runtime.Gosched()
			}
		}
	})
	rx := b.RxQueue(0)
	out := make([]*buffer.Buf, 32)
	next, sleeps := 0, 0
	for next < total {
		n, err := rx.Receive(cb, out)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range out[:n] {
			if got := int(binary.LittleEndian.Uint32(p.Bytes())); got != next {
				t.Fatalf("packet %d, want %d", got, next)
			}
			next++
		}
		cb.ConsumeBulk(out[:n])
		if n == 0 && next < total {
			if !rx.Arm() {
				sleeps++
				if !poll(t, rx.FD(), 10*time.Second) {
					t.Fatalf("stalled at packet %d: lost wakeup", next)
				}
			}
			rx.Disarm()
		}
	}
	wg.Wait()
	if err := errors.Join(a.CloseInto(ca), b.CloseInto(cb)); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d sleeps, stats a %+v b %+v", sleeps, a.Stats(), b.Stats())
	leakCheck(t, pool)
}

func TestPairConfigErrors(t *testing.T) {
	for _, cfg := range []PairConfig{
		{Queues: -1},
		{Queues: maxQueues + 1},
		{RingSize: 1000},
		{RingSize: -4},
		{MaxFrame: -1},
		{Layer: 9},
	} {
		if a, b, err := NewPair("x", "y", cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
			_ = errors.Join(a.CloseInto(nil), b.CloseInto(nil))
		} else if want := "memport: pair x/y: "; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
			t.Errorf("error without context: %v", err)
		}
	}
}
