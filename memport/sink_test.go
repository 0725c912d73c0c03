package memport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/packet"
	"softnet.dev/port"
)

// generate returns n packets of one generator queue.
func generate(t *testing.T, g *Generator, c *buffer.Cache, q, n int) []*buffer.Buf {
	t.Helper()
	bufs := make([]*buffer.Buf, n)
	if got, err := g.RxQueue(q).Receive(c, bufs); got != n || err != nil {
		t.Fatalf("generator: Receive = %d, %v; want %d", got, err, n)
	}
	return bufs
}

func TestSinkFullDetects(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		for _, layer := range []packet.Layer{packet.L3, packet.L2} {
			t.Run(fmt.Sprintf("ipv6=%v/%s", ipv6, layerName(layer)), func(t *testing.T) { testSinkFullDetects(t, ipv6, layer) })
		}
	}
}

func testSinkFullDetects(t *testing.T, ipv6 bool, layer packet.Layer) {
	pool := newPool(t, buffer.Config{})
	c := newCache(t, pool)
	g := mustGen(t, GenConfig{IPv6: ipv6, Layer: layer, Sizes: []int{64, 200}})
	s := mustSink(t, SinkConfig{Validate: ValidateFull, Layer: layer})
	bufs := generate(t, g, c, 0, 10)         // seq 0..9
	bufs[2].Bytes()[bufs[2].Len()-1] ^= 0x01 // corrupted payload
	bufs[3].Truncate(bufs[3].Len() - 1)      // truncated
	c.Consume(bufs[5])                       // lost on the way
	garbage, _ := c.Get(buffer.ClassMTU)
	g1, _ := garbage.Append(60)
	for i := range g1 {
		g1[i] = byte(i * 37)
	}
	sent := []*buffer.Buf{bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], bufs[6], bufs[8], bufs[7], bufs[9], garbage}
	if n, err := s.TxQueue(0).Transmit(c, sent); n != len(sent) || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	// 2 and 3 are bad, so the flow jumps from 1 to 4: lost 2, 3, then 5,
	// then 7 (which comes late: reordered).
	want := SinkStats{Packets: 7, Lost: 4, Reordered: 1, Bad: 3}
	got := s.Stats()
	got.Bytes = 0
	if got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	if err := s.CloseInto(c); err != nil {
		t.Fatal(err)
	}
	if n, err := s.TxQueue(0).Transmit(c, generate(t, g, c, 0, 2)); n != 0 || !errors.Is(err, port.ErrDown) {
		t.Errorf("Transmit after Close = %d, %v", n, err)
	}
	leakCheck(t, pool)
}

func TestSinkLightDetects(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	c := newCache(t, pool)
	g := mustGen(t, GenConfig{Layer: packet.L3})
	s := mustSink(t, SinkConfig{Validate: ValidateLight, Layer: packet.L3})
	bufs := generate(t, g, c, 0, 6)
	bufs[1].Truncate(40)                                   // truncated
	bufs[2].Bytes()[20+8] ^= 0xff                          // magic
	bufs[3].Bytes()[bufs[3].Len()-1] ^= 0x01               // payload: Light does not look
	bufs[4].Bytes()[20+4], bufs[4].Bytes()[20+5] = 0, 0xff // UDP length
	if n, _ := s.TxQueue(0).Transmit(c, bufs); n != 6 {
		t.Fatalf("Transmit = %d", n)
	}
	got := s.Stats()
	if want := (SinkStats{Packets: 3, Bytes: 6*64 - 24, Lost: 3, Bad: 3}); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	if err := s.CloseInto(nil); err != nil {
		t.Fatal(err)
	}
	leakCheck(t, pool)
}

