package agent

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// The annotations an agent puts on its own Node, for the others to
// reach its pods.
const (
	// AnnotationVTEP is the node's VTEP: the underlay address its vxlan
	// port sends from and receives on.
	AnnotationVTEP = "softnet.dev/vtep"
	// AnnotationVTEPMAC is the MAC of the node's routed vxlan port
	// (vtep-mac=), the destination of the frames the others send it.
	AnnotationVTEPMAC = "softnet.dev/vtep-mac"
)

// Peer is another node as the agent programs it: its pod CIDRs are
// routed via its VTEP, whose MAC is a static fdb entry.
type Peer struct {
	Node     string
	VTEP     netip.Addr
	MAC      [6]byte
	PodCIDRs []netip.Prefix
}

// PodCIDRs returns the node's pod CIDRs (spec.podCIDRs, dual-stack; the
// older spec.podCIDR alone if it has no list), each masked as the
// controller manager allocates them.
func PodCIDRs(n *corev1.Node) ([]netip.Prefix, error) {
	list := n.Spec.PodCIDRs
	if len(list) == 0 && n.Spec.PodCIDR != "" {
		list = []string{n.Spec.PodCIDR}
	}
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("node %s: pod CIDR %q: %w", n.Name, s, err)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("node %s: pod CIDR %s has host bits set", n.Name, p)
		}
		out = append(out, p)
	}
	return out, nil
}

// PeerOf reads a node's annotations and pod CIDRs. ok is false, with no
// error, for a node that has not published a VTEP yet or has no pod
// CIDRs yet (its agent has not started, or the controller manager has
// not allocated them): it is no peer until it has both.
func PeerOf(n *corev1.Node) (p Peer, ok bool, err error) {
	vtep, mac := n.Annotations[AnnotationVTEP], n.Annotations[AnnotationVTEPMAC]
	cidrs, err := PodCIDRs(n)
	if err != nil {
		return Peer{}, false, err
	}
	if vtep == "" || mac == "" || len(cidrs) == 0 {
		return Peer{}, false, nil
	}
	p = Peer{Node: n.Name, PodCIDRs: cidrs}
	if p.VTEP, err = netip.ParseAddr(vtep); err != nil || p.VTEP.Zone() != "" {
		return Peer{}, false, fmt.Errorf("node %s: annotation %s=%q: want an IP address", n.Name, AnnotationVTEP, vtep)
	}
	p.VTEP = p.VTEP.Unmap()
	if !p.VTEP.IsGlobalUnicast() {
		// Unspecified, loopback, link-local or multicast: the switch
		// would send this node's pods' traffic nowhere or everywhere.
		return Peer{}, false, fmt.Errorf("node %s: annotation %s=%q: want a unicast address", n.Name, AnnotationVTEP, vtep)
	}
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 || hw[0]&1 != 0 || [6]byte(hw) == [6]byte{} {
		return Peer{}, false, fmt.Errorf("node %s: annotation %s=%q: want a unicast MAC address", n.Name, AnnotationVTEPMAC, mac)
	}
	p.MAC = [6]byte(hw)
	return p, true, nil
}

// Peers returns the peers among nodes of the node self (its own VTEP,
// MAC and pod CIDRs), by node name: every other node with a VTEP of
// the family of self's and pod CIDRs. A node that cannot be one is left out with an error
// saying why: bad annotations, a VTEP of the other family, the same
// VTEP, MAC or pod CIDR as a peer before it by name (or as self's), so
// that one misconfigured node never takes another's traffic.
func Peers(self Peer, nodes []*corev1.Node) ([]Peer, []error) {
	nodes = slices.Clone(nodes)
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	var errs []error
	vteps := map[netip.Addr]string{self.VTEP: self.Node}
	macs := map[[6]byte]string{self.MAC: self.Node}
	// A pod CIDR that overlaps another node's, this one's included,
	// would take that node's pods' traffic (a Node claiming 0.0.0.0/0
	// would take all of it): the first node by name keeps it.
	var cidrs claims
	for _, p := range self.PodCIDRs {
		cidrs.add(p, self.Node)
	}
	var peers []Peer
	for _, n := range nodes {
		if n.Name == self.Node {
			continue
		}
		p, ok, err := PeerOf(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		if p.VTEP.Is4() != self.VTEP.Is4() {
			errs = append(errs, fmt.Errorf("node %s: VTEP %v is of another family than this node's %v", n.Name, p.VTEP, self.VTEP))
			continue
		}
		if other, dup := vteps[p.VTEP]; dup {
			errs = append(errs, fmt.Errorf("node %s: VTEP %v is node %s's too", n.Name, p.VTEP, other))
			continue
		}
		if other, dup := macs[p.MAC]; dup {
			errs = append(errs, fmt.Errorf("node %s: VTEP MAC %s is node %s's too", n.Name, net.HardwareAddr(p.MAC[:]), other))
			continue
		}
		if i := slices.IndexFunc(p.PodCIDRs, func(c netip.Prefix) bool { return cidrs.overlap(c) != nil }); i >= 0 {
			o := cidrs.overlap(p.PodCIDRs[i])
			errs = append(errs, fmt.Errorf("node %s: pod CIDR %v overlaps node %s's %v", n.Name, p.PodCIDRs[i], o.node, o.prefix))
			continue
		}
		vteps[p.VTEP], macs[p.MAC] = n.Name, n.Name
		for _, c := range p.PodCIDRs {
			cidrs.add(c, n.Name)
		}
		peers = append(peers, p)
	}
	return peers, errs
}

// claims are pod CIDRs that do not overlap, sorted by their first
// address, so that an overlap is found among a new prefix's two
// neighbours: a thousand nodes' check is a few thousand comparisons.
type claims []claim

type claim struct {
	prefix      netip.Prefix
	first, last netip.Addr
	node        string
}

func newClaim(p netip.Prefix, node string) claim {
	p = p.Masked()
	b := p.Addr().As16()
	hostBits := p.Addr().BitLen() - p.Bits()
	for i := 15; hostBits > 0; i-- {
		n := min(hostBits, 8)
		b[i] |= byte(1<<n - 1)
		hostBits -= n
	}
	last := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		last = last.Unmap()
	}
	return claim{prefix: p, first: p.Addr(), last: last, node: node}
}

// overlap returns the claim that p overlaps, or nil.
func (cs claims) overlap(p netip.Prefix) *claim {
	c := newClaim(p, "")
	i, _ := slices.BinarySearchFunc(cs, c.first, func(o claim, a netip.Addr) int { return o.first.Compare(a) })
	if i < len(cs) && cs[i].first.Compare(c.last) <= 0 {
		return &cs[i]
	}
	if i > 0 && cs[i-1].last.Compare(c.first) >= 0 {
		return &cs[i-1]
	}
	return nil
}

// add claims p, which overlaps no claim.
func (cs *claims) add(p netip.Prefix, node string) {
	c := newClaim(p, node)
	i, _ := slices.BinarySearchFunc(*cs, c.first, func(o claim, a netip.Addr) int { return o.first.Compare(a) })
	*cs = slices.Insert(*cs, i, c)
}
