package program

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"softnet.dev/drop"
	"softnet.dev/packet"
)

// PortPolicy is what a port's guest may claim to be.
type PortPolicy struct {
	// Allow is the set of source addresses the port may send from, and
	// the only addresses its ARP packets and IPv6 neighbour
	// advertisements may claim.
	Allow Allow
	// MACs are the source MACs the port may send from, and the only ones
	// its ARP packets and neighbour discovery options may claim; empty
	// allows any MAC. With MACs, the IPv6 link-local address each MAC
	// forms by EUI-64 (fe80::/64, as Linux forms it by default) is
	// allowed too, so that router and neighbour discovery keep working.
	MACs [][6]byte
	// DHCPServer lets DHCP and DHCPv6 server and relay messages (UDP from
	// port 67 or 547) out of the port; without it they are dropped with
	// drop.DHCPServer, so a guest cannot hand out addresses or routes.
	DHCPServer bool
	// Router lets IPv6 router advertisements and redirects out of the
	// port; without it they are dropped with drop.RAGuard (RFC 6105's RA
	// guard), so a guest cannot make itself its neighbours' default
	// router, hand them prefixes to autoconfigure or redirect their
	// traffic. While no port is a router, what guests send to the groups
	// only routers join (all-routers, ff02::2 and 224.0.0.2, and the
	// MLDv2 and IGMPv3 report groups, ff02::16 and 224.0.0.22: router
	// solicitations, membership reports) is dropped with drop.NoRoute
	// instead of being flooded to every port, as a snooping bridge sends
	// reports only to router ports: with hundreds of guests, their
	// kernels' own solicitations and reports would otherwise each cost a
	// write to every other port, and no one would read them.
	Router bool
}

// PortSecurity drops what a guest sends as someone else, by ingress
// port: packets from source addresses outside the port's Allow
// (drop.IPRPFilter, strict reverse-path filtering), frames from source
// MACs outside its MACs (drop.MACSpoof), ARP packets whose sender claims
// another address or MAC (drop.ARPSpoof), IPv6 neighbour solicitations
// and advertisements that claim another address or link-layer address
// (drop.NDiscSpoof), DHCP server messages (drop.DHCPServer), and IPv6
// router advertisements and redirects (drop.RAGuard). It goes in the
// chain before the forwarder or bridge, so that nothing it drops is
// learned; the engine counts its drops by reason per ingress port.
//
// The DHCP and RA checks look past every IPv6 extension header to the
// upper-layer header, as RFC 7113 asks of an RA guard: a first fragment whose header
// chain ends before the upper-layer header does may be hiding a router
// advertisement, and is dropped with drop.RAGuard on a port that is not
// a router. Later fragments pass: without their first they reassemble
// into nothing.
//
// The unspecified source address passes only where a host that has no
// address yet needs it: a DHCP client's request (UDP 68 to 67) and IPv6
// duplicate address detection (a neighbour solicitation, whose target,
// the address being claimed, must be allowed) and MLD reports. On L3
// (TUN) ports, link-local sources pass towards link-local multicast
// groups: that is the guest's link-scope control traffic (router
// solicitations, MLD), which no neighbour cache behind a routed port
// records and the forwarder never learns.
//
// A port without a policy (never set, or removed) is not checked: for
// the switch's own ports, such as its local endpoints. Workers read the
// policies through an atomic pointer to an immutable snapshot; SetPolicy
// swaps in a new one.
type PortSecurity struct {
	mu    sync.Mutex // serializes writers
	rules atomic.Pointer[[]*portRules]
	// routers counts the ports whose policy says Router: with none,
	// what only routers listen to goes nowhere (routerOnly).
	routers atomic.Int32
}

// portRules is one port's policy compiled for lookups.
type portRules struct {
	policy PortPolicy
	any    bool
	set    *routeTable // the allowed prefixes; values unused
	macs   [][6]byte
	// learnable caches, for one route table of a forwarder, whether the
	// port may send from an address no route covers: if not, nothing
	// from it can be learned and the forwarder skips learning for its
	// batches.
	learnable atomic.Pointer[learnableFor]
}

