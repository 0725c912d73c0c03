package buffer

import (
	"sync"
	"sync/atomic"
	"testing"

	"softnet.dev/drop"
)

func TestRemoteFreeGoesToOwner(t *testing.T) {
	p := newTestPool(t, Config{Classes: []ClassConfig{{Room: 256, Count: 64}}, CacheSize: 16, DeferMax: 8})
	var kicks atomic.Int32
	owner := newTestCache(t, p, func() { kicks.Add(1) })
	freer := newTestCache(t, p, nil)

	bufs := make([]*Buf, 10)
	if err := owner.GetBulk(bufs, 0); err != nil {
		t.Fatal(err)
	}
	for i, b := range bufs[:3] {
		freer.Consume(b)
		if got := owner.inbound[0].pending(); got != i+1 {
			t.Fatalf("after %d remote frees the owner has %d pending", i+1, got)
		}
		if freer.stacks[0].n != 0 {
			t.Fatal("a remote free landed in the freer's cache")
		}
	}
	if kicks.Load() != 0 {
		t.Fatal("kicked below half of DeferMax")
	}
	freer.Drop(bufs[3], drop.FullRing) // 4 = DeferMax/2: kick once
	freer.Consume(bufs[4])
	if kicks.Load() != 1 {
		t.Fatalf("kicks = %d at 5 pending, want 1", kicks.Load())
	}
	freer.ConsumeBulk(bufs[5:8]) // 8 = DeferMax, pushed with one CAS
	freer.Consume(bufs[8])       // past the maximum: the freer keeps it
	if got := owner.inbound[0].pending(); got != 8 {
		t.Fatalf("pending = %d, want 8", got)
	}
	if freer.stacks[0].n != 1 || freer.stacks[0].bufs[0] != bufs[8] {
		t.Fatal("the freer did not keep the buffer past DeferMax")
	}
	fs := freer.Stats()
	if fs.RemoteFrees != 8 || fs.RemoteKept != 1 || fs.Kicks != 1 || fs.Consumed != 8 || fs.Drops[drop.FullRing] != 1 {
		t.Fatalf("freer stats %+v", fs)
	}

	before := owner.stacks[0].n
	if got := owner.Drain(); got != 8 {
		t.Fatalf("Drain took %d, want 8", got)
	}
	if owner.stacks[0].n != before || owner.stacks[0].chainLen != 8 || owner.inbound[0].pending() != 0 {
		t.Fatal("drained buffers not in the owner's stack")
	}
	if owner.Drain() != 0 {
		t.Fatal("second Drain found buffers")
	}
	// Kicks re-arm once the list has been drained.
	freer.ConsumeBulk(bufs[9:])
	os := owner.Stats()
	if os.Drained != 8 || os.Drains != 1 {
		t.Fatalf("owner stats %+v", os)
	}
	owner.Drain()
	// The kept buffer now belongs to the freer: its next free is local.
	b, _ := freer.Get(0)
	if b != bufs[8] {
		t.Fatal("freer did not reuse the kept buffer")
	}
	owner.Consume(b)
	if freer.inbound[0].pending() != 1 {
		t.Fatal("ownership did not move to the freer")
	}
	freer.Drain()
}

func TestGetBulkDrainsInboundFirst(t *testing.T) {
	p := newTestPool(t, Config{Classes: []ClassConfig{{Room: 256, Count: 8}}, CacheSize: 8, DeferMax: 16})
	owner := newTestCache(t, p, nil)
	freer := newTestCache(t, p, nil)
	bufs := make([]*Buf, 8)
	if err := owner.GetBulk(bufs, 0); err != nil {
		t.Fatal(err)
	}
	freer.ConsumeBulk(bufs)
	// The depot is empty: only the inbound list can satisfy this.
	if err := owner.GetBulk(bufs, 0); err != nil {
		t.Fatalf("GetBulk with all buffers on the inbound list: %v", err)
	}
	freer.Consume(bufs[0])
	// Stack and depot are empty: a miss must drain the inbound list.
	b, err := owner.Get(0)
	if err != nil || b != bufs[0] {
		t.Fatalf("Get after a remote free = %p, %v; want %p", b, err, bufs[0])
	}
	owner.ConsumeBulk(bufs)
	if s := owner.Stats(); s.RemoteFrees != 0 || s.Drained != 9 || s.Drains != 2 {
		t.Fatalf("owner stats %+v", s)
	}
}