// A HeadersOnly generator's packets are valid to both validations, which
// count them apart and still check their headers, but not their payload.
func TestSinkHeadersOnly(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	c := newCache(t, pool)
	for _, v := range []Validation{ValidateFull, ValidateLight} {
		g := mustGen(t, GenConfig{Layer: packet.L3, Sizes: []int{64, 1500}, HeadersOnly: true})
		s := mustSink(t, SinkConfig{Validate: v, Layer: packet.L3})
		bufs := generate(t, g, c, 0, 8)          // seq 0..7
		bufs[1].Bytes()[bufs[1].Len()-1] ^= 0xff // payload: not generated, not checked
		bufs[2].Bytes()[20+8] ^= 0xff            // magic
		bufs[6].Bytes()[20+7] = 1                // a checksum: only Full looks
		c.Consume(bufs[4])                       // lost on the way
		sent := append(bufs[:4:4], bufs[5:]...)
		if n, err := s.TxQueue(0).Transmit(c, sent); n != len(sent) || err != nil {
			t.Fatalf("Transmit = %d, %v", n, err)
		}
		want := SinkStats{Packets: 6, HeadersOnly: 6, Lost: 2, Bad: 1}
		if v == ValidateFull {
			want = SinkStats{Packets: 5, HeadersOnly: 5, Lost: 3, Bad: 2}
		}
		got := s.Stats()
		got.Bytes = 0
		if got != want {
			t.Errorf("validation %d: stats %+v, want %+v", v, got, want)
		}
		if err := s.CloseInto(c); err != nil {
			t.Fatal(err)
		}
	}
	leakCheck(t, pool)
}

// Arbitrary bytes, and valid packets with random damage, must be counted
// and freed, never crash.
func TestSinkGarbage(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	c := newCache(t, pool)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, v := range []Validation{ValidateFull, ValidateLight} {
		for _, layer := range []packet.Layer{packet.L2, packet.L3} {
			s := mustSink(t, SinkConfig{Validate: v, Layer: layer})
			g := mustGen(t, GenConfig{Flows: 3, Layer: layer, IPv6: rng.IntN(2) == 0, Sizes: []int{64, 80, 1400}})
			sent := 0
			for range 200 {
				bufs := generate(t, g, c, 0, 16)
				for _, b := range bufs {
					d := b.Bytes()
					switch rng.IntN(4) {
					case 0: // random bytes, sometimes with a plausible start
						for i := range d {
							d[i] = byte(rng.Uint32())
						}
						if len(d) > 20 && rng.IntN(2) == 0 {
							d[layerLen(layer)] = byte(4+2*rng.IntN(2))<<4 | 5
						}
					case 1: // flipped bytes
						for range 1 + rng.IntN(3) {
							d[rng.IntN(len(d))] ^= byte(1 + rng.IntN(255))
						}
					case 2: // cut short
						b.Truncate(rng.IntN(len(d)))
					}
				}
				n, err := s.TxQueue(0).Transmit(c, bufs)
				if err != nil || n != len(bufs) {
					t.Fatalf("Transmit = %d, %v", n, err)
				}
				sent += n
			}
			st := s.Stats()
			if st.Packets+st.Bad != uint64(sent) || st.Bad == 0 || st.Packets == 0 {
				t.Errorf("%v/%s: %+v for %d packets", v, layerName(layer), st, sent)
			}
			if err := s.CloseInto(c); err != nil {
				t.Fatal(err)
			}
		}
	}
	leakCheck(t, pool)
}

func layerLen(l packet.Layer) int {
	if l == packet.L2 {
		return packet.EthernetHeaderLen
	}
	return 0
}

