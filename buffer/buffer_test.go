package buffer

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"go.uber.org/goleak"
	"softnet.dev/drop"
	"softnet.dev/internal/knob"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newTestPool returns a pool whose leak check must balance when the test
// ends.
func newTestPool(t testing.TB, cfg Config) *Pool {
	t.Helper()
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("pool leak check: %v", err)
		}
	})
	return p
}

func newTestCache(t testing.TB, p *Pool, kick func()) *Cache {
	t.Helper()
	c, err := p.NewCache(kick)
	if err != nil {
		t.Fatalf("NewCache: %v", err)
	}
	return c
}

func small(count int) Config {
	return Config{Classes: []ClassConfig{{Room: 256, Count: count}}, CacheSize: 8, DeferMax: 8}
}

func TestConfigValidation(t *testing.T) {
	bad := []Config{
		{Classes: []ClassConfig{{Room: 32, Count: 1}}},
		{Classes: []ClassConfig{{Room: 2048, Count: 0}}},
		{Classes: []ClassConfig{{Room: 2048, Count: 1}, {Room: 1024, Count: 1}}},
		{Headroom: 64},
		{CacheSize: 7},
		{DeferMax: 1},
		{MaxCaches: -1},
		{Classes: make([]ClassConfig, maxClasses+1)},
	}
	for i, cfg := range bad {
		if p, err := NewPool(cfg); err == nil {
			p.Close()
			t.Errorf("config %d accepted: %+v", i, cfg)
		}
	}
	p := newTestPool(t, Config{})
	if got := p.Config(); got.Headroom != DefaultHeadroom || got.CacheSize != DefaultCacheSize || got.DeferMax != DefaultDeferMax || len(got.Classes) != 2 {
		t.Fatalf("defaults = %+v", got)
	}
	if p.Room(ClassMTU) < 2048 || p.Room(ClassGSO) < 65536 {
		t.Fatalf("rooms %d, %d", p.Room(ClassMTU), p.Room(ClassGSO))
	}
	for n, want := range map[int]Class{0: ClassMTU, 1500: ClassMTU, 2048: ClassMTU, 2049: ClassGSO, 65536: ClassGSO} {
		if c, ok := p.ClassFor(n); !ok || c != want {
			t.Errorf("ClassFor(%d) = %d, %v; want %d", n, c, ok, want)
		}
	}
	if _, ok := p.ClassFor(65537); ok {
		t.Error("ClassFor(65537) found a class")
	}
}

func TestBufWindow(t *testing.T) {
	p := newTestPool(t, Config{})
	c := newTestCache(t, p, nil)
	b, err := c.Get(ClassMTU)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Consume(b)
	if b.Len() != 0 || b.Headroom() != DefaultHeadroom || b.Tailroom() < 2048 {
		t.Fatalf("fresh buffer: len %d headroom %d tailroom %d", b.Len(), b.Headroom(), b.Tailroom())
	}
	payload, ok := b.Append(100)
	if !ok || len(payload) != 100 {
		t.Fatal("Append(100) failed")
	}
	copy(payload, strings.Repeat("p", 100))
	hdr, ok := b.Prepend(20)
	if !ok || len(hdr) != 20 || b.Len() != 120 || b.Headroom() != DefaultHeadroom-20 {
		t.Fatal("Prepend(20) wrong")
	}
	copy(hdr, strings.Repeat("h", 20))
	if got := string(b.Bytes()); got != strings.Repeat("h", 20)+strings.Repeat("p", 100) {
		t.Fatalf("data = %q", got)
	}
	if _, ok := b.Prepend(b.Headroom() + 1); ok {
		t.Fatal("Prepend past headroom succeeded")
	}
	if _, ok := b.Append(b.Tailroom() + 1); ok {
		t.Fatal("Append past tailroom succeeded")
	}
	if !b.TrimFront(20) || string(b.Bytes()[:1]) != "p" || b.TrimFront(101) {
		t.Fatal("TrimFront wrong")
	}
	if !b.Truncate(10) || b.Len() != 10 || b.Truncate(11) || b.Truncate(-1) {
		t.Fatal("Truncate wrong")
	}
	frame := b.Frame()
	for _, w := range [][2]int{{-1, 1}, {0, -1}, {len(frame), 1}, {1, len(frame)}, {len(frame) + 1, 0}} {
		if b.SetData(w[0], w[1]) {
			t.Errorf("SetData(%d, %d) accepted on a %d-byte frame", w[0], w[1], len(frame))
		}
	}
	if !b.SetData(len(frame), 0) || !b.SetData(0, len(frame)) || b.Len() != len(frame) {
		t.Fatal("SetData rejected a window that fits")
	}
	if &b.Frame()[0] != &b.Bytes()[0] {
		t.Fatal("Bytes does not alias Frame")
	}
}

