package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"softnet.dev/internal/agent"
	"softnet.dev/internal/agentstatus"
	"softnet.dev/internal/control"
	"softnet.dev/internal/kubetest"
	"softnet.dev/internal/netnstest"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds softnet (switch and agent), softnet-cni, cnitool and
// host-local once per test binary.
func binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "softnet-agent-bin-"); buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "softnet.dev/cmd/softnet", "softnet.dev/cmd/softnet-cni",
			"github.com/containernetworking/cni/cnitool", "github.com/containernetworking/plugins/plugins/ipam/host-local")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%v: %v\n%s", cmd, err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// cluster is an API server and nodes on one underlay: a namespace with
// a bridge, each node's namespace on it by a veth.
type cluster struct {
	t       testing.TB
	api     *kubetest.Server
	admin   kubernetes.Interface
	kc      string // the agents' kubeconfig: the ServiceAccount of docs/kubernetes.md
	hub     *netnstest.NS
	bin     string
	network string
}

// node is one node: its underlay namespace, switch and agent (each a
// process of its own), its CNI network and its pods.
type node struct {
	c      *cluster
	i      int
	name   string
	ns     *netnstest.NS
	addr   netip.Addr
	dir    string
	socket string
	status string
	netDir string
	sw, ag *exec.Cmd
	swDone chan struct{}
	agDone chan struct{}
	pods   []*netnstest.NS
	podIPs [][2]netip.Addr // IPv4, IPv6 of each pod
	cidrs  []string
}

func newCluster(t testing.TB) *cluster {
	netnstest.RequireTools(t, "ping")
	api := kubetest.Start(t)
	c := &cluster{t: t, api: api, admin: api.Client(t, kubetest.Admin), bin: binaries(t), hub: netnstest.New(t)}
	c.network = fmt.Sprintf("softnet-agent-%d", os.Getpid())
	// The agent's ClusterRole, as docs/kubernetes.md has it: read every
	// Node, patch (its own node's annotations).
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "softnet-agent-test"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}}}}
	if _, err := c.admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "softnet-agent-test"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "kube-system", Name: "softnet"}}}
	if _, err := c.admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.kc = api.Kubeconfig(t, kubetest.Agent)
	c.hubExec("ip", "link", "add", "br0", "type", "bridge")
	c.hubExec("ip", "link", "set", "br0", "up")
	return c
}

func (c *cluster) hubExec(args ...string) {
	c.t.Helper()
	if out, err := c.hub.Exec(args...); err != nil {
		c.t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

func mustExec(t testing.TB, ns *netnstest.NS, args ...string) {
	t.Helper()
	if out, err := ns.Exec(args...); err != nil {
		t.Fatalf("%s: %v: %v\n%s", ns.Name, args, err, out)
	}
}

// addNode makes node i: its namespace on the underlay at
// 198.18.44.(10+i), its Node (pod CIDRs 198.19.i.0/24 and
// 2001:db8:44:i::/64, InternalIP as kubelet would report it), its
// switch, its agent and a pod.
func (c *cluster) addNode(i int) *node {
	t := c.t
	t.Helper()
	n := &node{c: c, i: i, name: fmt.Sprintf("agent-n%d", i), ns: netnstest.New(t), addr: netip.MustParseAddr(fmt.Sprintf("198.18.44.%d", 10+i)), dir: t.TempDir()}
	n.socket, n.status, n.netDir = filepath.Join(n.dir, "softnet.sock"), filepath.Join(n.dir, "agent.json"), filepath.Join(n.dir, "net.d")
	n.cidrs = []string{fmt.Sprintf("198.19.%d.0/24", i), fmt.Sprintf("2001:db8:44:%d::/64", i)}
	under, hubEnd := fmt.Sprintf("ua%d", i), fmt.Sprintf("ub%d", i)
	mustExec(t, n.ns, "ip", "link", "add", under, "type", "veth", "peer", "name", hubEnd, "netns", c.hub.Name)
	mustExec(t, n.ns, "ip", "link", "set", under, "up")
	n.ns.AddAddr(t, under, netip.PrefixFrom(n.addr, 24))
	c.hubExec("ip", "link", "set", hubEnd, "master", "br0", "up")

	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}, Spec: corev1.NodeSpec{PodCIDR: n.cidrs[0], PodCIDRs: n.cidrs}}
	created, err := c.admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.addr.String()}}
	if _, err := c.admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.startSwitch()
	n.startAgent()
	conf := map[string]any{"cniVersion": "1.1.0", "name": c.network, "plugins": []any{map[string]any{
		"type": "softnet-cni", "socket": n.socket, "mode": "tun", "mtu": 1400, "podCIDRsFrom": n.status,
		"ipam": map[string]any{"type": "host-local", "dataDir": filepath.Join(n.dir, "ipam")}}}}
	b, _ := json.Marshal(conf)
	if err := os.MkdirAll(n.netDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.netDir, "net.conflist"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The pod waits for the node's pod CIDRs, as kubelet retries a pod
	// whose network is not ready.
	waitFor(t, "node "+n.name+"'s pod CIDRs in the agent's status", func() error {
		_, err := agentstatus.PodCIDRs(n.status)
		return err
	})
	n.addPod()
	return n
}