func TestSinkDeferred(t *testing.T) {
	const queues, count = 2, 5000
	pool := newPool(t, buffer.Config{})
	c := newCache(t, pool)
	g := mustGen(t, GenConfig{Queues: queues, Flows: 4, Count: count, Bulk: true, Layer: packet.L3})
	s := mustSink(t, SinkConfig{Queues: queues, Validate: ValidateFull, Completion: CompletionDeferred, Pool: pool, Layer: packet.L3})
	bufs := make([]*buffer.Buf, 32)
	for {
		busy := false
		for q := range queues {
			n, err := g.RxQueue(q).Receive(c, bufs)
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				busy = true
				if _, err := s.TxQueue(q).Transmit(c, bufs[:n]); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !busy && !g.RxQueue(0).Arm() && !g.RxQueue(1).Arm() {
			break
		}
		c.Drain()
	}
	if err := s.CloseInto(c); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseInto(c); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	st := s.Stats()
	if st.Packets+st.FullRing != queues*count || st.Bad != 0 || st.Reordered != 0 || st.Lost > st.FullRing {
		t.Errorf("stats %+v", st)
	}
	c.Publish()
	ps := pool.Stats()
	if ps.RemoteFrees == 0 || ps.RemoteFrees+ps.RemoteKept != st.Packets {
		t.Errorf("remote frees %d + kept %d, want %d", ps.RemoteFrees, ps.RemoteKept, st.Packets)
	}
	t.Logf("sink %+v; pool remote frees %d, kept %d", st, ps.RemoteFrees, ps.RemoteKept)
	leakCheck(t, pool)
}

// Close with packets still queued for the completion goroutines: they are
// freed before Close returns.
func TestSinkDeferredCloseInFlight(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	c := newCache(t, pool)
	g := mustGen(t, GenConfig{Layer: packet.L3, Bulk: true})
	s := mustSink(t, SinkConfig{Validate: ValidateLight, Completion: CompletionDeferred, Pool: pool, Layer: packet.L3, RingSize: 64})
	tx := s.TxQueue(0)
	for range 4 {
		if _, err := tx.Transmit(c, generate(t, g, c, 0, 64)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CloseInto(c); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Packets+st.FullRing != 256 {
		t.Errorf("stats %+v", st)
	}
	leakCheck(t, pool)
}

func TestSinkConfigErrors(t *testing.T) {
	for _, cfg := range []SinkConfig{
		{Queues: -2},
		{Completion: CompletionDeferred},
		{Validate: 7},
		{Completion: 9},
		{Layer: 5},
	} {
		if _, err := NewSink("s", cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		} else if !strings.HasPrefix(err.Error(), "memport: sink s: ") {
			t.Errorf("error without context: %v", err)
		}
	}
	pool := newPool(t, buffer.Config{MaxCaches: 1})
	if _, err := NewSink("s", SinkConfig{Queues: 2, Completion: CompletionDeferred, Pool: pool}); err == nil {
		t.Error("NewSink with more queues than the pool has caches succeeded")
	}
	s := mustSink(t, SinkConfig{Queues: 2})
	if s.RxQueue(0) != nil || s.TxQueue(2) != nil || s.Info().MaxFrame != MaxSize+14 {
		t.Errorf("queues or info %v", s.Info())
	}
	leakCheck(t, pool)
}

// An idle completion goroutine parks: it must not burn a core.
func TestSinkDeferredIdle(t *testing.T) {
	pool := newPool(t, buffer.Config{})
	c := newCache(t, pool)
	g := mustGen(t, GenConfig{Layer: packet.L3, Bulk: true})
	s := mustSink(t, SinkConfig{Queues: 2, Validate: ValidateLight, Completion: CompletionDeferred, Pool: pool, Layer: packet.L3})
	if _, err := s.TxQueue(0).Transmit(c, generate(t, g, c, 0, 64)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // let it finish and park
	before := cpuTime(t)
	// A spinning goroutine would use the whole interval; allow a loaded
	// machine's runtime and race-detector overhead up to a quarter of it.
	const idle = 400 * time.Millisecond
	time.Sleep(idle)
	if used := cpuTime(t) - before; used > idle/4 {
		t.Errorf("idle sink used %v of CPU in %v", used, idle)
	}
	// And it wakes again.
	if _, err := s.TxQueue(0).Transmit(c, generate(t, g, c, 0, 64)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.Stats().Packets != 128 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := s.Stats(); st.Packets != 128 {
		t.Errorf("after a wakeup: %+v", st)
	}
	if err := s.CloseInto(c); err != nil {
		t.Fatal(err)
	}
	leakCheck(t, pool)
}

func cpuTime(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