func TestRefillAndFlushMoveHalfACache(t *testing.T) {
	p := newTestPool(t, small(32))
	c := newTestCache(t, p, nil)
	var bufs []*Buf
	for range 9 {
		b, err := c.Get(0)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	// 9 gets from an 8-entry cache: refills of 4, 4 and 4.
	s := c.Stats()
	if s.Refills != 3 || s.Misses != 3 || s.Hits != 6 || s.Allocs != 9 {
		t.Fatalf("after 9 gets: %+v", s)
	}
	if got := p.classes[0].depot.len(); got != 32-12 {
		t.Fatalf("depot holds %d, want 20", got)
	}
	for _, b := range bufs {
		c.Consume(b)
	}
	// 3 left in the stack + 9 returned = 12 > 8: one flush of the coldest 4.
	s = c.Stats()
	if s.Flushes != 1 || s.Consumed != 9 {
		t.Fatalf("after consuming: %+v", s)
	}
	if st := c.stacks[0]; st.n != 8 {
		t.Fatalf("stack holds %d, want 8", st.n)
	}
	// LIFO: the warmest (last consumed) comes back first.
	b, _ := c.Get(0)
	if b != bufs[8] {
		t.Fatal("Get did not return the last consumed buffer")
	}
	c.Consume(b)
}

func TestGetBulkAllOrNothing(t *testing.T) {
	p := newTestPool(t, small(20))
	c := newTestCache(t, p, nil)
	out := make([]*Buf, 12) // larger than the 8-entry cache
	if err := c.GetBulk(out, 0); err != nil {
		t.Fatal(err)
	}
	seen := map[*Buf]bool{}
	for _, b := range out {
		if b == nil || seen[b] || b.owner() == free || b.Len() != 0 {
			t.Fatalf("bad bulk result %v", out)
		}
		seen[b] = true
	}
	more := make([]*Buf, 9) // 8 remain
	if err := c.GetBulk(more, 0); !errors.Is(err, ErrExhausted) {
		t.Fatalf("GetBulk past capacity: %v", err)
	}
	for _, b := range more {
		if b != nil {
			t.Fatal("failed GetBulk wrote into out")
		}
	}
	if err := c.GetBulk(more[:8], 0); err != nil {
		t.Fatalf("GetBulk of exactly what is left: %v", err)
	}
	if _, err := c.Get(0); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Get on an empty pool: %v", err)
	}
	if c.Stats().Exhausted != 2 {
		t.Fatalf("exhausted = %d", c.Stats().Exhausted)
	}
	c.ConsumeBulk(out)
	c.ConsumeBulk(more[:8])
	if err := c.GetBulk(make([]*Buf, 1), 5); !errors.Is(err, ErrClass) {
		t.Fatalf("bad class: %v", err)
	}
	if _, err := c.Get(5); !errors.Is(err, ErrClass) {
		t.Fatalf("bad class: %v", err)
	}
}

