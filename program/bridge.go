package program

import (
	"sync"
	"sync/atomic"
	"time"

	"softnet.dev/drop"
	"softnet.dev/packet"
)

// Defaults for the zero fields of a BridgeConfig, as the Linux bridge's.
const (
	DefaultAgeingTime = 300 * time.Second
	DefaultMaxEntries = 16384
)

// BridgeConfig configures a Bridge. Zero (or negative) fields take the
// defaults.
type BridgeConfig struct {
	// AgeingTime is how long a station stays known after its last frame.
	AgeingTime time.Duration
	// MaxEntries bounds the forwarding table. When it is full, new
	// stations are not learned and frames to them are flooded, so a guest
	// that sends from random MACs costs bandwidth but no memory.
	MaxEntries int
	// MaxPerPort bounds the stations learned on any one port (default a
	// quarter of MaxEntries), so that a port flooding random source MACs
	// fills its share, not the table: the other ports keep learning, and
	// the entries learned on them are never displaced.
	MaxPerPort int
	// MoveHold is how long a station stays on its port before a frame
	// from another port may move it (default DefaultMoveHold): a guest
	// sending from a neighbour's MAC diverts at most what follows one
	// move per hold time, not the neighbour's traffic for good, while a
	// station that really moved is found on its new port within it.
	MoveHold time.Duration
}

// Bridge is an L2 learning bridge: it learns each frame's source MAC on
// its ingress port and sends unicast frames to the port their destination
// was learned on, flooding broadcast, multicast and unknown destinations.
// ARP (broadcast request, unicast reply) and IPv6 neighbour discovery
// (solicitation to a solicited-node multicast group, unicast
// advertisement) need nothing more.
//
// Verdicts:
//   - a frame with a multicast or all-zero source MAC is dropped with
//     drop.InvalidProto: no station has that address, and learning it
//     would misdirect frames (the kernel bridge drops them too);
//   - a frame to a station learned on its own ingress port is dropped
//     with drop.NoRoute: the destination already received it on that
//     segment, and sending it back would duplicate it;
//   - frames the parser rejects keep the parser's drop, as everywhere in
//     the datapath (so EtherTypes other than IPv4, IPv6 and ARP do not
//     cross the bridge).
//
// Only L2 batches are bridged: packets of an L3 batch carry no MAC
// addresses and are left to the next program.
//
// The table has one entry per MAC, whatever the VLAN. Entries older than
// AgeingTime, by Batch.Now, are ignored by lookups and removed when the
// table is next copied (learning a station, or Age).
type Bridge struct {
	ageing     int64 // ns
	refresh    int64 // ns: how stale an entry's last-seen time may get
	maxEntries int
	maxPerPort atomic.Int64 // SetMaxPerPort
	moveHold   int64        // ns

	mu sync.Mutex // serializes writers
	// fdb is the forwarding table, read by workers without locks.
	fdb atomic.Pointer[fdb]
	// clock is the latest Batch.Now seen, kept within refresh, so that
	// Table can report ages without being given the time.
	clock atomic.Int64
	// fullUntil is when to try learning again after the table, or a
	// port's share of it, was found full with nothing to age out: until
	// then new stations are not even looked at, so a flood of random
	// source MACs does not take the writer lock once per frame.
	fullUntil atomic.Int64
	stats     bridgeStats
}

// fdb is an immutable snapshot of the forwarding table. The entries are
// shared between snapshots; only their last-seen times change.
type fdb struct {
	entries map[[6]byte]*fdbEntry
	perPort map[int]int // entries by port
}

func newFDB(entries map[[6]byte]*fdbEntry) *fdb {
	t := &fdb{entries: entries, perPort: map[int]int{}}
	for _, e := range entries {
		t.perPort[e.port]++
	}
	return t
}

type fdbEntry struct {
	port  int   // fixed: a station that moves gets a new entry
	since int64 // when the station was learned on port
	// seen is when the station last sent, refreshed at most once per
	// refresh interval: writing it for every frame would bounce its cache
	// line between workers.
	seen atomic.Int64
}

