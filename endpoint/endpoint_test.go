package endpoint

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/memport"
	"softnet.dev/packet"
)

// Several endpoints on two workers, each drained by its own goroutine
// that releases in varying batches: every lent buffer comes home through
// a refill ring, and none is freed remotely.
func TestLendReleaseConcurrent(t *testing.T) {
	const workers, count = 2, 20000
	r := newRig(t, workers, count, Config{})
	// The generator's flows all go to one destination; bind it plus raw
	// and unrelated endpoints that must see nothing.
	udp := r.bind(t, UDP(genDst()), Options{})
	others := []*Endpoint{
		r.bind(t, UDP(netip.MustParseAddrPort("198.19.255.254:10")), Options{}),
		r.bind(t, RawIP(packet.ProtoICMP, genDst().Addr()), Options{}),
		r.bind(t, UDP(netip.MustParseAddrPort("198.19.255.253:9")), Options{}),
	}
	r.start(t)
	var wg sync.WaitGroup
	var got int
	wg.Add(1)
	go func() {
		defer wg.Done()
		views := make([]View, 48)
		for got < workers*count-int(udp.Stats().RingFull+udp.Stats().QuotaFull) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			err := udp.Wait(ctx)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Error(err)
				return
			}
			n, err := udp.Receive(views[:1+got%len(views)])
			if err != nil {
				t.Error(err)
				return
			}
			for _, v := range views[:n] {
				if v.Dst != genDst() || len(v.Payload) != 200-28 {
					t.Errorf("view %v -> %v, %d bytes", v.Src, v.Dst, len(v.Payload))
				}
			}
			// Release in two calls, one view at a time and the rest.
			if n > 0 {
				if err := udp.Release(views[0]); err != nil {
					t.Error(err)
				}
				if err := udp.Release(views[1:n]...); err != nil {
					t.Error(err)
				}
			}
			got += n
		}
	}()
	wg.Wait()
	eventually(t, "all buffers refilled", func() bool {
		s := udp.Stats()
		return s.Refilled == s.Lent
	})
	r.eng.Stop()
	s := udp.Stats()
	if s.Lent == 0 || s.Received != s.Lent || s.Released != s.Lent || s.Refilled != s.Lent || s.Rejected != 0 {
		t.Errorf("stats %+v", s)
	}
	if s.Lent+s.RingFull+s.QuotaFull != workers*count {
		t.Errorf("lent %d + dropped %d != generated %d", s.Lent, s.RingFull+s.QuotaFull, workers*count)
	}
	for _, o := range others {
		if os := o.Stats(); os.Lent != 0 {
			t.Errorf("%s lent %d", o.Flow(), os.Lent)
		}
	}
	if ps := r.pool.Stats(); ps.RemoteFrees != 0 {
		t.Errorf("%d remote frees: a lent buffer was freed off its worker", ps.RemoteFrees)
	}
}

// An application that never releases holds at most its quota; past it,
// its flow drops with SOCKET_RCVBUFF while another endpoint keeps
// receiving.
func TestQuotaExhaustion(t *testing.T) {
	r := newRig(t, 1, 4000, Config{})
	hog := r.bind(t, UDP(genDst()), Options{Quota: 100, RingSize: 1024})
	r.start(t)
	// The generator finishing is not the worker having delivered its last
	// burst: wait until every packet was either lent or dropped.
	eventually(t, "every packet delivered", func() bool {
		s := hog.Stats()
		return s.Lent+s.QuotaFull == 4000
	})
	views := make([]View, 1024)
	n, err := hog.Receive(views)
	if err != nil {
		t.Fatal(err)
	}
	s := hog.Stats()
	if n != 100 || s.Lent != 100 || s.QuotaFull != 3900 || s.Drops[drop.SocketRcvBuff] != 3900 {
		t.Fatalf("received %d; stats %+v", n, s)
	}
	if err := hog.Release(views[:n]...); err != nil {
		t.Fatal(err)
	}
	eventually(t, "refilled", func() bool { return hog.Stats().Refilled == 100 })
}

