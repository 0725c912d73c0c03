package vxlan

import (
	"fmt"
	"net/netip"
	"slices"

	"softnet.dev/internal/netns"
	"softnet.dev/program"
)

// peers are a port's remotes and what is known by a remote's index in
// them: the stations behind each (learned and static), a routed port's
// routes, and the inner MTU they leave. A set never changes once
// published; SetRemotes and SetRoutes publish a new one, and each queue
// takes the set of the moment at the start of a burst (its sync), so
// that every index one burst uses, from a received datagram to a
// station learned or looked up, names a remote of one set.
type peers struct {
	remotes []netip.Addr
	// sources are the remotes sorted, and bySource each one's index in
	// remotes: a datagram's source, a route's next hop or a station's
	// remote is found by a binary search, however many remotes an
	// overlay of hundreds of nodes has.
	sources  []netip.Addr
	bySource []int32
	static   []StaticEntry
	fdb      *fdb
	routes   routing
	mtu      int // Port.MTU's
}

// newPeers is the set of remotes and static stations with no route, an
// empty table and the inner MTU mtu.
func newPeers(cfg Config, remotes []netip.Addr, static []StaticEntry, mtu int) *peers {
	pe := &peers{remotes: slices.Clone(remotes), static: slices.Clone(static), mtu: mtu}
	for i := range remotes {
		pe.bySource = append(pe.bySource, int32(i))
	}
	slices.SortFunc(pe.bySource, func(i, j int32) int { return remotes[i].Compare(remotes[j]) })
	for _, i := range pe.bySource {
		pe.sources = append(pe.sources, remotes[i])
	}
	byIndex := map[[6]byte]int32{}
	for _, e := range static {
		byIndex[e.MAC] = int32(pe.index(e.Remote))
	}
	pe.fdb = newFDB(cfg.MaxEntries, cfg.AgeingTime, byIndex)
	return pe
}

// index returns a's index in the remotes, or -1.
func (pe *peers) index(a netip.Addr) int {
	if i, ok := slices.BinarySearchFunc(pe.sources, a, netip.Addr.Compare); ok {
		return int(pe.bySource[i])
	}
	return -1
}

// route returns the route of dst, longest prefix first, or nil.
func (pe *peers) route(dst netip.Addr) *route {
	if pe.routes.byPrefix == nil {
		return nil
	}
	if i, ok := pe.routes.byPrefix.Lookup(dst); ok {
		return &pe.routes.list[i]
	}
	return nil
}

// routing is a routed port's routes: each with its next hop, and the
// longest-prefix-match table of their indexes (the L3 forwarder's, so
// that a lookup costs the same with two routes or the thousands of a
// large cluster's pod CIDRs).
type routing struct {
	list     []route
	byPrefix *program.PrefixTable
}

// resolve returns routes rs as the set reaches them: each Via's index
// and VTEP MAC (its static entry).
func (pe *peers) resolve(name string, rs []Route) (routing, error) {
	macs := make(map[netip.Addr][6]byte, len(pe.static))
	for _, e := range slices.Backward(pe.static) {
		macs[e.Remote] = e.MAC // the first entry of a remote, as before
	}
	out := routing{list: make([]route, 0, len(rs))}
	index := make(map[netip.Prefix]int, len(rs))
	for _, r := range rs {
		i := pe.index(r.Via)
		mac, ok := macs[r.Via]
		switch {
		case i < 0:
			return routing{}, fmt.Errorf("vxlan %s: route %v via %v: not a remote", name, r.Prefix, r.Via)
		case !ok:
			return routing{}, fmt.Errorf("vxlan %s: route %v via %v: the remote's VTEP MAC is unknown (give it a static entry)", name, r.Prefix, r.Via)
		}
		p := r.Prefix.Masked()
		if _, dup := index[p]; dup {
			return routing{}, fmt.Errorf("vxlan %s: route %v given twice", name, p)
		}
		index[p] = len(out.list)
		out.list = append(out.list, route{prefix: p, remote: int32(i), mac: mac})
	}
	out.byPrefix = program.NewPrefixTable(index)
	return out, nil
}

// SetRemotes changes Remotes and Static, keeping stations learned behind
// remotes that stay; it refuses what Validate or SetRoutes would.
func (p *Port) SetRemotes(remotes []netip.Addr, static []StaticEntry) error {
	// As `bridge fdb append` and `del` change a kernel vxlan device's
	// remotes. The inner MTU is measured again; each queue takes the new
	// set at its next burst.
	p.setMu.Lock()
	defer p.setMu.Unlock()
	cfg := p.cfg
	cfg.Remotes, cfg.Static = remotes, static
	if err := cfg.Validate(); err != nil {
		return err
	}
	if p.closed.Load() {
		return p.downError("set remotes")
	}
	var mtu int
	if err := netns.Do(cfg.NetNS, func() error { mtu = innerMTU(cfg, remotes); return nil }); err != nil {
		return fmt.Errorf("vxlan %s: %w", cfg.Name, err)
	}
	cur := p.peers.Load()
	next := newPeers(cfg, remotes, static, mtu)
	var err error
	if next.routes, err = next.resolve(cfg.Name, p.vias); err != nil {
		return err
	}
	// The stations learned so far move to their remote's new index.
	// Learning into the old table after the copy is lost: the queues'
	// bursts in progress, until they take the new set.
	cur.fdb.mu.Lock()
	defer cur.fdb.mu.Unlock()
	now := clock()
	learned := map[[6]byte]*fdbEntry{}
	for mac, e := range *cur.fdb.table.Load() {
		i := next.index(cur.remotes[e.remote])
		if _, static := next.fdb.static[mac]; i < 0 || static || now-e.seen.Load() > cur.fdb.ageing {
			continue
		}
		ne := &fdbEntry{remote: int32(i)}
		ne.seen.Store(e.seen.Load())
		learned[mac] = ne
	}
	next.fdb.table.Store(&learned)
	next.fdb.learned.Store(cur.fdb.learned.Load())
	next.fdb.moved.Store(cur.fdb.moved.Load())
	next.fdb.full.Store(cur.fdb.full.Load())
	next.fdb.aged.Store(cur.fdb.aged.Load())
	p.peers.Store(next)
	return nil
}