type learnableFor struct {
	routes *routeTable
	ok     bool
}

// mayLearn reports whether a forwarder with routes can learn anything
// from the port: whether some allowed prefix (link-local ones aside,
// which are never learned) is not covered by a single route.
func (r *portRules) mayLearn(routes *routeTable) bool {
	if r.any {
		return true
	}
	if c := r.learnable.Load(); c != nil && c.routes == routes {
		return c.ok
	}
	ok := false
	for _, p := range r.policy.Allow.Prefixes {
		if !linkLocal.Contains(p.Addr()) && !routes.covers(p.Masked()) {
			ok = true
			break
		}
	}
	r.learnable.Store(&learnableFor{routes: routes, ok: ok})
	return ok
}

var linkLocal = netip.MustParsePrefix("fe80::/10")

// NewPortSecurity returns a program enforcing policies, by port index.
func NewPortSecurity(policies map[int]PortPolicy) (*PortSecurity, error) {
	s := &PortSecurity{}
	var rules []*portRules
	for port, p := range policies {
		r, err := compilePolicy(port, p)
		if err != nil {
			return nil, err
		}
		if port >= len(rules) {
			rules = slices.Grow(rules, port+1-len(rules))[:port+1]
		}
		rules[port] = r
	}
	s.rules.Store(&rules)
	s.countRouters(rules)
	return s, nil
}

// countRouters recounts the router ports, under s.mu or before s is
// shared.
func (s *PortSecurity) countRouters(rules []*portRules) {
	n := int32(0)
	for _, r := range rules {
		if r != nil && r.policy.Router {
			n++
		}
	}
	s.routers.Store(n)
}

// Groups that only routers join (RFC 4291, 3810, 1112 and 3376).
var routerOnly = [...]netip.Addr{
	netip.MustParseAddr("ff02::2"),
	netip.MustParseAddr("ff02::16"),
	netip.MustParseAddr("224.0.0.2"),
	netip.MustParseAddr("224.0.0.22"),
}

// toRoutersOnly reports whether dst is a group only routers join.
func toRoutersOnly(dst netip.Addr) bool {
	if !dst.IsLinkLocalMulticast() {
		return false
	}
	for _, g := range routerOnly {
		if dst == g {
			return true
		}
	}
	return false
}

func compilePolicy(port int, p PortPolicy) (*portRules, error) {
	if port < 0 || port > maxPort {
		return nil, fmt.Errorf("program: port policy for port %d outside [0, %d]", port, maxPort)
	}
	if len(p.Allow.Prefixes) > MaxAllowPrefixes || len(p.MACs) > MaxPortMACs {
		return nil, fmt.Errorf("program: port %d: policy with %d prefixes and %d MACs, at most %d and %d", port, len(p.Allow.Prefixes), len(p.MACs), MaxAllowPrefixes, MaxPortMACs)
	}
	set := map[netip.Prefix]int{}
	for _, pfx := range p.Allow.Prefixes {
		r, err := Route{Prefix: pfx, Port: port}.validate()
		if err != nil {
			return nil, fmt.Errorf("program: port %d: allow %v: invalid prefix", port, pfx)
		}
		set[r.Prefix] = port
	}
	for _, m := range p.MACs {
		if m[0]&1 != 0 || m == ([6]byte{}) {
			return nil, fmt.Errorf("program: port %d: MAC %x is not a unicast station address", port, m)
		}
		set[netip.PrefixFrom(linkLocalEUI64(m), 128)] = port
	}
	return &portRules{
		policy: p,
		any:    p.Allow.Any,
		set:    newRouteTable(set),
		macs:   slices.Clone(p.MACs),
	}, nil
}

// linkLocalEUI64 is the link-local address a station with MAC m forms by
// modified EUI-64 (RFC 4291 appendix A).
func linkLocalEUI64(m [6]byte) netip.Addr {
	return netip.AddrFrom16([16]byte{0: 0xfe, 1: 0x80,
		8: m[0] ^ 2, 9: m[1], 10: m[2], 11: 0xff, 12: 0xfe, 13: m[3], 14: m[4], 15: m[5]})
}

