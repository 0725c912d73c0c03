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
	cidrs := map[netip.Prefix]string{}
	for _, p := range self.PodCIDRs {
		cidrs[p] = self.Node
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
		if i := slices.IndexFunc(p.PodCIDRs, func(c netip.Prefix) bool { return cidrs[c] != "" }); i >= 0 {
			errs = append(errs, fmt.Errorf("node %s: pod CIDR %v is node %s's too", n.Name, p.PodCIDRs[i], cidrs[p.PodCIDRs[i]]))
			continue
		}
		vteps[p.VTEP], macs[p.MAC] = n.Name, n.Name
		for _, c := range p.PodCIDRs {
			cidrs[c] = n.Name
		}
		peers = append(peers, p)
	}
	return peers, errs
}
