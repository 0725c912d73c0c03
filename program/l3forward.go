package program

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"softnet.dev/drop"
	"softnet.dev/packet"
)

// UnknownPolicy says what L3Forwarder does with a unicast destination that
// matches neither a learned host nor a route.
type UnknownPolicy uint8

const (
	FloodUnknown UnknownPolicy = iota // send out of every other port, as a hub would
	DropUnknown                       // drop with drop.NoRoute, as a router would
)

// DefaultMaxLearned bounds L3Config.MaxLearned when it is zero.
const DefaultMaxLearned = 16384

// L3Config configures an L3Forwarder. The zero value learns, floods
// unknown destinations and leaves TTLs alone.
type L3Config struct {
	// Routes are the static routes, matched by longest prefix after the
	// learned hosts.
	Routes []Route
	// NoLearn turns off learning. By default the forwarder learns each
	// packet's source address as a host on its ingress port, which is
	// all a set of TUN ports needs to reach each other. The field is a
	// negative so that the zero value keeps learning on.
	NoLearn bool
	// MaxLearned bounds the learned hosts (default DefaultMaxLearned).
	// Sources come from guests and may be spoofed: once the table is
	// full, new hosts are not learned (and reach them by route or by the
	// Unknown policy); hosts already learned can still move.
	MaxLearned int
	// Unknown is the policy for unicast destinations with no entry.
	Unknown UnknownPolicy
	// DecrementTTL makes the forwarder act as a router: the TTL or hop
	// limit of every forwarded unicast packet is decremented, and a
	// packet whose TTL expires is dropped with drop.IPTTL.
	DecrementTTL bool
}

// L3Forwarder forwards IP packets between ports by destination address:
// learned hosts first, then static routes by longest prefix match. It is
// meant for L3 (TUN) ports; on L2 ports it forwards the IP packets inside
// the frames without rewriting their MAC addresses, and drops anything
// else (ARP) with drop.UnhandledProto.
//
// IPv4 packets with a wrong header checksum are dropped with drop.IPCsum,
// as the kernel's ip_rcv does, whatever the destination.
//
// Multicast and broadcast destinations are flooded, and their TTL is never
// decremented: they are link-local here (NDP requires hop limit 255 on
// receipt, IGMP is sent with TTL 1), not routed.
//
// Workers read both tables lock-free through atomic pointers to immutable
// snapshots; learning a host or changing a route copies the table under
// a mutex and swaps it in.
type L3Forwarder struct {
	learn      bool
	maxLearned int
	unknown    Verdict
	decTTL     bool

	mu     sync.Mutex // serializes writers of both tables
	hosts  atomic.Pointer[hostTable]
	routes atomic.Pointer[routeTable]
}

// NewL3Forwarder returns a forwarder with cfg's routes, or an error
// naming the first invalid route or setting.
func NewL3Forwarder(cfg L3Config) (*L3Forwarder, error) {
	f := &L3Forwarder{learn: !cfg.NoLearn, maxLearned: cfg.MaxLearned, decTTL: cfg.DecrementTTL}
	switch cfg.Unknown {
	case FloodUnknown:
		f.unknown = FloodVerdict
	case DropUnknown:
		f.unknown = DropVerdict(drop.NoRoute)
	default:
		return nil, fmt.Errorf("program: unknown UnknownPolicy %d", cfg.Unknown)
	}
	if f.maxLearned < 0 {
		return nil, fmt.Errorf("program: negative MaxLearned %d", cfg.MaxLearned)
	}
	if f.maxLearned == 0 {
		f.maxLearned = DefaultMaxLearned
	}
	ports := make(map[netip.Prefix]int, len(cfg.Routes))
	for _, r := range cfg.Routes {
		r, err := r.validate()
		if err != nil {
			return nil, err
		}
		if _, dup := ports[r.Prefix]; dup {
			return nil, fmt.Errorf("program: duplicate route to %v", r.Prefix)
		}
		ports[r.Prefix] = r.Port
	}
	f.routes.Store(newRouteTable(ports))
	f.hosts.Store(newHostTable(0))
	return f, nil
}

// Name implements Program.
func (f *L3Forwarder) Name() string { return "l3forward" }

var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// Run implements Program.
func (f *L3Forwarder) Run(b *Batch) {
	// One snapshot per batch: every packet of the batch sees the same
	// tables, and the atomic loads are paid once.
	hosts := f.hosts.Load()
	routes := f.routes.Load()
	var learned pending[netip.Addr]
	for i := range b.Len() {
		h, ok := b.Undecided(i)
		if !ok {
			continue
		}
		if h.Proto != packet.EtherTypeIPv4 && h.Proto != packet.EtherTypeIPv6 {
			b.Verdicts[i] = DropVerdict(drop.UnhandledProto)
			continue
		}
		// A router must not forward what ip_rcv would refuse: no device
		// verifies the IPv4 header checksum for us (TUN and TAP never
		// do, virtio's DATA_VALID covers L4 only), and DecrementTTL's
		// incremental update would carry the error into a checksum the
		// receiver cannot tell from ours. Checked before learning, so a
		// corrupted source address is never learned.
		if h.Proto == packet.EtherTypeIPv4 && !packet.IPv4HeaderChecksumOK(b.Bufs[i].Bytes()[h.L3Off:]) {
			b.Verdicts[i] = DropVerdict(drop.IPCsum)
			continue
		}
		if f.learn && f.shouldLearn(hosts, h.SrcIP, b.Ingress) && learned.add(h.SrcIP) {
			f.commit(&learned, b.Ingress)
			hosts = f.hosts.Load()
		}

		dst := h.DstIP
		if dst.IsMulticast() || dst == limitedBroadcast {
			b.Verdicts[i] = FloodVerdict
			continue
		}
		port, found := hosts.lookup(dst)
		if !found {
			port, found = routes.lookup(dst)
		}
		v := f.unknown
		if found {
			v = RedirectVerdict(port)
			if port == b.Ingress {
				// The destination is behind the port the packet came in
				// on: sending it back would loop it, not deliver it.
				v = DropVerdict(drop.NoRoute)
			}
		}
		if f.decTTL && v.Action() != Drop && !packet.DecrementTTL(b.Bufs[i].Bytes(), h) {
			v = DropVerdict(drop.IPTTL)
		}
		b.Verdicts[i] = v
	}
	if learned.n > 0 {
		f.commit(&learned, b.Ingress)
	}
}
