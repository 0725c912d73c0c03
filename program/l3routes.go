package program

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
)

// Route sends packets whose destination falls in Prefix out of Port.
type Route struct {
	Prefix netip.Prefix
	Port   int
}

// maxPort is the largest port a Verdict can carry.
const maxPort = 0xffff

// validate checks r and returns it with Prefix normalized: host bits set
// in a prefix ("10.1.2.3/8") are cleared rather than rejected, as ip route
// does, so that one prefix has one key.
func (r Route) validate() (Route, error) {
	if !r.Prefix.IsValid() {
		return r, fmt.Errorf("program: route %v: invalid prefix", r.Prefix)
	}
	if r.Port < 0 || r.Port > maxPort {
		return r, fmt.Errorf("program: route %v: port %d outside [0, %d]", r.Prefix, r.Port, maxPort)
	}
	r.Prefix = r.Prefix.Masked()
	return r, nil
}

// PrefixTable is the forwarder's longest-prefix-match table for other
// users of routes: prefixes to values (a routed vxlan port's routes to
// their next hops). Immutable; a lookup allocates nothing and costs a
// probe per distinct prefix length, whatever the number of routes.
type PrefixTable struct{ t *routeTable }

// NewPrefixTable returns the table of values, whose prefixes are
// masked (netip.Prefix.Masked); it keeps values.
func NewPrefixTable(values map[netip.Prefix]int) *PrefixTable {
	return &PrefixTable{newRouteTable(values)}
}

// Lookup returns the value of the longest prefix containing a.
func (p *PrefixTable) Lookup(a netip.Addr) (int, bool) { return p.t.lookup(a) }

// routeTable is an immutable longest-prefix-match table. A lookup probes
// one map per distinct prefix length present in the address's family,
// longest first, and stops at the first hit: at most 33 probes for IPv4
// and 129 for IPv6, in practice the handful of lengths a configuration
// uses (/32, /24, /16, /0 …), whatever the number of routes. A probe
// costs roughly 10 ns for IPv4 (a uint64 key) and 20 ns for IPv6 (a
// netip.Prefix key) on the reference machine, and allocates nothing. A trie would bound the work
// by address bits instead, but costs a dependent load per bit and more
// code; maps keep updates a plain copy, O(routes), which is fine for the
// thousands of routes and rare changes this is for.
type routeTable struct {
	all          map[netip.Prefix]int // every route, for Routes and updates
	v4           map[uint64]int       // IPv4 routes by ipv4RouteKey
	v6           map[netip.Prefix]int // IPv6 routes, IPv4-mapped ones included
	lens4, lens6 []int                // distinct prefix lengths present, longest first
}

// ipv4RouteKey packs an IPv4 address masked to bits, and bits, into one
// word that hashes faster than a netip.Prefix.
func ipv4RouteKey(addr uint32, bits int) uint64 {
	mask := ^(^uint32(0) >> bits) // >> 32 yields 0: /32 keeps every bit, /0 none
	return uint64(addr&mask)<<8 | uint64(bits)
}

func newRouteTable(all map[netip.Prefix]int) *routeTable {
	t := &routeTable{all: all, v4: map[uint64]int{}, v6: map[netip.Prefix]int{}}
	seen4, seen6 := map[int]bool{}, map[int]bool{}
	for p, port := range all {
		if p.Addr().Is4() {
			t.v4[ipv4RouteKey(ipv4Bits(p.Addr()), p.Bits())] = port
			seen4[p.Bits()] = true
		} else {
			t.v6[p] = port
			seen6[p.Bits()] = true
		}
	}
	desc := func(a, b int) int { return cmp.Compare(b, a) }
	t.lens4 = slices.SortedFunc(maps.Keys(seen4), desc)
	t.lens6 = slices.SortedFunc(maps.Keys(seen6), desc)
	return t
}

