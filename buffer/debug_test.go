package buffer

import (
	"errors"
	"strings"
	"testing"
)

func debugPool(t *testing.T) (*Pool, *Cache) {
	cfg := small(8)
	cfg.Debug = true
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.NewCache(nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, c
}

func TestDebugReportsDoubleFreeWithSites(t *testing.T) {
	p, c := debugPool(t)
	b, _ := c.Get(0)
	c.Consume(b)
	c.Consume(b)
	err := p.Close()
	var leak *LeakError
	if !errors.As(err, &leak) || leak.Outstanding != 0 || len(leak.Reports) != 1 {
		t.Fatalf("Close = %v", err)
	}
	r := leak.Reports[0]
	if !strings.Contains(r, "double free of buffer") || strings.Count(r, "TestDebugReportsDoubleFreeWithSites") != 3 {
		t.Fatalf("report does not name the test as free, first-free and take site: %s", r)
	}
}

func TestDebugCatchesWriteAfterFree(t *testing.T) {
	p, c := debugPool(t)
	b, _ := c.Get(0)
	if b.Frame()[0] != poisonByte {
		t.Fatal("fresh frame not poisoned")
	}
	data := b.Frame()
	c.Consume(b)
	if data[0] != poisonByte {
		t.Fatal("freed frame not poisoned")
	}
	data[100] = 1 // use after free
	b2, _ := c.Get(0)
	if b2 != b {
		t.Fatal("LIFO cache did not return the same buffer")
	}
	c.Consume(b2)
	err := p.Close()
	var leak *LeakError
	if !errors.As(err, &leak) || len(leak.Reports) != 1 || !strings.Contains(leak.Reports[0], "written after free at frame offset 100") {
		t.Fatalf("Close = %v", err)
	}
}

func TestDebugLeakNamesSite(t *testing.T) {
	p, c := debugPool(t)
	for range 3 {
		if _, err := c.Get(0); err != nil {
			t.Fatal(err)
		}
	}
	err := p.Close()
	var leak *LeakError
	if !errors.As(err, &leak) || leak.Outstanding != 3 || len(leak.Sites) != 1 {
		t.Fatalf("Close = %v", err)
	}
	if !strings.Contains(leak.Sites[0], "TestDebugLeakNamesSite") || !strings.Contains(leak.Sites[0], "(3 buffers)") {
		t.Fatalf("site = %s", leak.Sites[0])
	}
	if !strings.Contains(err.Error(), "3 buffers not returned") {
		t.Fatalf("message = %s", err)
	}
}

func TestDebugForeignFree(t *testing.T) {
	p, c := debugPool(t)
	c.Consume(&Buf{id: 3})
	err := p.Close()
	var leak *LeakError
	if !errors.As(err, &leak) || len(leak.Reports) != 1 || !strings.Contains(leak.Reports[0], "not from this pool at softnet.dev/buffer.TestDebugForeignFree") {
		t.Fatalf("Close = %v", err)
	}
}