// SetPolicy sets (replaces) port's policy. Workers see it from their
// next batch.
func (s *PortSecurity) SetPolicy(port int, p PortPolicy) error {
	r, err := compilePolicy(port, p)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := slices.Clone(*s.rules.Load())
	if port >= len(next) {
		next = slices.Grow(next, port+1-len(next))[:port+1]
	}
	next[port] = r
	s.rules.Store(&next)
	s.countRouters(next)
	return nil
}

// RemovePolicy stops checking port.
func (s *PortSecurity) RemovePolicy(port int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := slices.Clone(*s.rules.Load())
	if port >= 0 && port < len(next) {
		next[port] = nil
	}
	s.rules.Store(&next)
	s.countRouters(next)
}

// Policy returns port's policy, if it has one.
func (s *PortSecurity) Policy(port int) (PortPolicy, bool) {
	if r := s.port(port); r != nil {
		return r.policy, true
	}
	return PortPolicy{}, false
}

func (s *PortSecurity) port(port int) *portRules {
	rules := *s.rules.Load()
	if port < 0 || port >= len(rules) {
		return nil
	}
	return rules[port]
}

// Allowed reports whether port may send from a: always for a port
// without a policy.
func (s *PortSecurity) Allowed(port int, a netip.Addr) bool {
	r := s.port(port)
	return r == nil || r.allows(a)
}

// explicitlyAllowed reports whether port's policy lists a prefix holding
// a (allow=any is not explicit).
func (s *PortSecurity) explicitlyAllowed(port int, a netip.Addr) bool {
	r := s.port(port)
	if r == nil {
		return false
	}
	_, ok := r.set.lookup(a)
	return ok
}

func (r *portRules) allows(a netip.Addr) bool {
	if r.any {
		return true
	}
	_, ok := r.set.lookup(a)
	return ok
}

func (r *portRules) allowsMAC(m [6]byte) bool {
	return len(r.macs) == 0 || slices.Contains(r.macs, m)
}

// Name implements Program.
func (s *PortSecurity) Name() string { return "portsec" }

// Run implements Program.
func (s *PortSecurity) Run(b *Batch) {
	r := s.port(b.Ingress)
	if r == nil {
		return
	}
	noRouters := s.routers.Load() == 0
	for i := range b.Len() {
		h, ok := b.Undecided(i)
		if !ok {
			if h != nil && h.Proto == packet.EtherTypeIPv6 && b.Verdicts[i] == DropVerdict(drop.HdrTrunc) {
				// Cut short in its header chain or transport header: a
				// first fragment so cut is the RA guard's to drop.
				b.Verdicts[i] = r.cutShort(h.Fragment)
			}
			continue
		}
		if v := r.check(b.Bufs[i].Bytes(), b.Layer, h); v != PassVerdict {
			b.Verdicts[i] = v
		} else if noRouters && toRoutersOnly(h.DstIP) {
			b.Verdicts[i] = DropVerdict(drop.NoRoute)
		}
	}
}

// ICMPv6 types and NDP options checked.
const (
	icmp6MLDv2Report       = 143
	icmp6RouterAdvert      = 134
	icmp6NeighborSolicit   = 135
	icmp6NeighborAdvert    = 136
	icmp6Redirect          = 137
	ndpOptSourceLinkLayer  = 1
	ndpOptTargetLinkLayer  = 2
	ndpHeaderLen           = 24 // ICMPv6 header, flags or reserved, target
	dhcpServerPort         = 67
	dhcpClientPort         = 68
	dhcp6ServerPort        = 547
	protoICMPv6            = 58
	protoUDP               = 17
	ethernetAddrOptionSize = 8 // type, length (in 8-byte units) and a MAC
)

