package buffer

import (
	"sync/atomic"

	"softnet.dev/drop"
	"softnet.dev/internal/counter"
)

// Counter indices; the order is that of CacheStats.
const (
	ctrBulkExtra   = iota // buffers of bulk gets beyond the first: allocs = hits + misses + this
	ctrConsumed           // Consume calls
	ctrHits               // gets served without a depot trip
	ctrMisses             // gets that needed a refill
	ctrRefills            // depot -> cache transfers
	ctrFlushes            // cache -> depot transfers of the coldest half
	ctrExhausted          // gets that failed with ErrExhausted
	ctrRemoteFrees        // buffers pushed to another cache's inbound list
	ctrRemoteKept         // buffers kept because the owner's list was full
	ctrKicks              // owners kicked at half of DeferMax
	ctrDrains             // non-empty inbound lists detached
	ctrDrained            // buffers taken from the inbound list
	ctrDoubleFree         // frees of a buffer that was not in use
	ctrForeign            // frees of a buffer of another pool (or nil)
	numCounters
)

// counters are the owner's plain, non-atomic counters.
type counters struct {
	n     [numCounters]uint64
	drops drop.Counts
}

// published is what the owner last made visible to readers: the counters
// followed by the drop reasons, and the number of free buffers the cache
// holds per class.
type published struct {
	counters counter.Published
	cached   [maxClasses]atomic.Int64
}

func newPublished() published {
	return published{counters: counter.NewPublished(numCounters + int(drop.NumReasons))}
}

// CacheStats are the counters of one cache, or their sum over caches.
type CacheStats struct {
	Allocs      uint64      `json:"allocs"`
	Consumed    uint64      `json:"consumed"`
	Hits        uint64      `json:"hits"`
	Misses      uint64      `json:"misses"`
	Refills     uint64      `json:"refills"`
	Flushes     uint64      `json:"flushes"`
	Exhausted   uint64      `json:"exhausted"`
	RemoteFrees uint64      `json:"remote_frees"`
	RemoteKept  uint64      `json:"remote_kept"`
	Kicks       uint64      `json:"kicks"`
	Drains      uint64      `json:"drains"`
	Drained     uint64      `json:"drained"`
	DoubleFrees uint64      `json:"double_frees"`
	Foreign     uint64      `json:"foreign_frees"`
	Drops       drop.Counts `json:"drops"`
	bulkExtra   uint64
}

// HitRate returns the share of gets served from the cache alone.
func (s *CacheStats) HitRate() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

func (s *CacheStats) add(n *[numCounters]uint64, drops *drop.Counts) {
	f := [numCounters]*uint64{
		&s.bulkExtra, &s.Consumed, &s.Hits, &s.Misses, &s.Refills, &s.Flushes, &s.Exhausted,
		&s.RemoteFrees, &s.RemoteKept, &s.Kicks, &s.Drains, &s.Drained, &s.DoubleFrees, &s.Foreign,
	}
	for i, p := range f {
		*p += n[i]
	}
	s.Drops.Add(drops)
	s.Allocs = s.Hits + s.Misses + s.bulkExtra
}

// Stats returns the cache's own counters, current to the last operation.
// Owner only.
func (c *Cache) Stats() CacheStats {
	var s CacheStats
	s.add(&c.ctr.n, &c.ctr.drops)
	return s
}

// Exhausted returns the number of gets and bulk gets that found the pool
// empty: CacheStats.Exhausted for a poll loop, the engine's or a
// program's that polls port queues itself. Owner only; it costs one load
// where Stats copies every counter, so that the loop can compare it
// around each round to tell a round that found no packets from one that
// could not take any, and wait for buffers to come home instead of
// spinning on queues that stay readable.
func (c *Cache) Exhausted() uint64 { return c.ctr.n[ctrExhausted] }

// Publish makes the owner's counters visible to Pool.Stats. Counters are
// plain fields so that the hot path has no atomics; the engine publishes
// once per poll round, which costs a few loads and stores only for the
// counters that changed.
func (c *Cache) Publish() {
	var vals [numCounters + int(drop.NumReasons)]uint64
	copy(vals[:], c.ctr.n[:])
	copy(vals[numCounters:], c.ctr.drops[:])
	c.pub.counters.Publish(vals[:])
	for i := range c.stacks {
		c.pub.cached[i].Store(int64(c.stacks[i].n + c.stacks[i].chainLen))
	}
}

// ClassStats describe where the buffers of one class are.
type ClassStats struct {
	Room     int `json:"room"`
	Count    int `json:"count"`
	InDepot  int `json:"in_depot"`
	InCaches int `json:"in_caches"` // as of each cache's last Publish
}

// Stats is a snapshot of a pool: where its buffers are and the sum of its
// caches' published counters.
type Stats struct {
	Capacity int          `json:"capacity"`
	InUse    int          `json:"in_use"` // neither free nor waiting on an inbound list
	Pending  int          `json:"pending_remote"`
	Classes  []ClassStats `json:"classes"`
	Caches   int          `json:"caches"`
	CacheStats
}

// Stats sums the published counters of every cache. Safe to call at any
// time; exact once every owner has published after its last operation.
func (p *Pool) Stats() Stats {
	s := Stats{Capacity: len(p.meta), Classes: make([]ClassStats, len(p.classes))}
	free := 0
	for i := range p.classes {
		ci := &p.classes[i]
		cs := &s.Classes[i]
		cs.Room, cs.Count, cs.InDepot = p.Room(Class(i)), ci.n, ci.depot.len()
		free += cs.InDepot
	}
	n := int(p.ncaches.Load())
	s.Caches = n
	for i := 0; i < n; i++ {
		c := p.caches[i].Load()
		var vals [numCounters + int(drop.NumReasons)]uint64
		c.pub.counters.AddTo(vals[:])
		var drops drop.Counts
		copy(drops[:], vals[numCounters:])
		s.CacheStats.add((*[numCounters]uint64)(vals[:numCounters]), &drops)
		for j := range s.Classes {
			k := int(c.pub.cached[j].Load())
			s.Classes[j].InCaches += k
			free += k
		}
		for j := range c.inbound {
			s.Pending += c.inbound[j].pending()
		}
	}
	s.InUse = max(0, s.Capacity-free-s.Pending)
	return s
}