// lookup returns the port of the longest prefix containing a.
func (t *routeTable) lookup(a netip.Addr) (int, bool) {
	if a.Is4() {
		x := ipv4Bits(a)
		for _, bits := range t.lens4 {
			if port, ok := t.v4[ipv4RouteKey(x, bits)]; ok {
				return port, true
			}
		}
		return 0, false
	}
	for _, bits := range t.lens6 {
		// bits never exceeds 128, so Prefix cannot fail.
		p, _ := a.Prefix(bits)
		if port, ok := t.v6[p]; ok {
			return port, true
		}
	}
	return 0, false
}

// covers reports whether one route holds all of p: a route whose prefix
// is p or shorter and contains p's address.
func (t *routeTable) covers(p netip.Prefix) bool {
	a := p.Addr()
	if a.Is4() {
		x := ipv4Bits(a)
		for _, bits := range t.lens4 {
			if bits > p.Bits() {
				continue
			}
			if _, ok := t.v4[ipv4RouteKey(x, bits)]; ok {
				return true
			}
		}
		return false
	}
	for _, bits := range t.lens6 {
		if bits > p.Bits() {
			continue
		}
		q, _ := a.Prefix(bits)
		if _, ok := t.v6[q]; ok {
			return true
		}
	}
	return false
}

// Routes returns a copy of the static routes, sorted by family, then
// longest prefix first, then address.
func (f *L3Forwarder) Routes() []Route {
	t := f.routes.Load()
	out := make([]Route, 0, len(t.all))
	for p, port := range t.all {
		out = append(out, Route{Prefix: p, Port: port})
	}
	slices.SortFunc(out, func(a, b Route) int {
		if c := cmp.Compare(a.Prefix.Addr().BitLen(), b.Prefix.Addr().BitLen()); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Prefix.Bits(), a.Prefix.Bits()); c != 0 {
			return c
		}
		return a.Prefix.Addr().Compare(b.Prefix.Addr())
	})
	return out
}

// AddRoute adds r, or replaces the port of an existing route to the same
// prefix (after normalization). Workers see the new table from their next
// batch.
func (f *L3Forwarder) AddRoute(r Route) error {
	r, err := r.validate()
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ports := make(map[netip.Prefix]int, len(f.routes.Load().all)+1)
	maps.Copy(ports, f.routes.Load().all)
	ports[r.Prefix] = r.Port
	f.routes.Store(newRouteTable(ports))
	return nil
}

// ChangeRoutes removes the routes to remove and adds (or replaces) add,
// making one new table: a change of many routes costs the workers one
// table switch, and the whole of it is checked before anything changes.
// A prefix of remove without a route is an error, as in RemoveRoute.
func (f *L3Forwarder) ChangeRoutes(remove []netip.Prefix, add []Route) error {
	if len(remove) == 0 && len(add) == 0 {
		return nil
	}
	valid := make([]Route, len(add))
	for i, r := range add {
		var err error
		if valid[i], err = r.validate(); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ports := maps.Clone(f.routes.Load().all)
	for _, p := range remove {
		r, err := Route{Prefix: p}.validate()
		if err != nil {
			return err
		}
		if _, ok := ports[r.Prefix]; !ok {
			return fmt.Errorf("program: no route to %v", r.Prefix)
		}
		delete(ports, r.Prefix)
	}
	for _, r := range valid {
		ports[r.Prefix] = r.Port
	}
	f.routes.Store(newRouteTable(ports))
	return nil
}

// RemoveRoute removes the route to prefix (after normalization), or
// returns an error if there is none.
func (f *L3Forwarder) RemoveRoute(prefix netip.Prefix) error {
	r, err := Route{Prefix: prefix}.validate()
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.routes.Load().all
	if _, ok := cur[r.Prefix]; !ok {
		return fmt.Errorf("program: no route to %v", r.Prefix)
	}
	ports := maps.Clone(cur)
	delete(ports, r.Prefix)
	f.routes.Store(newRouteTable(ports))
	return nil
}