func (r *portRules) check(pkt []byte, layer packet.Layer, h *packet.Headers) Verdict {
	if layer == packet.L2 && !r.allowsMAC(h.Src) {
		return DropVerdict(drop.MACSpoof)
	}
	if h.Proto == packet.EtherTypeARP {
		if !r.allowsMAC(h.ARPSenderMAC) || !h.SrcIP.IsUnspecified() && !r.allows(h.SrcIP) {
			return DropVerdict(drop.ARPSpoof)
		}
		return PassVerdict
	}
	if h.Proto != packet.EtherTypeIPv4 && h.Proto != packet.EtherTypeIPv6 {
		return PassVerdict
	}
	if v := r.checkServers(pkt, h); v != PassVerdict {
		return v
	}
	l4 := h.L4Off > 0
	ndp := l4 && h.IPProto == protoICMPv6 && (h.SrcPort == icmp6NeighborSolicit || h.SrcPort == icmp6NeighborAdvert)
	switch {
	case r.allows(h.SrcIP):
	case h.SrcIP.IsUnspecified() && l4 && unspecifiedSourceNeeded(h):
	case layer == packet.L3 && h.SrcIP.IsLinkLocalUnicast() && h.DstIP.IsLinkLocalMulticast():
		// A TUN guest's own link (router solicitations, MLD): nothing on
		// a routed port caches a link-local address.
	default:
		return DropVerdict(drop.IPRPFilter)
	}
	if ndp {
		return r.checkNDP(pkt[h.L4Off:], h)
	}
	return PassVerdict
}

// checkServers drops what only DHCP servers and routers send, from a port
// that may not run one.
func (r *portRules) checkServers(pkt []byte, h *packet.Headers) Verdict {
	if r.policy.DHCPServer && r.policy.Router {
		return PassVerdict
	}
	proto, l4 := h.IPProto, []byte(nil)
	switch {
	case h.L4Off > 0:
		l4 = pkt[h.L4Off:]
	case h.Proto == packet.EtherTypeIPv6 && ipv6Extension(h.IPProto):
		// Parse stopped at an extension header it does not step over
		// (AH, mobility, ...), or at a later fragment's next header.
		var fragment int
		var ok bool
		proto, l4, fragment, ok = ipv6UpperLayer(pkt[h.L3Off : h.L3Off+h.L3Len])
		if fragment > 0 {
			return PassVerdict
		}
		// UDP's header and ICMPv6's are both 8 bytes long.
		if !ok || (proto == protoUDP || proto == protoICMPv6) && len(l4) < packet.UDPHeaderLen {
			return r.cutShort(fragment == 0)
		}
	default:
		return PassVerdict
	}
	switch {
	case proto == protoUDP && !r.policy.DHCPServer:
		if src := binary.BigEndian.Uint16(l4); h.Proto == packet.EtherTypeIPv4 && src == dhcpServerPort ||
			h.Proto == packet.EtherTypeIPv6 && src == dhcp6ServerPort {
			return DropVerdict(drop.DHCPServer)
		}
	case proto == protoICMPv6 && h.Proto == packet.EtherTypeIPv6 && !r.policy.Router:
		if l4[0] == icmp6RouterAdvert || l4[0] == icmp6Redirect {
			return DropVerdict(drop.RAGuard)
		}
	}
	return PassVerdict
}

// cutShort is the verdict on an IPv6 packet whose header chain or
// upper-layer header runs past its end: a first fragment (fragment) may
// be hiding a router advertisement in the fragments that follow, and RFC
// 7113 has the RA guard drop it; anything else is merely truncated.
func (r *portRules) cutShort(fragment bool) Verdict {
	if fragment && !r.policy.Router {
		return DropVerdict(drop.RAGuard)
	}
	return DropVerdict(drop.HdrTrunc)
}

// IPv6 extension headers by next-header value: those Parse steps over,
// AH, and those in RFC 6564's uniform format (mobility, HIP, shim6 and
// the two experimental values), which it does not.
const (
	ipv6HopByHop    = 0
	ipv6Routing     = 43
	ipv6Fragment    = 44
	ipv6AuthHeader  = 51
	ipv6DestOptions = 60
	ipv6Mobility    = 135
	ipv6HIP         = 139
	ipv6Shim6       = 140
	ipv6Experiment1 = 253
	ipv6Experiment2 = 254
	ipv6ExtUnit     = 8 // lengths count 8-byte units (AH's 4-byte ones)
)

