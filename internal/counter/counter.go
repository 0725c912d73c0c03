// Package counter publishes counters that one goroutine owns and others
// read. The owner increments plain uint64s — no atomics on the hot path —
// and publishes them once in a while (a worker: once per poll round);
// readers load the published copies. Publishing stores only the values
// that changed, so a round that touched three counters costs three stores.
package counter

import "sync/atomic"

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