// A full receive ring is a counted drop.
func TestRingFull(t *testing.T) {
	r := newRig(t, 1, 1000, Config{})
	e := r.bind(t, UDP(genDst()), Options{RingSize: 64, Quota: 4096})
	r.start(t)
	eventually(t, "drops counted", func() bool { return e.Stats().RingFull == 1000-64 })
	if s := e.Stats(); s.Lent != 64 || s.Drops[drop.SocketRcvBuff] != 1000-64 {
		t.Fatalf("stats %+v", s)
	}
}

// Double releases, another endpoint's views and the zero View are refused
// with ErrNotLent; with Debug the report names both call sites.
func TestBadRelease(t *testing.T) {
	for _, debug := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "debug"}[debug], func(t *testing.T) {
			r := newRig(t, 1, 100, Config{Debug: debug}, 200)
			a := r.bind(t, UDP(genDst()), Options{})
			r.start(t)
			eventually(t, "delivered", func() bool { return a.Stats().Lent == 100 })
			views := make([]View, 100)
			n, _ := a.Receive(views)
			if n != 100 {
				t.Fatalf("received %d", n)
			}
			if err := a.Check(views[0]); err != nil {
				t.Fatal(err)
			}
			if err := a.Release(views[0]); err != nil {
				t.Fatal(err)
			}
			err := a.Release(views[0])
			if !errors.Is(err, ErrNotLent) {
				t.Fatalf("double release: %v", err)
			}
			if debug {
				if !strings.Contains(err.Error(), "TestBadRelease") || !strings.Contains(err.Error(), "released before at") {
					t.Errorf("debug report without call sites: %v", err)
				}
				if len(a.DebugReports()) != 1 {
					t.Errorf("reports %q", a.DebugReports())
				}
				if views[0].Payload[0] != poisonByte {
					t.Error("released payload not poisoned")
				}
			}
			if err := a.Check(views[0]); !errors.Is(err, ErrNotLent) {
				t.Errorf("use after release not detected: %v", err)
			}
			if err := a.Release(View{}); !errors.Is(err, ErrNotLent) {
				t.Errorf("zero view: %v", err)
			}
			// Another endpoint's view.
			b := r.bind(t, UDP(netip.MustParseAddrPort("198.19.255.254:10")), Options{})
			if err := b.Release(views[1]); !errors.Is(err, ErrNotLent) {
				t.Errorf("foreign release: %v", err)
			}
			// A batch with one bad view releases the good ones.
			if err := a.Release(views[:10]...); !errors.Is(err, ErrNotLent) {
				t.Errorf("batch: %v", err)
			}
			if err := a.Release(views[10:n]...); err != nil {
				t.Fatal(err)
			}
			eventually(t, "refilled", func() bool { return a.Stats().Refilled == 100 })
			if s := a.Stats(); s.BadReleases != 3 || s.Rejected != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// Closing an endpoint with buffers outstanding (received, still in the
// ring, and send buffers) returns them all; the pool balances.
func TestCloseWithOutstanding(t *testing.T) {
	r := newRig(t, 2, 500, Config{})
	e := r.bind(t, UDP(genDst()), Options{RingSize: 1024, Quota: 4096})
	r.start(t)
	eventually(t, "delivered", func() bool { return e.Stats().Lent == 1000 })
	views := make([]View, 300)
	n, _ := e.Receive(views) // keep these, leave the rest in the rings
	var msgs [4]Message
	eventually(t, "send buffers", func() bool { k, _ := e.Buffers(msgs[:], 100); return k == len(msgs) })
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Release(views[:n]...); !errors.Is(err, ErrClosed) {
		t.Errorf("release after close: %v", err)
	}
	if _, err := e.Send(msgs[:]); !errors.Is(err, ErrClosed) {
		t.Errorf("send after close: %v", err)
	}
	eventually(t, "reclaimed", func() bool { s := r.table.Stats(); return s.Reclaimed == 1000 })
	eventually(t, "forgotten", func() bool { return len(*r.table.eps.Load()) == 0 })
	if got := r.pool.Stats(); got.InUse != 0 {
		// InUse is as of the caches' last publish: stop to publish.
		r.eng.Stop()
		if got = r.pool.Stats(); got.InUse != 0 {
			t.Errorf("%d buffers in use after close", got.InUse)
		}
	}
	// The flow is free again.
	if _, err := r.table.Bind(UDP(genDst()), Options{}); err != nil {
		t.Fatal(err)
	}
}

// The table's Close (engine Close) returns what open endpoints hold.
func TestEngineCloseWithOpenEndpoint(t *testing.T) {
	r := newRig(t, 2, 100, Config{})
	e := r.bind(t, UDP(genDst()), Options{})
	r.start(t)
	eventually(t, "delivered", func() bool { return e.Stats().Lent == 200 })
	views := make([]View, 10)
	e.Receive(views)
	r.close(t) // fails on a leak
	if _, err := e.Receive(views); !errors.Is(err, ErrClosed) {
		t.Errorf("receive after table close: %v", err)
	}
}

// Send and WriteTo go through the datapath: a packet sent to another
// endpoint's address is delivered to it, and ReadFrom copies it out.
func TestSendLoopback(t *testing.T) {
	r := newRig(t, 2, 0, Config{}) // the generator produces nothing
	a := r.bind(t, UDP(netip.MustParseAddrPort("198.18.0.1:7000")), Options{})
	b := r.bind(t, UDP(netip.MustParseAddrPort("198.18.0.2:7001")), Options{})
	raw := r.bind(t, RawIP(253, netip.MustParseAddr("198.18.0.3")), Options{})
	r.start(t)
	if _, err := a.WriteTo([]byte("hello"), netip.MustParseAddrPort("198.18.0.2:7001")); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 64)
	n, src, err := b.ReadFrom(p)
	if err != nil || string(p[:n]) != "hello" || src != netip.MustParseAddrPort("198.18.0.1:7000") {
		t.Fatalf("ReadFrom = %q from %v, %v", p[:n], src, err)
	}
	// A batch through Buffers and Send, to the raw endpoint.
	rawSrc := r.bind(t, RawIP(253, netip.MustParseAddr("198.18.0.4")), Options{})
	var msgs [8]Message
	k := 0
	eventually(t, "send buffers", func() bool { k, _ = rawSrc.Buffers(msgs[:], 3); return k > 0 })
	for i := range msgs[:k] {
		copy(msgs[i].Payload, "raw")
		msgs[i].Dst = netip.AddrPortFrom(netip.MustParseAddr("198.18.0.3"), 0)
	}
	if sent, err := rawSrc.Send(msgs[:k]); err != nil || sent != k {
		t.Fatalf("Send = %d, %v", sent, err)
	}
	views := make([]View, 8)
	got := 0
	for got < k {
		if err := raw.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		n, _ := raw.Receive(views)
		for _, v := range views[:n] {
			if string(v.Payload) != "raw" || v.Src.Addr() != netip.MustParseAddr("198.18.0.4") {
				t.Errorf("raw view %v %q", v.Src, v.Payload)
			}
		}
		raw.Release(views[:n]...)
		got += n
	}
	if _, err := a.WriteTo(make([]byte, a.MaxPayload()+1), netip.MustParseAddrPort("198.18.0.2:7001")); !errors.Is(err, ErrTooBig) {
		t.Errorf("oversized WriteTo: %v", err)
	}
	if _, err := a.WriteTo([]byte("x"), netip.MustParseAddrPort("[2001:db8::1]:1")); err == nil {
		t.Error("WriteTo to another address family succeeded")
	}
}

func TestBindErrors(t *testing.T) {
	r := newRig(t, 1, 0, Config{})
	r.bind(t, UDP(genDst()), Options{})
	if _, err := r.table.Bind(UDP(genDst()), Options{}); !errors.Is(err, ErrInUse) {
		t.Errorf("second bind: %v", err)
	}
	if _, err := r.table.Bind(Flow{Proto: packet.ProtoTCP, Local: genDst()}, Options{}); err == nil {
		t.Error("TCP flow accepted")
	}
	if _, err := r.table.Bind(UDP(netip.AddrPort{}), Options{}); err == nil {
		t.Error("flow without address accepted")
	}
	_ = memport.MinSize
}