func ipv6Extension(proto uint8) bool {
	switch proto {
	case ipv6HopByHop, ipv6Routing, ipv6Fragment, ipv6AuthHeader, ipv6DestOptions,
		ipv6Mobility, ipv6HIP, ipv6Shim6, ipv6Experiment1, ipv6Experiment2:
		return true
	}
	return false
}

// ipv6UpperLayer walks the extension headers of the IPv6 packet ip (its
// 40-byte header included, ending where its payload length says) to the
// upper-layer header: its protocol and the bytes from it to the end.
// fragment is -1 if there is no fragment header, else the fragment's
// offset; one other than the first (offset > 0) ends the walk, its
// upper-layer header being in the first. ok is false if the chain runs
// past the end of ip. ESP ends the chain: what follows it is encrypted
// (RFC 7112 counts it as the upper layer). Each header is at least 8
// bytes long, so the walk ends within len(ip)/8 steps.
func ipv6UpperLayer(ip []byte) (proto uint8, l4 []byte, fragment int, ok bool) {
	proto, fragment = ip[6], -1
	off := packet.IPv6HeaderLen
	for ipv6Extension(proto) {
		if len(ip)-off < ipv6ExtUnit {
			return proto, nil, fragment, false
		}
		n := (int(ip[off+1]) + 1) * ipv6ExtUnit
		switch proto {
		case ipv6AuthHeader:
			n = (int(ip[off+1]) + 2) * 4 // RFC 4302
		case ipv6Fragment:
			fragment = int(binary.BigEndian.Uint16(ip[off+2:]) >> 3)
			if fragment > 0 {
				return ip[off], nil, fragment, true
			}
			n = ipv6ExtUnit
		}
		if len(ip)-off < n {
			return proto, nil, fragment, false
		}
		proto = ip[off]
		off += n
	}
	return proto, ip[off:], fragment, true
}

// unspecifiedSourceNeeded reports whether h is a packet a host sends
// before it has an address.
func unspecifiedSourceNeeded(h *packet.Headers) bool {
	if h.Proto == packet.EtherTypeIPv4 {
		return h.IPProto == protoUDP && h.SrcPort == dhcpClientPort && h.DstPort == dhcpServerPort
	}
	return h.IPProto == protoICMPv6 && (h.SrcPort == icmp6NeighborSolicit || h.SrcPort == icmp6MLDv2Report)
}

// checkNDP checks what a neighbour solicitation or advertisement claims:
// an advertisement (and a duplicate address detection probe, from ::)
// claims its target address, and its link-layer address options claim a
// MAC.
func (r *portRules) checkNDP(icmp []byte, h *packet.Headers) Verdict {
	if len(icmp) < ndpHeaderLen {
		return DropVerdict(drop.HdrTrunc)
	}
	target := netip.AddrFrom16([16]byte(icmp[8:24]))
	claims := h.SrcPort == icmp6NeighborAdvert || h.SrcIP.IsUnspecified()
	if claims && !r.allows(target) {
		return DropVerdict(drop.NDiscSpoof)
	}
	if len(r.macs) == 0 {
		return PassVerdict
	}
	// The ICMPv6 payload ends where the IPv6 payload does, not where the
	// frame does (Ethernet padding).
	end := min(len(icmp), h.L3Off+h.L3Len-h.L4Off)
	for off := ndpHeaderLen; off < end; {
		if end-off < 2 {
			return DropVerdict(drop.HdrTrunc)
		}
		n := int(icmp[off+1]) * 8
		switch {
		case n == 0:
			// RFC 4861 7.1.1: a zero-length option invalidates the packet.
			return DropVerdict(drop.InvalidProto)
		case off+n > end:
			return DropVerdict(drop.HdrTrunc)
		}
		if t := icmp[off]; (t == ndpOptSourceLinkLayer || t == ndpOptTargetLinkLayer) && n >= ethernetAddrOptionSize &&
			!r.allowsMAC([6]byte(icmp[off+2:off+8])) {
			return DropVerdict(drop.NDiscSpoof)
		}
		off += n
	}
	return PassVerdict
}
