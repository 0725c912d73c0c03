package program

import (
	"bytes"
	"slices"
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
	cur := br.fdb.Load().entries
	news, moves := 0, 0
	for _, mac := range l.keys[:l.n] {
		switch e := cur[mac]; {
		case e == nil:
			news++
		case e.port != port:
			moves++
		}
	}
	if news+moves == 0 {
		return
	}
	if moves == 0 && len(cur) >= br.maxEntries && !br.anyExpired(cur, now) {
		// Full, and copying would free nothing: refuse without a copy
		// and let workers skip new stations for a while.
		br.fullUntil.Store(now + br.refresh)
		return
	}
	// Copying is when purging aged-out entries costs nothing extra.
	next := br.live(cur, now, len(cur)+news)
	refused := false
	for _, mac := range l.keys[:l.n] {
		e := next[mac]
		if e != nil && e.port == port {
			continue
		}
		if e == nil && len(next) >= br.maxEntries {
			refused = true
			continue
		}
		e = &fdbEntry{port: port}
		e.seen.Store(now)
		next[mac] = e
	}
	br.fdb.Store(&fdb{entries: next})
	if refused {
		br.fullUntil.Store(now + br.refresh)
	}
}

// live returns a new map of cur's entries that have not expired at now.
func (br *Bridge) live(cur map[[6]byte]*fdbEntry, now int64, size int) map[[6]byte]*fdbEntry {
	next := make(map[[6]byte]*fdbEntry, size)
	for mac, e := range cur {
		if !br.expired(e, now) {
			next[mac] = e
		}
	}
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
		br.fdb.Store(&fdb{entries: br.live(cur, now, len(cur))})
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

// Flush forgets every station.
func (br *Bridge) Flush() {
	br.mu.Lock()
	defer br.mu.Unlock()
	br.fdb.Store(&fdb{entries: map[[6]byte]*fdbEntry{}})
	br.fullUntil.Store(0)
}
