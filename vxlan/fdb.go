package vxlan

import (
	"sync"
	"sync/atomic"
	"time"
)

// fdb maps inner MAC addresses to the remote they were last seen behind,
// as the kernel's vxlan learns (flood and learn): the transmit queues
// send a known unicast destination to its remote only and flood the
// rest to every remote. Readers (every queue, on every worker) load an
// immutable map without locks; learning copies it under a lock, once per
// burst that met new or moved stations, never per frame. The table is
// bounded: when it is full, new stations are counted and not learned,
// and frames to them are flooded.
type fdb struct {
	ageing  int64 // ns
	refresh int64 // ns: how stale an entry's last-seen time may get
	max     int

	// static are the configured stations, by remote index: looked up
	// first, never learned over.
	static map[[6]byte]int32

	mu    sync.Mutex // serializes writers
	table atomic.Pointer[map[[6]byte]*fdbEntry]
	// fullUntil is when to try learning again after the table was found
	// full with nothing to age out, so that a remote sending from random
	// source MACs does not take the lock for every burst.
	fullUntil atomic.Int64

	learned, moved, full, aged atomic.Uint64
}

type fdbEntry struct {
	remote int32 // index in the port's remotes; fixed: a move makes a new entry
	// seen is when the station last sent, refreshed at most once per
	// refresh interval so that workers do not bounce its cache line.
	seen atomic.Int64
}

func newFDB(maxEntries int, ageing time.Duration, static map[[6]byte]int32) *fdb {
	f := &fdb{ageing: int64(ageing), refresh: min(int64(time.Second), max(int64(ageing)/4, 1)), max: maxEntries, static: static}
	f.table.Store(&map[[6]byte]*fdbEntry{})
	return f
}

// lookup returns the remote mac was learned behind, if it was and has
// not aged out.
func (f *fdb) lookup(mac [6]byte, now int64) (int, bool) {
	if r, ok := f.static[mac]; ok {
		return int(r), true
	}
	e := (*f.table.Load())[mac]
	if e == nil || now-e.seen.Load() > f.ageing {
		return 0, false
	}
	return int(e.remote), true
}

// station is a source MAC seen behind a remote, waiting to be learned.
type station struct {
	mac    [6]byte
	remote int32
}

// maxPending bounds the stations one burst learns; the rest are learned
// by later bursts, as their frames keep coming.
const maxPending = 32

// pending collects a queue's stations to learn during one burst.
type pending struct {
	n   int
	buf [maxPending]station
}

// see refreshes a known station in place, or notes it in p for commit
// if it is new or moved.
func (f *fdb) see(p *pending, mac [6]byte, remote int, now int64) {
	if mac[0]&1 != 0 || mac == ([6]byte{}) {
		return // no station has a group or zero address
	}
	if _, ok := f.static[mac]; ok {
		return
	}
	if e := (*f.table.Load())[mac]; e != nil && int(e.remote) == remote {
		if now-e.seen.Load() >= f.refresh {
			e.seen.Store(now)
		}
		return
	}
	if p.n == maxPending || now < f.fullUntil.Load() {
		return
	}
	for _, s := range p.buf[:p.n] {
		if s.mac == mac && int(s.remote) == remote {
			return
		}
	}
	p.buf[p.n] = station{mac: mac, remote: int32(remote)}
	p.n++
}

// commit learns the stations of p in one copy of the table, dropping
// entries that aged out on the way.
func (f *fdb) commit(p *pending, now int64) {
	if p.n == 0 {
		return
	}
	defer func() { p.n = 0 }()
	f.mu.Lock()
	defer f.mu.Unlock()
	next := f.live(*f.table.Load(), now, len(*f.table.Load())+p.n)
	for _, s := range p.buf[:p.n] {
		old := next[s.mac]
		switch {
		case old != nil && old.remote == s.remote:
			continue
		case old != nil:
			f.moved.Add(1)
		case len(next) >= f.max:
			f.full.Add(1)
			f.fullUntil.Store(now + f.refresh)
			continue
		default:
			f.learned.Add(1)
		}
		e := &fdbEntry{remote: s.remote}
		e.seen.Store(now)
		next[s.mac] = e
	}
	f.table.Store(&next)
}

// live returns a copy of cur without the entries that aged out, with
// room for size.
func (f *fdb) live(cur map[[6]byte]*fdbEntry, now int64, size int) map[[6]byte]*fdbEntry {
	next := make(map[[6]byte]*fdbEntry, size)
	for mac, e := range cur {
		if now-e.seen.Load() > f.ageing {
			f.aged.Add(1)
			continue
		}
		next[mac] = e
	}
	return next
}

// age removes the entries that aged out, if there are any: lookups
// ignore them already; this gives back their room in the table.
func (f *fdb) age(now int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := *f.table.Load()
	for _, e := range cur {
		if now-e.seen.Load() > f.ageing {
			next := f.live(cur, now, len(cur))
			f.table.Store(&next)
			return
		}
	}
}

// FDBEntry is a station: an inner MAC and the remote it was last seen
// behind, or that the configuration put it behind.
type FDBEntry struct {
	MAC    [6]byte `json:"mac"`
	Remote string  `json:"remote"`
	Static bool    `json:"static,omitempty"`
	// Age is the time since the station was last seen, to within the
	// table's refresh (a second at most); 0 for a static one.
	Age time.Duration `json:"age,omitempty"`
}

// clock is the time the port's tables run on: monotonic nanoseconds
// since the package was loaded.
var epoch = time.Now()

func clock() int64 { return int64(time.Since(epoch)) }
