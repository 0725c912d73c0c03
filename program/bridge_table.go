package program

import (
	"bytes"
	"slices"
	"sync/atomic"
	"time"
)

// BridgeEntry is one station of a Bridge's forwarding table.
type BridgeEntry struct {
	MAC  [6]byte
	Port int
	Age  time.Duration // since the station last sent, to within a second
}

// commit learns the collected stations on port and empties the
// collection. Other workers may have learned some of them meanwhile, so
// each is checked again under the lock.
func (br *Bridge) commit(l *pending[[6]byte], port int, now int64) {
	defer func() { l.n = 0 }()
	br.mu.Lock()
	defer br.mu.Unlock()
	cur := br.fdb.Load()
	news, moves := 0, 0
	for _, mac := range l.keys[:l.n] {
		switch e := cur.entries[mac]; {
		case e == nil:
			news++
		case e.port != port:
			moves++
		}
	}
	if news+moves == 0 {
		return
	}
	full := len(cur.entries) >= br.maxEntries || cur.perPort[port] >= int(br.maxPerPort.Load())
	if moves == 0 && full && !br.anyExpired(cur.entries, now) {
		// Full, and copying would free nothing: refuse without a copy
		// and let workers skip new stations for a while.
		br.stats.full.Add(uint64(news))
		br.fullUntil.Store(now + br.refresh)
		return
	}
	// Copying is when purging aged-out entries costs nothing extra.
	next := br.live(cur.entries, now, len(cur.entries)+news)
	refused := 0
	for _, mac := range l.keys[:l.n] {
		e := next.entries[mac]
		if e != nil && e.port == port {
			continue
		}
		if e != nil && now-e.since < br.moveHold {
			br.stats.refused.Add(1) // moved by another worker meanwhile
			continue
		}
		if e == nil && (len(next.entries) >= br.maxEntries || next.perPort[port] >= int(br.maxPerPort.Load())) {
			refused++
			continue
		}
		if e != nil {
			next.perPort[e.port]--
			br.stats.moved.Add(1)
		} else {
			br.stats.learned.Add(1)
		}
		e = &fdbEntry{port: port, since: now}
		e.seen.Store(now)
		next.entries[mac] = e
		next.perPort[port]++
	}
	br.fdb.Store(next)
	if refused > 0 {
		br.stats.full.Add(uint64(refused))
		br.fullUntil.Store(now + br.refresh)
	}
}

// live returns a new table of cur's entries that have not expired at
// now, and counts the others as aged.
func (br *Bridge) live(cur map[[6]byte]*fdbEntry, now int64, size int) *fdb {
	next := &fdb{entries: make(map[[6]byte]*fdbEntry, size), perPort: map[int]int{}}
	aged := 0
	for mac, e := range cur {
		if br.expired(e, now) {
			aged++
		} else {
			next.entries[mac] = e
			next.perPort[e.port]++
		}
	}
	br.stats.aged.Add(uint64(aged))
	return next
}

func (br *Bridge) anyExpired(entries map[[6]byte]*fdbEntry, now int64) bool {
	for _, e := range entries {
		if br.expired(e, now) {
			return true
		}
	}
	return false
}

// Age removes the entries that have aged out at now (a Batch.Now-style
// monotonic time in nanoseconds). Lookups already ignore them; the engine
// calls Age periodically so that an idle bridge gives their memory back.
func (br *Bridge) Age(now int64) {
	br.tick(now)
	br.mu.Lock()
	defer br.mu.Unlock()
	cur := br.fdb.Load().entries
	if br.anyExpired(cur, now) {
		br.fdb.Store(br.live(cur, now, len(cur)))
		br.fullUntil.Store(0)
	}
}

// Table returns a copy of the live entries, sorted by MAC.
func (br *Bridge) Table() []BridgeEntry {
	now := br.clock.Load()
	var out []BridgeEntry
	for mac, e := range br.fdb.Load().entries {
		if br.expired(e, now) {
			continue
		}
		out = append(out, BridgeEntry{MAC: mac, Port: e.port, Age: time.Duration(max(now-e.seen.Load(), 0))})
	}
	slices.SortFunc(out, func(a, b BridgeEntry) int { return bytes.Compare(a.MAC[:], b.MAC[:]) })
	return out
}

// ForgetPort forgets the stations learned on port, as when the port is
// removed: a port that later takes its index must not receive their
// frames.
func (br *Bridge) ForgetPort(port int) {
	br.mu.Lock()
	defer br.mu.Unlock()
	cur := br.fdb.Load().entries
	next := make(map[[6]byte]*fdbEntry, len(cur))
	for mac, e := range cur {
		if e.port != port {
			next[mac] = e
		}
	}
	br.fdb.Store(newFDB(next))
	br.fullUntil.Store(0)
}

// SetMaxPerPort changes the bound on the stations learned on any one
// port (BridgeConfig.MaxPerPort), as when ports are added or removed.
// A port over a lowered bound keeps its stations until they age out,
// and learns no new ones until then.
func (br *Bridge) SetMaxPerPort(n int) {
	br.mu.Lock()
	defer br.mu.Unlock()
	br.maxPerPort.Store(int64(min(max(n, 1), br.maxEntries)))
	br.fullUntil.Store(0)
}

// bridgeStats are the bridge's learning counters.
type bridgeStats struct {
	learned, moved, refused, full, aged atomic.Uint64
}

// BridgeStats count what a bridge learned and refused to learn.
type BridgeStats struct {
	Stations int    `json:"stations"` // in the table now, aged-out ones not yet purged included
	Learned  uint64 `json:"learned"`  // new stations
	Moved    uint64 `json:"moved"`    // stations that moved to another port
	// MovesRefused counts frames from a station learned on another port
	// within the move hold time: they did not move it.
	MovesRefused uint64 `json:"moves_refused"`
	// Full counts source MACs not learned because the table, or the
	// ingress port's share of it, was full.
	Full uint64 `json:"table_full"`
	Aged uint64 `json:"aged"` // entries removed after the ageing time
}

// Stats returns the learning counters.
func (br *Bridge) Stats() BridgeStats {
	return BridgeStats{
		Stations:     len(br.fdb.Load().entries),
		Learned:      br.stats.learned.Load(),
		Moved:        br.stats.moved.Load(),
		MovesRefused: br.stats.refused.Load(),
		Full:         br.stats.full.Load(),
		Aged:         br.stats.aged.Load(),
	}
}