func TestBuild(t *testing.T) {
	p := newTestPool(t, Config{})
	c := newTestCache(t, p, nil)
	other := newTestCache(t, p, nil)
	b, _ := c.Get(ClassMTU)
	id := b.ID()
	copy(b.Frame()[10:], "received")
	got, err := c.Build(id, 10, 8)
	if err != nil || got != b || string(got.Bytes()) != "received" {
		t.Fatalf("Build = %v, %v", got, err)
	}
	for _, tc := range []struct {
		id     uint32
		off, n int
	}{
		{id, -1, 1}, {id, 0, len(b.Frame()) + 1}, {uint32(len(p.meta)), 0, 1}, {^uint32(0), 0, 1},
	} {
		if _, err := c.Build(tc.id, tc.off, tc.n); !errors.Is(err, ErrBadBuild) {
			t.Errorf("Build(%d, %d, %d) = %v", tc.id, tc.off, tc.n, err)
		}
	}
	if _, err := other.Build(id, 0, 1); !errors.Is(err, ErrBadBuild) {
		t.Errorf("Build by a cache that does not hold it: %v", err)
	}
	c.Consume(b)
	if _, err := c.Build(id, 0, 1); !errors.Is(err, ErrBadBuild) {
		t.Errorf("Build of a free buffer: %v", err)
	}
}