func (n *node) startSwitch() {
	n.sw, n.swDone = n.start("switch", "switch", "--control", n.socket, "--state", "")
}

func (n *node) startAgent() {
	n.ag, n.agDone = n.start("agent", "agent", "--kubeconfig", n.c.kc, "--node", n.name, "--socket", n.socket,
		"--underlay-netns", n.ns.Name, "--status", n.status, "--resync", "5s")
}

// start runs softnet with args, its output in the node's directory, and
// stops it (SIGTERM) when the test ends, if it still runs.
func (n *node) start(what string, args ...string) (*exec.Cmd, chan struct{}) {
	t := n.c.t
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(n.dir, what+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(n.c.bin, "softnet"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	t.Cleanup(func() { n.stop(cmd, done) })
	if what == "switch" {
		waitFor(t, "the switch of "+n.name, func() error {
			var v map[string]any
			return control.NewClient(n.socket).Get(context.Background(), "/v1/version", &v)
		})
	}
	return cmd, done
}

// stop stops a process this test started, by its pid: SIGTERM, then
// SIGKILL if it lingers.
func (n *node) stop(cmd *exec.Cmd, done chan struct{}) {
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func (n *node) logs(what string) string {
	b, _ := os.ReadFile(filepath.Join(n.dir, what+".log"))
	s := string(b)
	if len(s) > 4000 {
		s = "..." + s[len(s)-4000:]
	}
	return s
}

// addPod adds a pod through cnitool, as kubelet's runtime would.
func (n *node) addPod() {
	t := n.c.t
	t.Helper()
	pod := netnstest.New(t)
	cmd := exec.Command(filepath.Join(n.c.bin, "cnitool"), "add", n.c.network, "/var/run/netns/"+pod.Name)
	cmd.Env = append(os.Environ(), "CNI_PATH="+n.c.bin, "NETCONFPATH="+n.netDir, "CNI_IFNAME=eth0")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("cnitool add: %v\n%s%s", err, out, stderr)
	}
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("ADD result %q: %v", out, err)
	}
	var ips [2]netip.Addr
	for _, ip := range res.IPs {
		p := netip.MustParsePrefix(ip.Address)
		if p.Addr().Is4() {
			ips[0] = p.Addr()
		} else {
			ips[1] = p.Addr()
		}
	}
	if !ips[0].IsValid() || !ips[1].IsValid() {
		t.Fatalf("pod addresses %v: want IPv4 and IPv6", res.IPs)
	}
	t.Cleanup(func() {
		cmd := exec.Command(filepath.Join(n.c.bin, "cnitool"), "del", n.c.network, "/var/run/netns/"+pod.Name)
		cmd.Env = append(os.Environ(), "CNI_PATH="+n.c.bin, "NETCONFPATH="+n.netDir, "CNI_IFNAME=eth0")
		_ = cmd.Run() // the switch may be gone; the namespace goes anyway
	})
	n.pods, n.podIPs = append(n.pods, pod), append(n.podIPs, ips)
}

// agentRoutes returns the node's switch's routes of origin agent, as
// "PREFIX via VTEP", sorted.
func (n *node) agentRoutes() ([]string, error) {
	var rs []control.Route
	if err := control.NewClient(n.socket).Get(context.Background(), "/v1/routes", &rs); err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rs {
		if r.Origin == "agent" {
			out = append(out, r.Prefix+" via "+r.Via)
		}
	}
	slices.Sort(out)
	return out, nil
}

// wantRoutes waits until every node of nodes routes to every other's
// pod CIDRs via its VTEP, and to nothing else.
func wantRoutes(t *testing.T, nodes []*node) {
	t.Helper()
	for _, n := range nodes {
		var want []string
		for _, o := range nodes {
			if o != n {
				for _, c := range o.cidrs {
					want = append(want, c+" via "+o.addr.String())
				}
			}
		}
		slices.Sort(want)
		waitFor(t, "the routes of "+n.name, func() error {
			got, err := n.agentRoutes()
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("routes %q, want %q\nagent:\n%s", got, want, n.logs("agent"))
			}
			return nil
		})
	}
}

