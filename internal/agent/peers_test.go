package agent

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(name, vtep, mac string, cidrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}, Spec: corev1.NodeSpec{PodCIDRs: cidrs}}
	if vtep != "" {
		n.Annotations[AnnotationVTEP] = vtep
	}
	if mac != "" {
		n.Annotations[AnnotationVTEPMAC] = mac
	}
	return n
}

func TestPeers(t *testing.T) {
	self := Peer{Node: "a", VTEP: netip.MustParseAddr("198.18.0.1"), MAC: [6]byte{2, 0, 0, 0, 0, 1},
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("198.19.1.0/24")}}
	nodes := []*corev1.Node{
		node("d", "198.18.0.4", "02:00:00:00:00:04", "198.19.4.0/24", "2001:db8:4::/64"),
		node("a", "198.18.0.1", "02:00:00:00:00:01", "198.19.1.0/24"),
		node("b", "198.18.0.2", "02:00:00:00:00:02", "198.19.2.0/24", "2001:db8:2::/64"),
		node("c", "", "", "198.19.3.0/24"),                               // no agent yet: no peer, no error
		node("e", "2001:db8::5", "02:00:00:00:00:05", "198.19.5.0/24"),   // other family
		node("f", "198.18.0.2", "02:00:00:00:00:06", "198.19.6.0/24"),    // b's VTEP
		node("g", "198.18.0.7", "02:00:00:00:00:01", "198.19.7.0/24"),    // a's MAC
		node("h", "198.18.0.8", "02:00:00:00:00:08", "198.19.2.0/24"),    // b's CIDR
		node("i", "198.18.0.9", "01:00:00:00:00:09", "198.19.9.0/24"),    // group MAC
		node("j", "198.18.0.10", "02:00:00:00:00:0a", "198.19.10.1/24"),  // host bits
		node("k", "not-an-ip", "02:00:00:00:00:0b", "198.19.11.0/24"),    // bad VTEP
		node("l", "198.18.0.12", "02:00:00:00:00:0c"),                    // no CIDRs yet
		node("m", "198.18.0.13", "02:00:00:00:00:0d", "0.0.0.0/0"),       // everyone's pods
		node("n", "198.18.0.14", "02:00:00:00:00:0e", "198.19.4.128/25"), // inside d's
		node("o", "224.0.0.1", "02:00:00:00:00:0f", "198.19.15.0/24"),    // multicast VTEP
		node("p", "127.0.0.1", "02:00:00:00:00:10", "198.19.16.0/24"),    // loopback VTEP
	}
	peers, errs := Peers(self, nodes)
	var names []string
	for _, p := range peers {
		names = append(names, p.Node)
	}
	if got := strings.Join(names, ","); got != "b,d" {
		t.Errorf("peers %s, want b,d", got)
	}
	if len(peers) == 2 && (peers[0].VTEP != netip.MustParseAddr("198.18.0.2") || peers[0].MAC != [6]byte{2, 0, 0, 0, 0, 2} || len(peers[1].PodCIDRs) != 2) {
		t.Errorf("peers %+v", peers)
	}
	var msgs []string
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	want := []string{
		"node e: VTEP 2001:db8::5 is of another family",
		"node f: VTEP 198.18.0.2 is node b's too",
		"node g: VTEP MAC 02:00:00:00:00:01 is node a's too",
		"node h: pod CIDR 198.19.2.0/24 overlaps node b's 198.19.2.0/24",
		"node i: annotation softnet.dev/vtep-mac=\"01:00:00:00:00:09\": want a unicast MAC",
		"node j: pod CIDR 198.19.10.1/24 has host bits set",
		"node k: annotation softnet.dev/vtep=\"not-an-ip\": want an IP address",
		"node m: pod CIDR 0.0.0.0/0 overlaps node a's 198.19.1.0/24",
		"node n: pod CIDR 198.19.4.128/25 overlaps node d's 198.19.4.0/24",
		"node o: annotation softnet.dev/vtep=\"224.0.0.1\": want a unicast address",
		"node p: annotation softnet.dev/vtep=\"127.0.0.1\": want a unicast address",
	}
	if len(msgs) != len(want) {
		t.Fatalf("errors:\n%s", strings.Join(msgs, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(msgs[i], w) {
			t.Errorf("error %d %q, want %q", i, msgs[i], w)
		}
	}
}

// A node's VTEP MAC is its own, the same after a restart, unicast and
// locally administered.
func TestMAC(t *testing.T) {
	a, b := MAC("node-a"), MAC("node-b")
	if a != MAC("node-a") || a == b {
		t.Errorf("MAC(node-a) %x, again %x, MAC(node-b) %x", a, MAC("node-a"), b)
	}
	for _, m := range [][6]byte{a, b} {
		if m[0]&1 != 0 || m[0]&2 == 0 {
			t.Errorf("%x: not a unicast, locally administered MAC", m)
		}
	}
}

// Kubelet's status updates (heartbeats, conditions) do not wake the
// agent; what it reads does.
func TestRelevant(t *testing.T) {
	n := node("a", "198.18.0.1", "02:00:00:00:00:01", "198.19.1.0/24")
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}}
	heartbeat := n.DeepCopy()
	heartbeat.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if relevant(n, heartbeat) {
		t.Error("a heartbeat is relevant")
	}
	for name, change := range map[string]func(*corev1.Node){
		"vtep":    func(m *corev1.Node) { m.Annotations[AnnotationVTEP] = "198.18.0.9" },
		"mac":     func(m *corev1.Node) { m.Annotations[AnnotationVTEPMAC] = "02:00:00:00:00:09" },
		"cidrs":   func(m *corev1.Node) { m.Spec.PodCIDRs = append(m.Spec.PodCIDRs, "2001:db8:1::/64") },
		"address": func(m *corev1.Node) { m.Status.Addresses[0].Address = "198.18.0.9" },
		"podCIDR": func(m *corev1.Node) { m.Spec.PodCIDR = "198.19.1.0/24" },
	} {
		m := n.DeepCopy()
		change(m)
		if !relevant(n, m) {
			t.Errorf("a change of the %s is not relevant", name)
		}
	}
}
