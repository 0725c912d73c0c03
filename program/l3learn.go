package program

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"
)

// hostTable is an immutable snapshot of the learned hosts. IPv4 hosts are
// keyed by the address as a uint32: hashing 4 bytes costs about half of
// hashing a netip.Addr, and this lookup is on every packet's path twice
// (source and destination). The entries are shared between snapshots;
// only their last-seen times (and flap flags) change.
type hostTable struct {
	v4 map[uint32]*hostEntry
	v6 map[netip.Addr]*hostEntry // includes IPv4-mapped IPv6 addresses, kept apart from IPv4
}

type hostEntry struct {
	port  int   // fixed: a host that moves gets a new entry
	since int64 // when the host was learned on port (Batch.Now)
	// seen is when the host last sent, refreshed at most once per
	// refresh interval: writing it for every packet would bounce its
	// cache line between workers.
	seen atomic.Int64
	// flapLogged is set once the host's refused move has been logged; a
	// move carries it to the new entry, so that an address flapping
	// between two ports is logged once, not once per move.
	flapLogged atomic.Bool
}

func newHostTable(size int) *hostTable {
	return &hostTable{v4: make(map[uint32]*hostEntry, size), v6: make(map[netip.Addr]*hostEntry)}
}

func ipv4Bits(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func (t *hostTable) lookup(a netip.Addr) *hostEntry {
	if a.Is4() {
		return t.v4[ipv4Bits(a)]
	}
	return t.v6[a]
}

func (t *hostTable) len() int { return len(t.v4) + len(t.v6) }

// set must only be called on a table no worker sees yet.
func (t *hostTable) set(a netip.Addr, e *hostEntry) {
	if a.Is4() {
		t.v4[ipv4Bits(a)] = e
	} else {
		t.v6[a] = e
	}
}

// live returns a copy of t without the entries that expired at now, and
// how many those were.
func (f *L3Forwarder) live(t *hostTable, now int64, extra int) (*hostTable, int) {
	c := &hostTable{v4: make(map[uint32]*hostEntry, len(t.v4)+extra), v6: make(map[netip.Addr]*hostEntry, len(t.v6))}
	aged := 0
	for k, e := range t.v4 {
		if f.expired(e, now) {
			aged++
		} else {
			c.v4[k] = e
		}
	}
	for k, e := range t.v6 {
		if f.expired(e, now) {
			aged++
		} else {
			c.v6[k] = e
		}
	}
	return c, aged
}

func (f *L3Forwarder) expired(e *hostEntry, now int64) bool {
	return now-e.seen.Load() > f.ageing
}

func (f *L3Forwarder) anyExpired(t *hostTable, now int64) bool {
	for _, e := range t.v4 {
		if f.expired(e, now) {
			return true
		}
	}
	for _, e := range t.v6 {
		if f.expired(e, now) {
			return true
		}
	}
	return false
}

// learnCounts are one batch's learning events, added to the forwarder's
// counters once per batch.
type learnCounts struct {
	full, refused, notAllowed uint64
	// flap is an address whose refused move is to be logged, with the
	// port it stays on; at most one per batch, the rest wait for later
	// batches.
	flap     netip.Addr
	flapPort int
}

// shouldLearn reports whether src, seen on port, must go to the writer:
// a new host or one that moves. It refreshes a known host in place and
// counts what it refuses.
func (f *L3Forwarder) shouldLearn(hosts *hostTable, routes *routeTable, src netip.Addr, port int, now int64, c *learnCounts) bool {
	if src.IsUnspecified() || src.IsMulticast() || src == limitedBroadcast {
		return false // not a host: nothing can be sent to it
	}
	if src.IsLinkLocalUnicast() {
		return false // not routable: only the guest's own link reaches it
	}
	e := hosts.lookup(src)
	if e != nil && e.port == port {
		// Also revives an expired entry that was not purged yet. Workers'
		// clocks may disagree a little: an older now does not go back.
		if now-e.seen.Load() >= f.refresh {
			e.seen.Store(now)
		}
		return false
	}
	if _, routed := routes.lookup(src); routed {
		// Static routes win: a routed address is where its route says,
		// whoever sends from it.
		return false
	}
	if f.policy != nil && !f.policy.Allowed(port, src) {
		c.notAllowed++
		return false
	}
	if e != nil && !f.expired(e, now) {
		if !f.mayMove(e, src, port, now) {
			c.refused++
			if c.flap == (netip.Addr{}) && e.flapLogged.CompareAndSwap(false, true) {
				c.flap, c.flapPort = src, e.port
			}
			return false
		}
		return true
	}
	if e == nil && hosts.len() >= f.maxLearned && now < f.fullUntil.Load() {
		c.full++
		return false
	}
	return true
}

// mayMove reports whether the host of live entry e may move to port: not
// within MoveHold of its last move, and not from a port whose policy
// names it to one that allows it only by allow=any.
func (f *L3Forwarder) mayMove(e *hostEntry, src netip.Addr, port int, now int64) bool {
	if now-e.since < f.moveHold {
		return false
	}
	return f.policy == nil || !f.policy.explicitlyAllowed(e.port, src) || f.policy.explicitlyAllowed(port, src)
}

// commit learns the collected addresses on port in a new snapshot and
// empties the collection. Another worker may have learned or moved some
// of them meanwhile, so each is checked again under the lock, and the
// table is copied only if something changes.
func (f *L3Forwarder) commit(l *pending[netip.Addr], port int, now int64, c *learnCounts) {
	defer func() { l.n = 0 }()
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.hosts.Load()
	routes := f.routes.Load()
	var next *hostTable
	// The first change copies the table, which is when purging aged-out
	// entries costs nothing extra.
	copyOnce := func() {
		if next == nil {
			var aged int
			next, aged = f.live(cur, now, l.n)
			f.stats.aged.Add(uint64(aged))
		}
	}
	for _, a := range l.keys[:l.n] {
		if _, routed := routes.lookup(a); routed {
			continue // a route was added meanwhile
		}
		t := cur
		if next != nil {
			t = next
		}
		old := t.lookup(a)
		live := old != nil && !f.expired(old, now)
		switch {
		case live && old.port == port:
			continue
		case live && !f.mayMove(old, a, port, now):
			c.refused++
			continue
		case old == nil && t.len() >= f.maxLearned:
			if next == nil && !f.anyExpired(cur, now) {
				// Full, and copying would free nothing.
				c.full++
				f.fullUntil.Store(now + f.refresh)
				continue
			}
			copyOnce()
			if next.len() >= f.maxLearned {
				c.full++
				f.fullUntil.Store(now + f.refresh)
				continue
			}
		}
		copyOnce()
		e := &hostEntry{port: port, since: now}
		e.seen.Store(now)
		if live {
			e.flapLogged.Store(old.flapLogged.Load())
			f.stats.moved.Add(1)
		} else {
			f.stats.learned.Add(1)
		}
		next.set(a, e)
	}
	if next != nil {
		f.hosts.Store(next)
	}
}

// flush adds a batch's counts to the forwarder's and logs a flapping
// address.
func (f *L3Forwarder) flush(c *learnCounts) {
	if c.full != 0 {
		f.stats.full.Add(c.full)
	}
	if c.refused != 0 {
		f.stats.refused.Add(c.refused)
	}
	if c.notAllowed != 0 {
		f.stats.notAllowed.Add(c.notAllowed)
	}
	if c.flap.IsValid() {
		f.log.Warn("learned host flaps between ports: moves within the hold time are refused (logged once per address)",
			"addr", c.flap, "port", c.flapPort, "hold", f.moveHold)
	}
}

// learnStats are the forwarder's learning counters.
type learnStats struct {
	learned, moved, refused, full, notAllowed, aged atomic.Uint64
}

// LearnStats count what the forwarder learned and refused to learn.
type LearnStats struct {
	Hosts   int    `json:"hosts"`   // in the table now, aged-out ones not yet purged included
	Learned uint64 `json:"learned"` // new hosts
	Moved   uint64 `json:"moved"`   // hosts that moved to another port
	// MovesRefused counts packets whose source is learned on another
	// port and did not move it: within the move hold time, or from a
	// port whose policy names the address to one that allows any.
	MovesRefused uint64 `json:"moves_refused"`
	// Full counts packets whose source was not learned because the table
	// was full.
	Full uint64 `json:"table_full"`
	// NotAllowed counts packets whose source was not learned because the
	// port security policy does not allow it on the ingress port.
	NotAllowed uint64 `json:"not_allowed"`
	Aged       uint64 `json:"aged"` // entries removed after the ageing time
}

// LearnStats returns the learning counters.
func (f *L3Forwarder) LearnStats() LearnStats {
	return LearnStats{
		Hosts:        f.hosts.Load().len(),
		Learned:      f.stats.learned.Load(),
		Moved:        f.stats.moved.Load(),
		MovesRefused: f.stats.refused.Load(),
		Full:         f.stats.full.Load(),
		NotAllowed:   f.stats.notAllowed.Load(),
		Aged:         f.stats.aged.Load(),
	}
}

// Learned returns a copy of the learned hosts that have not aged out and
// their ports.
func (f *L3Forwarder) Learned() map[netip.Addr]int {
	t := f.hosts.Load()
	now := f.clock.Load()
	out := make(map[netip.Addr]int, t.len())
	for k, e := range t.v4 {
		if !f.expired(e, now) {
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], k)
			out[netip.AddrFrom4(b)] = e.port
		}
	}
	for k, e := range t.v6 {
		if !f.expired(e, now) {
			out[k] = e.port
		}
	}
	return out
}

