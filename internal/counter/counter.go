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

// Block is one queue's counters: own counters of its package's choosing
// (indices 0 to own-1), then the queue's receive drops and its transmit
// drops by reason. Its worker counts into N and publishes after each
// burst; stats, metrics and the API read the published values.
type Block struct {
	N   []uint64
	own int
	pub Published
}

// NewBlock returns a block of own counters and the drops, N on cache
// lines of its own.
func NewBlock(own int) Block {
	n := Len(own)
	return Block{N: cacheline.Make[uint64](n, n), own: own, pub: NewPublished(n)}
}

// Len is the length of a block of own counters, and of a sum of such
// blocks.
func Len(own int) int { return own + 2*int(drop.NumReasons) }

// Publish makes N visible to AddTo. Owner only.
func (b *Block) Publish() { b.pub.Publish(b.N) }

// AddTo adds the published counters into dst. Safe from any goroutine.
func (b *Block) AddTo(dst []uint64) { b.pub.AddTo(dst) }

// RxDrop and TxDrop count a received or a transmitted packet dropped for
// reason r; reasons past the enumeration count as its last.
func (b *Block) RxDrop(r drop.Reason) { b.drop(b.own, r) }
func (b *Block) TxDrop(r drop.Reason) { b.drop(b.own+int(drop.NumReasons), r) }

func (b *Block) drop(first int, r drop.Reason) {
	b.N[first+int(min(r, drop.NumReasons-1))]++
}

// Drops returns the receive and transmit drops of sum, a sum of blocks
// of own counters.
func Drops(sum []uint64, own int) (rx, tx drop.Counts) {
	n := int(drop.NumReasons)
	copy(rx[:], sum[own:own+n])
	copy(tx[:], sum[own+n:own+2*n])
	return rx, tx
}
