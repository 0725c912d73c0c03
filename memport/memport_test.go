package memport

import (
	"net/netip"
	"testing"

	"go.uber.org/goleak"
	"softnet.dev/buffer"
	"softnet.dev/packet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newPool(t testing.TB, cfg buffer.Config) *buffer.Pool {
	t.Helper()
	p, err := buffer.NewPool(cfg)
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	return p
}

func newCache(t testing.TB, p *buffer.Pool) *buffer.Cache {
	t.Helper()
	c, err := p.NewCache(nil)
	if err != nil {
		t.Fatalf("NewCache: %v", err)
	}
	return c
}

// leakCheck is how every test ends: every buffer must be back in the pool.
func leakCheck(t testing.TB, p *buffer.Pool) {
	t.Helper()
	if err := p.Close(); err != nil {
		t.Errorf("pool leak check: %v", err)
	}
}

// fill takes n buffers from c, each holding its index in a payload of
// size bytes.
func fill(t testing.TB, c *buffer.Cache, n, size int) []*buffer.Buf {
	t.Helper()
	bufs := make([]*buffer.Buf, n)
	for i := range bufs {
		b, err := c.Get(buffer.ClassMTU)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		d, ok := b.Append(size)
		if !ok {
			t.Fatalf("Append(%d) failed", size)
		}
		for j := range d {
			d[j] = byte(i + j)
		}
		bufs[i] = b
	}
	return bufs
}

var (
	bench4 = netip.MustParsePrefix("198.18.0.0/15")
	bench6 = netip.MustParsePrefix("2001:db8::/32")
)

// mustGen returns a generator, failing the test on error.
func mustGen(t testing.TB, cfg GenConfig) *Generator {
	t.Helper()
	g, err := NewGenerator("gen", cfg)
	if err != nil {
		t.Fatalf("NewGenerator: %v", err)
	}
	return g
}

func mustSink(t testing.TB, cfg SinkConfig) *Sink {
	t.Helper()
	s, err := NewSink("sink", cfg)
	if err != nil {
		t.Fatalf("NewSink: %v", err)
	}
	return s
}

func layerName(l packet.Layer) string {
	if l == packet.L2 {
		return "L2"
	}
	return "L3"
}