// wantReach checks that every pod of nodes reaches every other's, both
// families.
func wantReach(t *testing.T, nodes []*node) {
	t.Helper()
	for _, a := range nodes {
		for _, b := range nodes {
			if a == b {
				continue
			}
			for f := range 2 {
				ping(t, a.pods[0], b.podIPs[0][f])
			}
		}
	}
}

// ping sends echo requests until one is answered, for a few seconds at
// most (the first may wait for a neighbour).
func ping(t *testing.T, from *netnstest.NS, to netip.Addr) {
	t.Helper()
	if out, err := from.Exec("ping", "-c", "1", "-w", "5", "-W", "1", to.String()); err != nil {
		t.Fatalf("ping %s from %s: %v\n%s", to, from.Name, err, out)
	}
}

// waitFor polls check until it succeeds, failing the test with its last
// error after a minute: a bound for a loaded machine, not a goal.
func waitFor(t testing.TB, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pinger pings to from a pod all along, and says how many were lost.
type pinger struct {
	cmd  *exec.Cmd
	out  strings.Builder
	done chan struct{}
}

func startPinger(t *testing.T, from *netnstest.NS, to netip.Addr) *pinger {
	p := &pinger{done: make(chan struct{})}
	p.cmd = exec.Command("ip", "netns", "exec", from.Name, "ping", "-i", "0.1", "-W", "1", to.String())
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop() })
	return p
}

// stop ends the pings and returns ping's summary line and the echo
// requests sent and answered.
func (p *pinger) stop() (summary string, sent, received int) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		<-p.done
	}
	for _, line := range strings.Split(p.out.String(), "\n") {
		if strings.Contains(line, "packets transmitted") {
			summary = line
			fmt.Sscanf(line, "%d packets transmitted, %d received", &sent, &received)
		}
	}
	return summary, sent, received
}