func TestSharedBufferFreedByLastHolder(t *testing.T) {
	p := newTestPool(t, small(16))
	c := newTestCache(t, p, nil)
	b, _ := c.Get(0)
	b.Ref()
	b.Ref()
	if b.Refs() != 3 {
		t.Fatalf("refs = %d", b.Refs())
	}
	c.Consume(b)
	c.Drop(b, drop.Filter)
	if b.owner() == free {
		t.Fatal("freed before the last reference")
	}
	c.Consume(b)
	if b.owner() != free || b.Refs() != 1 {
		t.Fatalf("after last free: owner %d refs %d", b.owner(), b.Refs())
	}
	s := c.Stats()
	if s.Consumed != 2 || s.Drops[drop.Filter] != 1 || s.DoubleFrees != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDoubleAndForeignFreesAreCounted(t *testing.T) {
	p := newTestPool(t, small(16))
	q := newTestPool(t, small(16))
	c := newTestCache(t, p, nil)
	qc := newTestCache(t, q, nil)
	b, _ := c.Get(0)
	c.Consume(b)
	c.Consume(b)
	c.Drop(b, drop.NoMem)
	c.ConsumeBulk([]*Buf{b, nil})
	fb, _ := qc.Get(0)
	c.Consume(fb)
	c.Consume(nil)
	s := c.Stats()
	if s.DoubleFrees != 3 || s.Foreign != 3 || s.Consumed != 1 || s.Drops.Total() != 0 {
		t.Fatalf("stats %+v", s)
	}
	if fb.owner() == free {
		t.Fatal("a foreign free changed the buffer")
	}
	qc.Consume(fb)
	// The pool is intact: every buffer can still be taken exactly once.
	all := make([]*Buf, 16)
	if err := c.GetBulk(all, 0); err != nil {
		t.Fatal(err)
	}
	seen := map[*Buf]bool{}
	for _, x := range all {
		if seen[x] {
			t.Fatal("a buffer was handed out twice")
		}
		seen[x] = true
	}
	c.ConsumeBulk(all)
}

func TestDropReasonsCounted(t *testing.T) {
	p := newTestPool(t, small(16))
	c := newTestCache(t, p, nil)
	bufs := make([]*Buf, 4)
	if err := c.GetBulk(bufs, 0); err != nil {
		t.Fatal(err)
	}
	c.Drop(bufs[0], drop.HdrTrunc)
	c.Drop(bufs[1], drop.Reason(200)) // out of range folds into the last reason
	c.DropBulk(bufs[2:], drop.NoRoute)
	s := c.Stats()
	if s.Drops[drop.HdrTrunc] != 1 || s.Drops[drop.NoRoute] != 2 || s.Drops[drop.NumReasons-1] != 1 || s.Consumed != 0 {
		t.Fatalf("drops %v", s.Drops)
	}
}

func TestDropHookSeesEveryDrop(t *testing.T) {
	p := newTestPool(t, small(16))
	c := newTestCache(t, p, nil)
	var seen []string
	c.SetDropHook(func(b *Buf, r drop.Reason) { seen = append(seen, fmt.Sprintf("%s:%s", b.Bytes(), r)) })
	bufs := make([]*Buf, 3)
	if err := c.GetBulk(bufs, 0); err != nil {
		t.Fatal(err)
	}
	for i, b := range bufs {
		b.SetData(b.Headroom(), copy(b.Frame()[b.Headroom():], fmt.Sprint(i)))
	}
	c.Drop(bufs[0], drop.HdrTrunc)
	c.DropBulk(bufs[1:], drop.NoRoute)
	if got := strings.Join(seen, " "); got != "0:HDR_TRUNC 1:NO_ROUTE 2:NO_ROUTE" {
		t.Errorf("hook saw %q", got)
	}
	c.SetDropHook(nil)
	b, _ := c.Get(0)
	c.Drop(b, drop.Filter)
	if len(seen) != 3 {
		t.Errorf("a removed hook still ran: %v", seen)
	}
}

func TestLeakCheckReportsOutstanding(t *testing.T) {
	p, err := NewPool(small(16))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := p.NewCache(nil)
	b, _ := c.Get(0)
	err = p.Close()
	var leak *LeakError
	if !errors.As(err, &leak) || leak.Outstanding != 1 || leak.ByClass[0] != 1 {
		t.Fatalf("Close with a buffer out = %v", err)
	}
	// The memory stays mapped: a late user does not fault.
	b.Bytes()
	copy(b.Frame(), "late")
}

func TestStatsPublished(t *testing.T) {
	p := newTestPool(t, small(32))
	c := newTestCache(t, p, nil)
	bufs := make([]*Buf, 5)
	if err := c.GetBulk(bufs, 0); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Allocs != 0 {
		t.Fatalf("counters visible before Publish: %+v", s)
	}
	c.Publish()
	s := p.Stats()
	if s.Allocs != 5 || s.InUse != 5 || s.Capacity != 32 || s.Caches != 1 {
		t.Fatalf("after publish: %+v", s)
	}
	if s.Classes[0].InDepot+s.Classes[0].InCaches+s.InUse != 32 {
		t.Fatalf("classes do not balance: %+v", s.Classes)
	}
	c.DropBulk(bufs, drop.FullRing)
	c.Publish()
	s = p.Stats()
	if s.InUse != 0 || s.Drops[drop.FullRing] != 5 {
		t.Fatalf("after drops: %+v", s)
	}
	b, _ := c.Get(0)
	c.Consume(b)
	c.Publish()
	if s = p.Stats(); s.HitRate() != 0.5 {
		t.Fatalf("hit rate %v after one miss and one hit", s.HitRate())
	}
}

func TestTooManyCaches(t *testing.T) {
	cfg := small(4)
	cfg.MaxCaches = 2
	p := newTestPool(t, cfg)
	newTestCache(t, p, nil)
	newTestCache(t, p, nil)
	if _, err := p.NewCache(nil); !errors.Is(err, ErrTooManyCaches) {
		t.Fatalf("third cache: %v", err)
	}
}

func TestUncachedGoesToTheDepot(t *testing.T) {
	cfg := small(16)
	cfg.Knobs = knob.PoolUncached()
	p := newTestPool(t, cfg)
	c := newTestCache(t, p, nil)
	b, err := c.Get(0)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.classes[0].depot.len(); got != 15 {
		t.Fatalf("depot holds %d after one uncached get, want 15", got)
	}
	c.Consume(b)
	if got := p.classes[0].depot.len(); got != 16 {
		t.Fatalf("depot holds %d after the free, want 16", got)
	}
	bulk := make([]*Buf, 16)
	if err := c.GetBulk(bulk, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(0); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Get from an empty uncached pool: %v", err)
	}
	c.DropBulk(bulk, drop.NoRoute)
	if s := c.Stats(); s.Refills != 2 || s.Flushes != 17 || s.Allocs != 17 {
		t.Fatalf("stats %+v", s)
	}
}

// Two buffers share a cache line, and none straddles two: the bulk paths
// touch half as many lines as with padding to 40 bytes.
func TestBufIs32Bytes(t *testing.T) {
	if got := unsafe.Sizeof(Buf{}); got != 32 {
		t.Fatalf("Buf is %d bytes, want 32", got)
	}
}
