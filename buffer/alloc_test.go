package buffer

import (
	"testing"

	"softnet.dev/drop"
)

// The steady state must not allocate: these are the paths every packet
// takes.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	p := newTestPool(t, Config{Classes: []ClassConfig{{Room: 2048, Count: 1024}}})
	c := newTestCache(t, p, nil)
	remote := newTestCache(t, p, func() {})
	bulk := make([]*Buf, 64)

	cases := map[string]func(){
		"get+consume": func() {
			b, _ := c.Get(0)
			c.Consume(b)
		},
		"get+drop": func() {
			b, _ := c.Get(0)
			c.Drop(b, drop.NoRoute)
		},
		"bulk": func() {
			if err := c.GetBulk(bulk, 0); err != nil {
				t.Fatal(err)
			}
			c.ConsumeBulk(bulk)
		},
		"remote free": func() {
			if err := c.GetBulk(bulk, 0); err != nil {
				t.Fatal(err)
			}
			for _, b := range bulk {
				remote.Consume(b)
			}
			remote.Drain()
			c.Drain()
		},
		"remote bulk free": func() {
			if err := c.GetBulk(bulk, 0); err != nil {
				t.Fatal(err)
			}
			remote.DropBulk(bulk, drop.FullRing)
			c.Drain()
		},
		"shared": func() {
			b, _ := c.Get(0)
			b.Ref()
			remote.Consume(b)
			c.Consume(b)
		},
		"publish": func() { c.Publish() },
	}
	for name, f := range cases {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocs/op", name, n)
		}
	}
	remote.Drain()
}