// The cluster network across nodes, from the Kubernetes API: three
// nodes, each a namespace with its own switch and agent, get each
// other's routes and their pods reach each other over IPv4 and IPv6; a
// fourth joins live; a Node deleted takes its routes with it; a node's
// address changes and the traffic follows; the API server, then etcd,
// go away and the pods' traffic goes on, and the agents find their way
// back; an agent restarted affects no pod.
func TestAgentCluster(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	nodes := []*node{c.addNode(1), c.addNode(2), c.addNode(3)}
	wantRoutes(t, nodes)
	wantReach(t, nodes)
	for _, n := range nodes {
		node, err := c.admin.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mac := agent.MAC(n.name)
		if node.Annotations[agent.AnnotationVTEP] != n.addr.String() || node.Annotations[agent.AnnotationVTEPMAC] != net.HardwareAddr(mac[:]).String() {
			t.Errorf("node %s's annotations %v", n.name, node.Annotations)
		}
	}

	t.Run("join", func(t *testing.T) {
		nodes = append(nodes, c.addNode(4))
		wantRoutes(t, nodes)
		wantReach(t, nodes)
	})

	t.Run("delete", func(t *testing.T) {
		gone := nodes[3]
		gone.stop(gone.ag, gone.agDone)
		if err := c.admin.CoreV1().Nodes().Delete(ctx, gone.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		nodes = nodes[:3]
		wantRoutes(t, nodes)
		wantReach(t, nodes)
	})

	t.Run("address", func(t *testing.T) {
		n := nodes[1]
		moved := netip.MustParseAddr("198.18.44.22")
		// The new address stays when the old one, the primary, goes.
		mustExec(t, n.ns, "sysctl", "-qw", fmt.Sprintf("net.ipv4.conf.ua%d.promote_secondaries=1", n.i))
		n.ns.AddAddr(t, fmt.Sprintf("ua%d", n.i), netip.PrefixFrom(moved, 24))
		node, err := c.admin.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: moved.String()}}
		if _, err := c.admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		old := n.addr
		n.addr = moved
		wantRoutes(t, nodes)
		// The old address goes: the traffic follows the new one.
		mustExec(t, n.ns, "ip", "addr", "del", netip.PrefixFrom(old, 24).String(), "dev", fmt.Sprintf("ua%d", n.i))
		wantReach(t, nodes)
	})

	t.Run("faults", func(t *testing.T) {
		p := startPinger(t, nodes[0].pods[0], nodes[2].podIPs[0][0])
		ping(t, nodes[0].pods[0], nodes[2].podIPs[0][1])
		c.api.StopAPIServer(t)
		waitFor(t, "the agents to see the API server gone", func() error {
			for _, n := range nodes {
				if st, err := agentstatus.Read(n.status); err != nil || st.APIReachable {
					return fmt.Errorf("node %s: status %+v, %v", n.name, st, err)
				}
			}
			return nil
		})
		wantReach(t, nodes)
		c.api.StopEtcd(t)
		wantReach(t, nodes)
		c.api.StartEtcd(t)
		c.api.StartAPIServer(t)
		// The agents list again by themselves: a node that joins now is
		// routed to by all.
		extra := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "agent-n9", Annotations: map[string]string{
			agent.AnnotationVTEP: "198.18.44.99", agent.AnnotationVTEPMAC: "02:00:00:00:44:99"}},
			Spec: corev1.NodeSpec{PodCIDRs: []string{"198.19.9.0/24"}}}
		waitFor(t, "the API server to take a Node", func() error {
			_, err := c.admin.CoreV1().Nodes().Create(ctx, extra, metav1.CreateOptions{})
			return err
		})
		for _, n := range nodes {
			waitFor(t, n.name+"'s route to a node that joined after the faults", func() error {
				got, err := n.agentRoutes()
				if err == nil && !slices.Contains(got, "198.19.9.0/24 via 198.18.44.99") {
					err = fmt.Errorf("routes %q\nagent:\n%s", got, n.logs("agent"))
				}
				return err
			})
			if st, err := agentstatus.Read(n.status); err != nil || !st.APIReachable || st.Error != "" {
				t.Errorf("node %s: status %+v, %v", n.name, st, err)
			}
		}
		if err := c.admin.CoreV1().Nodes().Delete(ctx, extra.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		wantRoutes(t, nodes)
		summary, sent, received := p.stop()
		// Every echo request was answered but those in flight when ping
		// was stopped.
		if sent == 0 || received < sent-1 {
			t.Errorf("pings across the faults: %s", summary)
		}
	})

	t.Run("restart", func(t *testing.T) {
		n := nodes[0]
		before, err := n.agentRoutes()
		if err != nil {
			t.Fatal(err)
		}
		p := startPinger(t, nodes[2].pods[0], n.podIPs[0][0])
		n.stop(n.ag, n.agDone)
		wantReach(t, nodes)
		n.startAgent()
		waitFor(t, "the agent restarted to sync", func() error {
			st, err := agentstatus.Read(n.status)
			if err == nil && (st.PID != n.ag.Process.Pid || st.Synced.IsZero() || st.Error != "") {
				err = fmt.Errorf("status %+v", st)
			}
			return err
		})
		after, err := n.agentRoutes()
		if err != nil || !slices.Equal(before, after) {
			t.Errorf("routes before the restart %q, after %q (%v)", before, after, err)
		}
		wantReach(t, nodes)
		if summary, sent, received := p.stop(); sent == 0 || received < sent-1 {
			t.Errorf("pings across the agent's restart: %s", summary)
		}
		if logs := n.logs("agent"); strings.Count(logs, "agent: port added") != 1 {
			t.Errorf("the restarted agent added its port again:\n%s", logs)
		}
	})
}