// Age removes the hosts that have aged out at now (a Batch.Now-style
// monotonic time in nanoseconds). Lookups already ignore them; calling
// Age periodically gives their memory back and makes room for new hosts
// without waiting for the next learning attempt to find the table full.
func (f *L3Forwarder) Age(now int64) {
	f.tick(now)
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur := f.hosts.Load(); f.anyExpired(cur, now) {
		next, aged := f.live(cur, now, 0)
		f.hosts.Store(next)
		f.stats.aged.Add(uint64(aged))
		f.fullUntil.Store(0)
	}
}

// tick advances the forwarder's clock at most once per refresh
// interval, so that batches do not all write the same word.
func (f *L3Forwarder) tick(now int64) {
	if c := f.clock.Load(); now-c >= f.refresh {
		f.clock.CompareAndSwap(c, now)
	}
}

// ForgetPort forgets the hosts learned on port, as when the port is
// removed: a port that later takes its index must not receive their
// traffic.
func (f *L3Forwarder) ForgetPort(port int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.hosts.Load()
	next := newHostTable(cur.len())
	for k, e := range cur.v4 {
		if e.port != port {
			next.v4[k] = e
		}
	}
	for k, e := range cur.v6 {
		if e.port != port {
			next.v6[k] = e
		}
	}
	f.hosts.Store(next)
	f.fullUntil.Store(0)
}
