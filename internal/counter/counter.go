// Package counter publishes counters that one goroutine owns and others
// read. The owner increments plain uint64s — no atomics on the hot path —
// and publishes them once in a while (a worker: once per poll round);
// readers load the published copies. Publishing stores only the values
// that changed, so a round that touched three counters costs three stores.
package counter

import (
	"sync/atomic"

	"softnet.dev/drop"
	"softnet.dev/internal/cacheline"
)

// Published holds the published copy of n counters.
type Published struct {
	last []uint64
	pub  []atomic.Uint64
}

// NewPublished returns room for n counters.
func NewPublished(n int) Published {
	return Published{last: make([]uint64, n), pub: make([]atomic.Uint64, n)}
}

// Publish makes vals visible to Load. Owner only; len(vals) must be the n
// given to NewPublished.
func (p *Published) Publish(vals []uint64) {
	for i, v := range vals[:len(p.last)] {
		if v != p.last[i] {
			p.pub[i].Store(v)
			p.last[i] = v
		}
	}
}

// Len returns the number of counters.
func (p *Published) Len() int { return len(p.pub) }

// Load returns counter i as last published. Safe from any goroutine.
func (p *Published) Load(i int) uint64 { return p.pub[i].Load() }

// AddTo adds every published counter into dst, which must be at least n
// long. Safe from any goroutine.
func (p *Published) AddTo(dst []uint64) {
	for i := range p.pub {
		dst[i] += p.pub[i].Load()
	}
}

// Block is one queue's counters: N, which only the queue's owner (its
// worker) writes, without atomics, and their published copy. Each package
// lays out its own indexes in N.
type Block struct {
	N   []uint64
	pub Published
}

// NewBlock returns n counters, N on cache lines of its own.
func NewBlock(n int) Block {
	return Block{N: cacheline.Make[uint64](n, n), pub: NewPublished(n)}
}

// Publish makes N visible to AddTo. Owner only.
func (b *Block) Publish() { b.pub.Publish(b.N) }

// AddTo adds the published counters into dst. Safe from any goroutine.
func (b *Block) AddTo(dst []uint64) { b.pub.AddTo(dst) }

// Drop counts a drop for reason r in the run of drop.NumReasons counters
// that starts at first; reasons past the enumeration count as its last.
func (b *Block) Drop(first int, r drop.Reason) {
	b.N[first+int(min(r, drop.NumReasons-1))]++
}