// BenchmarkAgentScale measures one agent on a cluster of 1,000 Nodes
// (999 simulated: pod CIDRs and annotations, no datapath): the time from
// its start to its switch's 1,998 routes (IPv4 and IPv6 per node), the
// time for one node's VTEP change to reach the switch, and the agent's
// and the switch's resident memory then. Run it once:
// go test -run '^$' -bench AgentScale -benchtime 1x ./internal/agent.
func BenchmarkAgentScale(b *testing.B) {
	const nodes = 1000
	c := newCluster(b)
	ctx := context.Background()
	n := c.addNode(1)
	n.stop(n.ag, n.agDone)
	cfg := c.api.Config(b, kubetest.Admin)
	cfg.QPS, cfg.Burst = 1000, 1000 // the test's creates, not the agent's
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	sim := func(i int) (string, string) {
		return fmt.Sprintf("agent-sim%d", i), netip.AddrFrom4([4]byte{198, 18, 100 + byte(i/250), byte(i%250 + 1)}).String()
	}
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < nodes-1; i += 8 {
				name, vtep := sim(i)
				mac := agent.MAC(name)
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
					agent.AnnotationVTEP: vtep, agent.AnnotationVTEPMAC: net.HardwareAddr(mac[:]).String()}},
					Spec: corev1.NodeSpec{PodCIDRs: []string{
						netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, 128 + byte(i/8), byte(i%8) * 32}), 27).String(),
						netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0x45, byte(i >> 8), byte(i)}), 64).String()}}}
				if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	count := func() (int, error) {
		rs, err := n.agentRoutes()
		return len(rs), err
	}
	b.ResetTimer()
	start := time.Now()
	n.startAgent()
	waitFor(b, "1,998 routes", func() error {
		if got, err := count(); err != nil || got != 2*(nodes-1) {
			return fmt.Errorf("%d routes, %v\nagent:\n%s", got, err, n.logs("agent"))
		}
		return nil
	})
	converge := time.Since(start)
	name, _ := sim(500)
	moved := "198.18.99.1"
	start = time.Now()
	patch := fmt.Sprintf(`{"metadata": {"annotations": {%q: %q}}}`, agent.AnnotationVTEP, moved)
	if _, err := c.admin.CoreV1().Nodes().Patch(ctx, name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, "the moved node's routes", func() error {
		rs, err := n.agentRoutes()
		if err == nil && !slices.ContainsFunc(rs, func(r string) bool { return strings.HasSuffix(r, " via "+moved) }) {
			err = fmt.Errorf("no route via %s", moved)
		}
		return err
	})
	change := time.Since(start)
	b.StopTimer()
	b.ReportMetric(converge.Seconds(), "s-converge")
	b.ReportMetric(change.Seconds(), "s-change")
	b.ReportMetric(float64(rss(b, n.ag.Process.Pid))/(1<<20), "MiB-agent")
	b.ReportMetric(float64(rss(b, n.sw.Process.Pid))/(1<<20), "MiB-switch")
}

// rss is a process's resident memory in bytes.
func rss(tb testing.TB, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}
