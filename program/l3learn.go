package program

import (
	"encoding/binary"
	"maps"
	"net/netip"
)

// hostTable is an immutable snapshot of the learned hosts. IPv4 hosts are
// keyed by the address as a uint32: hashing 4 bytes costs about half of
// hashing a netip.Addr, and this lookup is on every packet's path twice
// (source and destination).
type hostTable struct {
	v4 map[uint32]int
	v6 map[netip.Addr]int // includes IPv4-mapped IPv6 addresses, kept apart from IPv4
}

func newHostTable(size int) *hostTable {
	return &hostTable{v4: make(map[uint32]int, size), v6: make(map[netip.Addr]int)}
}

func ipv4Bits(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func (t *hostTable) lookup(a netip.Addr) (int, bool) {
	if a.Is4() {
		port, ok := t.v4[ipv4Bits(a)]
		return port, ok
	}
	port, ok := t.v6[a]
	return port, ok
}

func (t *hostTable) len() int { return len(t.v4) + len(t.v6) }

// set must only be called on a table no worker sees yet.
func (t *hostTable) set(a netip.Addr, port int) {
	if a.Is4() {
		t.v4[ipv4Bits(a)] = port
	} else {
		t.v6[a] = port
	}
}

func (t *hostTable) clone(extra int) *hostTable {
	c := &hostTable{v4: make(map[uint32]int, len(t.v4)+extra), v6: make(map[netip.Addr]int, len(t.v6))}
	maps.Copy(c.v4, t.v4)
	maps.Copy(c.v6, t.v6)
	return c
}

// shouldLearn reports whether src is a host address not yet mapped to
// port. It only reads the snapshot, so a known host costs one map probe.
func (f *L3Forwarder) shouldLearn(hosts *hostTable, src netip.Addr, port int) bool {
	if src.IsUnspecified() || src.IsMulticast() || src == limitedBroadcast {
		return false // not a host: nothing can be sent to it
	}
	cur, ok := hosts.lookup(src)
	if ok {
		return cur != port // the host moved
	}
	return hosts.len() < f.maxLearned
}

// commit maps the collected addresses to port in a new snapshot and
// empties the collection. Another worker may have learned some of them
// meanwhile, so each is checked again under the lock, and the table is
// copied only if something changes.
func (f *L3Forwarder) commit(l *pending[netip.Addr], port int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.hosts.Load()
	var next *hostTable
	for _, a := range l.keys[:l.n] {
		old, ok := cur.lookup(a)
		if ok && old == port {
			continue
		}
		if next == nil {
			next = cur.clone(l.n)
		}
		if !ok && next.len() >= f.maxLearned {
			continue
		}
		next.set(a, port)
	}
	if next != nil {
		f.hosts.Store(next)
	}
	l.n = 0
}

// Learned returns a copy of the learned hosts and their ports.
func (f *L3Forwarder) Learned() map[netip.Addr]int {
	t := f.hosts.Load()
	out := make(map[netip.Addr]int, t.len())
	for k, v := range t.v4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], k)
		out[netip.AddrFrom4(b)] = v
	}
	for k, v := range t.v6 {
		out[k] = v
	}
	return out
}

// FlushLearned forgets every learned host, as when ports are
// reconfigured.
func (f *L3Forwarder) FlushLearned() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hosts.Store(newHostTable(0))
}