// NewBridge returns an empty bridge.
func NewBridge(cfg BridgeConfig) *Bridge {
	if cfg.AgeingTime <= 0 {
		cfg.AgeingTime = DefaultAgeingTime
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.MaxPerPort <= 0 {
		cfg.MaxPerPort = max(cfg.MaxEntries/4, 1)
	}
	if cfg.MoveHold <= 0 {
		cfg.MoveHold = DefaultMoveHold
	}
	br := &Bridge{
		ageing:     int64(cfg.AgeingTime),
		refresh:    min(int64(time.Second), max(int64(cfg.AgeingTime)/4, 1)),
		maxEntries: cfg.MaxEntries,
		moveHold:   int64(cfg.MoveHold),
	}
	br.maxPerPort.Store(int64(min(cfg.MaxPerPort, cfg.MaxEntries)))
	br.fdb.Store(newFDB(map[[6]byte]*fdbEntry{}))
	return br
}

// Name implements Program.
func (br *Bridge) Name() string { return "bridge" }

// Run implements Program.
func (br *Bridge) Run(b *Batch) {
	if b.Layer != packet.L2 {
		return
	}
	now := b.Now
	br.tick(now)
	t := br.fdb.Load()
	var learned pending[[6]byte]
	var refused, held uint64
	var src, dst stationMemo
	for i := range b.Len() {
		h, ok := b.Undecided(i)
		if !ok {
			continue
		}
		if h.Src[0]&1 != 0 || h.Src == ([6]byte{}) {
			b.Verdicts[i] = DropVerdict(drop.InvalidProto)
			continue
		}
		if br.mustLearn(t, src.lookup(t, h.Src), b.Ingress, now, &refused, &held) && learned.add(h.Src) {
			br.commit(&learned, b.Ingress, now)
			t = br.fdb.Load()
		}

		if h.Dst[0]&1 != 0 { // broadcast or multicast
			b.Verdicts[i] = FloodVerdict
			continue
		}
		e := dst.lookup(t, h.Dst)
		switch {
		case e == nil || br.expired(e, now):
			b.Verdicts[i] = FloodVerdict
		case e.port == b.Ingress:
			b.Verdicts[i] = DropVerdict(drop.NoRoute)
		default:
			b.Verdicts[i] = RedirectVerdict(e.port)
		}
	}
	if learned.n > 0 {
		br.commit(&learned, b.Ingress, now)
	}
	if refused > 0 {
		br.stats.full.Add(refused)
	}
	if held > 0 {
		br.stats.refused.Add(held)
	}
}

// stationMemo remembers a batch's last lookup of a station in a table:
// a burst's packets mostly come from and go to the same stations, and a
// map lookup with a 6-byte key costs more than comparing the key. A
// table's entries never change once published (commit copies), so a
// lookup in the same table gives the same entry.
type stationMemo struct {
	t   *fdb
	mac [6]byte
	e   *fdbEntry
}

func (m *stationMemo) lookup(t *fdb, mac [6]byte) *fdbEntry {
	if m.t != t || m.mac != mac {
		m.t, m.mac, m.e = t, mac, t.entries[mac]
	}
	return m.e
}

func (br *Bridge) expired(e *fdbEntry, now int64) bool {
	return now-e.seen.Load() > br.ageing
}

// mustLearn refreshes a known station in place and reports whether a
// source, whose entry in t is e (nil if none), needs the writer: a new
// station, or one that moved to port. It counts in refused the new
// stations it skips because the table or the port's share is full, and
// in held the moves within the move hold.
func (br *Bridge) mustLearn(t *fdb, e *fdbEntry, port int, now int64, refused, held *uint64) bool {
	if e != nil && e.port == port {
		// Also revives an expired entry that was not purged yet. Workers'
		// clocks may disagree a little: an older now does not go back.
		if now-e.seen.Load() >= br.refresh {
			e.seen.Store(now)
		}
		return false
	}
	if e != nil && !br.expired(e, now) && now-e.since < br.moveHold {
		*held++
		return false
	}
	if e == nil && (len(t.entries) >= br.maxEntries || t.perPort[port] >= int(br.maxPerPort.Load())) && now < br.fullUntil.Load() {
		*refused++
		return false
	}
	return true
}

// tick advances the bridge's clock at most once per refresh interval, so
// that batches do not all write the same word.
func (br *Bridge) tick(now int64) {
	if c := br.clock.Load(); now-c >= br.refresh {
		br.clock.CompareAndSwap(c, now)
	}
}
