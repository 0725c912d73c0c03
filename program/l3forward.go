package program

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

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

// Defaults for the zero fields of an L3Config.
const (
	DefaultMaxLearned = 16384
	// DefaultMoveHold is how long a learned host stays on its port
	// before a packet from another port may move it: a host that really
	// moved (a migrated VM) is reachable again within a second, while two
	// guests claiming one address in turn move it at most once a second
	// instead of on every packet.
	DefaultMoveHold = time.Second
)

// L3Config configures an L3Forwarder. The zero value learns, floods
// unknown destinations and leaves TTLs alone.
type L3Config struct {
	// Routes are the static routes, matched by longest prefix before
	// the learned hosts: an address a route covers is never learned, so
	// no packet can divert traffic that a route sends elsewhere.
	Routes []Route
	// NoLearn turns off learning. By default the forwarder learns each
	// packet's source address as a host on its ingress port, which is
	// all a set of TUN ports needs to reach each other. The field is a
	// negative so that the zero value keeps learning on.
	NoLearn bool
	// MaxLearned bounds the learned hosts (default DefaultMaxLearned).
	// Sources come from guests and may be spoofed: once the table is
	// full, new hosts are not learned (counted in LearnStats.Full; they
	// are reached by the Unknown policy) while the hosts already learned
	// keep working, until ageing makes room.
	MaxLearned int
	// AgeingTime is how long a learned host stays after its last packet
	// (default DefaultAgeingTime).
	AgeingTime time.Duration
	// MoveHold is how long a learned host stays on its port before it
	// may move to another (default DefaultMoveHold). Refused moves are
	// counted, and the first of each address is logged.
	MoveHold time.Duration
	// Policy, if set, is the port security that runs before the
	// forwarder: a source is learned on a port only if the port may send
	// from it, and a host whose port's policy names it does not move to
	// a port that allows it only by allow=any.
	Policy *PortSecurity
	// Log receives the forwarder's warnings (default: discarded).
	Log *slog.Logger
	// Unknown is the policy for unicast destinations with no entry.
	Unknown UnknownPolicy
	// DecrementTTL makes the forwarder act as a router: the TTL or hop
	// limit of every forwarded unicast packet is decremented, and a
	// packet whose TTL expires is dropped with drop.IPTTL.
	DecrementTTL bool
}

// L3Forwarder forwards IP packets between ports by destination address:
// static routes by longest prefix match first, then learned hosts. It is
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
// Learning cannot hijack: a learned host never shadows a route, moves
// only where the policy allows it and at most once per MoveHold, and the
// table is bounded, with ageing by Batch.Now (no clock is read per
// packet).
//
// Workers read both tables lock-free through atomic pointers to immutable
// snapshots; learning a host or changing a route copies the table under
// a mutex and swaps it in.
type L3Forwarder struct {
	learn      bool
	maxLearned int
	unknown    Verdict
	decTTL     bool
	ageing     int64 // ns
	refresh    int64 // ns: how stale an entry's last-seen time may get
	moveHold   int64 // ns
	policy     *PortSecurity
	log        *slog.Logger

	mu     sync.Mutex // serializes writers of both tables
	hosts  atomic.Pointer[hostTable]
	routes atomic.Pointer[routeTable]
	// clock is the latest Batch.Now seen, kept within refresh, for
	// Learned.
	clock atomic.Int64
	// fullUntil is when to try learning again after the table was found
	// full: until then new hosts are not even looked at, so a flood of
	// random sources does not take the writer lock once per batch.
	fullUntil atomic.Int64
	stats     learnStats
}

// NewL3Forwarder returns a forwarder with cfg's routes, or an error
// naming the first invalid route or setting.
func NewL3Forwarder(cfg L3Config) (*L3Forwarder, error) {
	f := &L3Forwarder{learn: !cfg.NoLearn, maxLearned: cfg.MaxLearned, decTTL: cfg.DecrementTTL, policy: cfg.Policy, log: cfg.Log}
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
	if cfg.AgeingTime < 0 || cfg.MoveHold < 0 {
		return nil, fmt.Errorf("program: negative AgeingTime %v or MoveHold %v", cfg.AgeingTime, cfg.MoveHold)
	}
	if cfg.AgeingTime == 0 {
		cfg.AgeingTime = DefaultAgeingTime
	}
	if cfg.MoveHold == 0 {
		cfg.MoveHold = DefaultMoveHold
	}
	f.ageing, f.moveHold = int64(cfg.AgeingTime), int64(cfg.MoveHold)
	f.refresh = min(int64(time.Second), max(f.ageing/4, 1))
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
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

// mayLearnOn reports whether anything from port can be learned: not if
// its policy allows only addresses the routes cover (the switch's
// default), which spares every packet of the port two lookups.
func (f *L3Forwarder) mayLearnOn(port int, routes *routeTable) bool {
	if f.policy == nil {
		return true
	}
	r := f.policy.port(port)
	return r == nil || r.mayLearn(routes)
}

// Run implements Program.
func (f *L3Forwarder) Run(b *Batch) {
	// One snapshot per batch: every packet of the batch sees the same
	// tables, and the atomic loads are paid once.
	hosts := f.hosts.Load()
	routes := f.routes.Load()
	now := b.Now
	f.tick(now)
	learn := f.learn && f.mayLearnOn(b.Ingress, routes)
	var learned pending[netip.Addr]
	var counts learnCounts
	// A burst is mostly a few flows: a source just found not to need
	// learning is not looked up again for the next packets.
	var settled netip.Addr
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
		if learn && h.SrcIP != settled {
			if !f.shouldLearn(hosts, routes, h.SrcIP, b.Ingress, now, &counts) {
				settled = h.SrcIP
			} else if learned.add(h.SrcIP) {
				f.commit(&learned, b.Ingress, now, &counts)
				hosts = f.hosts.Load()
			}
		}

		dst := h.DstIP
		if dst.IsMulticast() || dst == limitedBroadcast {
			b.Verdicts[i] = FloodVerdict
			continue
		}
		port, found := routes.lookup(dst)
		if !found {
			if e := hosts.lookup(dst); e != nil && !f.expired(e, now) {
				port, found = e.port, true
			}
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
		f.commit(&learned, b.Ingress, now, &counts)
	}
	f.flush(&counts)
}
