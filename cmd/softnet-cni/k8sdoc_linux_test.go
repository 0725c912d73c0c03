package main

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"softnet.dev/internal/docblock"
	"softnet.dev/internal/netnstest"
)

// k8sPage is the page whose tested steps TestNodeSetupFromDocs runs.
const k8sPage = "../../docs/kubernetes.md"

// k8sBlock is the page's block after <!-- k8s-test: NAME -->.
func k8sBlock(t *testing.T, name string) string {
	t.Helper()
	lines, err := docblock.Read(k8sPage, "k8s-test: "+name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestNodeSetupFromDocs runs docs/kubernetes.md's tested steps as they
// are written there. A namespace plays the node, with an uplink to
// another that plays the rest of the network, which has no route to the
// pods. The switch starts with the page's switch.conf (node0 in the
// node's namespace, as the switch's own namespace would be);
// write-conflist.sh writes the conflist for an IPv4 and an IPv6 pod
// CIDR, and cnitool ADDs a pod with it. Before node-setup.sh runs in the
// node's namespace the pod reaches neither the node nor past it; after
// it (twice: it may run again), it reaches both, over IPv4 and IPv6: the
// host past the node answers the node's address, as masquerading makes
// it.
func TestNodeSetupFromDocs(t *testing.T) {
	netnstest.RequireTools(t, "ping", "sysctl", "iptables", "ip6tables")
	conflistScript, switchConf, setupScript := k8sBlock(t, "write-conflist.sh"), k8sBlock(t, "switch.conf"), k8sBlock(t, "node-setup.sh")

	nodeNS, world := netnstest.New(t), netnstest.New(t)
	if out, err := nodeNS.Exec("ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1", "netns", world.Name); err != nil {
		t.Fatalf("uplink: %v: %s", err, out)
	}
	for i, ns := range []*netnstest.NS{nodeNS, world} {
		dev := []string{"up0", "up1"}[i]
		if out, err := ns.Exec("ip", "link", "set", dev, "up"); err != nil {
			t.Fatalf("%s up: %v: %s", dev, err, out)
		}
		ns.AddAddr(t, dev, netip.MustParsePrefix([]string{"198.18.40.1/24", "198.18.40.2/24"}[i]))
		ns.AddAddr(t, dev, netip.MustParsePrefix([]string{"2001:db8:40::1/64", "2001:db8:40::2/64"}[i]))
	}

	// The page's switch.conf, its node0 in the node's namespace.
	if !strings.Contains(switchConf, "port tun:node0\n") {
		t.Fatalf("the page's switch.conf has no line \"port tun:node0\":\n%s", switchConf)
	}
	conf := strings.Replace(switchConf, "port tun:node0\n", "port tun:node0,netns="+nodeNS.Name+"\n", 1)
	cidrs := []string{"198.18.41.0/24", "2001:db8:41::/64"}
	n := newNodeWith(t, "tun", conf, cidrs...)

	// The page's conflist, with the test's socket, IPAM directory and a
	// network name of its own (cnitool caches results by name).
	dir := t.TempDir()
	if out, err := runSh(conflistScript, append([]string{dir}, cidrs...)...); err != nil {
		t.Fatalf("write-conflist.sh: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "10-softnet.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		CNIVersion string           `json:"cniVersion"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(b, &list); err != nil || len(list.Plugins) != 1 {
		t.Fatalf("write-conflist.sh wrote %s: %v", b, err)
	}
	plugin := list.Plugins[0]
	ipam, _ := plugin["ipam"].(map[string]any)
	wantRanges := []any{[]any{map[string]any{"subnet": cidrs[0]}}, []any{map[string]any{"subnet": cidrs[1]}}}
	if plugin["type"] != "softnet-cni" || plugin["socket"] != "/run/softnet/softnet.sock" || ipam == nil || !reflect.DeepEqual(ipam["ranges"], wantRanges) {
		t.Fatalf("write-conflist.sh wrote %s: want softnet-cni on /run/softnet/softnet.sock with a host-local range per CIDR", b)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 1 {
		t.Errorf("write-conflist.sh left %v", names)
	}
	plugin["socket"], ipam["dataDir"] = n.socket, n.ipamDir
	n.conf = plugin
	n.writeConf(list.CNIVersion)

	pod := netnstest.New(t)
	n.add(pod, "eth0")
	node := []net.IP{net.ParseIP("198.18.41.1"), net.ParseIP("2001:db8:41::1")}
	past := []net.IP{net.ParseIP("198.18.40.2"), net.ParseIP("2001:db8:40::2")}
	for _, to := range append(node, past...) {
		if out, err := pod.Exec("ping", "-c", "1", "-W", "2", to.String()); err == nil {
			t.Fatalf("the pod reaches %s before node-setup.sh:\n%s", to, out)
		}
	}
	for range 2 {
		if out, err := nodeNS.Exec(append([]string{"sh", "-ec", setupScript, "node-setup.sh"}, cidrs...)...); err != nil {
			t.Fatalf("node-setup.sh in the node's namespace: %v\n%s", err, out)
		}
		for _, to := range append(node, past...) {
			ping(t, pod, to)
		}
	}
	// The rules were added once, not again.
	for _, nat := range []string{"iptables", "ip6tables"} {
		out, err := nodeNS.Exec(nat, "-t", "nat", "-S", "POSTROUTING")
		if err != nil || strings.Count(out, "MASQUERADE") != 1 {
			t.Errorf("%s in the node's namespace: %v\n%s", nat, err, out)
		}
	}
	n.mustRun("del", pod, "eth0")
	n.wantEmpty()
}

// runSh runs script with sh -e and args as $1...
func runSh(script string, args ...string) (string, error) {
	out, err := exec.Command("sh", append([]string{"-ec", script, "sh"}, args...)...).CombinedOutput()
	return string(out), err
}