func TestClosedCacheSealsInbound(t *testing.T) {
	p := newTestPool(t, small(16))
	owner := newTestCache(t, p, nil)
	freer := newTestCache(t, p, nil)
	bufs := make([]*Buf, 2)
	if err := owner.GetBulk(bufs, 0); err != nil {
		t.Fatal(err)
	}
	freer.Consume(bufs[0])
	owner.Close()
	owner.Close()
	if owner.inbound[0].pending() != 0 {
		t.Fatal("Close left buffers pending")
	}
	freer.Consume(bufs[1])
	if freer.Stats().RemoteKept != 1 {
		t.Fatal("a free to a closed cache was not kept by the freer")
	}
	if owner.Drain() != 0 || owner.inbound[0].head.Load()>>32 != sealed {
		t.Fatal("Drain unsealed a closed cache")
	}
}

// TestConcurrentStress runs workers that allocate, share and free each
// other's buffers, then checks that every buffer came home.
func TestConcurrentStress(t *testing.T) {
	const workers, rounds = 4, 3000
	p := newTestPool(t, Config{Classes: []ClassConfig{{Room: 256, Count: 512}, {Room: 4096, Count: 64}}, CacheSize: 16, DeferMax: 16})
	caches := make([]*Cache, workers)
	wakes := make([]chan struct{}, workers)
	for i := range caches {
		wake := make(chan struct{}, 1)
		wakes[i] = wake
		caches[i] = newTestCache(t, p, func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
	}
	// Each worker sends shared or exclusive buffers to the next one.
	links := make([]chan *Buf, workers)
	for i := range links {
		links[i] = make(chan *Buf, 64)
	}
	var wg sync.WaitGroup
	var nomem atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := caches[w]
			out, in := links[(w+1)%workers], links[w]
			bulk := make([]*Buf, 8)
			for r := range rounds {
				c.Drain()
				class := Class(r % 2)
				if err := c.GetBulk(bulk, class); err != nil {
					nomem.Add(1)
				} else {
					for i, b := range bulk {
						b.Append(1)
						b.Bytes()[0] = byte(w)
						if i%3 == 0 {
							b.Ref() // shared: one ref sent, one freed here
							send(c, out, b)
							c.Consume(b)
						} else if i%3 == 1 {
							send(c, out, b)
						} else {
							c.Drop(b, drop.Filter)
						}
					}
				}
			drain:
				for {
					select {
					case b := <-in:
						if b.Bytes()[0] != byte((w+workers-1)%workers) {
							t.Errorf("worker %d got a buffer written by %d", w, b.Bytes()[0])
						}
						c.Consume(b)
					case <-wakes[w]:
					default:
						break drain
					}
				}
				if r%64 == 0 {
					c.Publish()
				}
			}
		}()
	}
	wg.Wait()
	for w := range workers {
		close(links[w])
		for b := range links[w] {
			caches[w].Consume(b)
		}
	}
	for _, c := range caches {
		c.Drain()
		c.Publish()
	}
	s := p.Stats()
	if s.InUse != 0 {
		t.Fatalf("after stress: %d in use (%d pending on inbound lists)", s.InUse, s.Pending)
	}
	if s.DoubleFrees != 0 || s.Foreign != 0 {
		t.Fatalf("misuse counted: %+v", s.CacheStats)
	}
	if s.RemoteFrees == 0 || s.Drained == 0 {
		t.Fatalf("no remote frees happened: %+v", s.CacheStats)
	}
	// Every allocation ended exactly once; shared buffers were freed twice.
	if want := s.Allocs + s.Allocs/8*((8+2)/3); s.Consumed+s.Drops.Total() != want {
		t.Fatalf("allocs %d (+shared), consumed %d + dropped %d != %d", s.Allocs, s.Consumed, s.Drops.Total(), want)
	}
	t.Logf("stress: %d allocs, %d remote frees, %d kept, %d kicks, %d bulk failures", s.Allocs, s.RemoteFrees, s.RemoteKept, s.Kicks, nomem.Load())
}

// send hands b to the next worker, or drops it when the link is full so
// that the ring of workers cannot deadlock.
func send(c *Cache, out chan<- *Buf, b *Buf) {
	select {
	case out <- b:
	default:
		c.Drop(b, drop.FullRing)
	}
}
