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
		node("c", "", "", "198.19.3.0/24"),                              // no agent yet: no peer, no error
		node("e", "2001:db8::5", "02:00:00:00:00:05", "198.19.5.0/24"),  // other family
		node("f", "198.18.0.2", "02:00:00:00:00:06", "198.19.6.0/24"),   // b's VTEP
		node("g", "198.18.0.7", "02:00:00:00:00:01", "198.19.7.0/24"),   // a's MAC
		node("h", "198.18.0.8", "02:00:00:00:00:08", "198.19.2.0/24"),   // b's CIDR
		node("i", "198.18.0.9", "01:00:00:00:00:09", "198.19.9.0/24"),   // group MAC
		node("j", "198.18.0.10", "02:00:00:00:00:0a", "198.19.10.1/24"), // host bits
		node("k", "not-an-ip", "02:00:00:00:00:0b", "198.19.11.0/24"),   // bad VTEP
		node("l", "198.18.0.12", "02:00:00:00:00:0c"),                   // no CIDRs yet
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
		"node h: pod CIDR 198.19.2.0/24 is node b's too",
		"node i: annotation softnet.dev/vtep-mac=\"01:00:00:00:00:09\": want a unicast MAC",
		"node j: pod CIDR 198.19.10.1/24 has host bits set",
		"node k: annotation softnet.dev/vtep=\"not-an-ip\": want an IP address",
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
