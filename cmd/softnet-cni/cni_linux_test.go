package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"softnet.dev/internal/control"
	"softnet.dev/internal/netnstest"
	"softnet.dev/internal/vswitch"
)

// The binaries a runtime runs: the plugin, the reference IPAM plugin
// and the reference runtime, built once per test binary; with -cni.compare
// also softnet itself and the reference bridge plugin.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error

	compare = flag.Bool("cni.compare", false, "TestNodeOf110Pods runs the switch as its own process, logs its RSS, and times the reference bridge plugin on the same pods")
	restart = flag.Bool("cni.restart", false, "TestNodeOf110Pods runs the switch as its own process with a state file, restarts it keeping the pods while each pings another every 10 ms, and logs each pod's forwarding gap")
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "softnet-cni-bin-"); buildErr != nil {
			return
		}
		pkgs := []string{"softnet.dev/cmd/softnet-cni", "github.com/containernetworking/cni/cnitool", "github.com/containernetworking/plugins/plugins/ipam/host-local"}
		if *compare {
			pkgs = append(pkgs, "github.com/containernetworking/plugins/plugins/main/bridge")
		}
		if *compare || *restart {
			pkgs = append(pkgs, "softnet.dev/cmd/softnet")
		}
		cmd := exec.Command("go", append([]string{"build", "-o", binDir + "/"}, pkgs...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%v: %v\n%s", cmd, err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// node is a softnet switch with its control API on a socket of the
// test's, a network configuration for it in NETCONFPATH and host-local
// leases in a directory of the test's.
type node struct {
	t       *testing.T
	bin     string
	network string // unique: cnitool caches results under /var/lib/cni by network name
	socket  string
	netDir  string
	ipamDir string
	conf    map[string]any // the plugin's configuration
	cniArgs string         // CNI_ARGS for cnitool, as a runtime sets them
	capArgs string         // cnitool's CAP_ARGS: the runtime's capability arguments

	// switchConf is what the switch starts with, in the lines of
	// `softnet switch --config` (port SPEC, route SPEC); startedWith
	// its ports and routes as the control API lists them.
	switchConf  string
	startedWith []string

	sw      *vswitch.Switch
	srv     *control.Server
	served  chan error
	proc    *exec.Cmd     // the switch as its own process (-cni.compare), or nil
	procOut *bytes.Buffer // its output
	stopped bool
}

func newNode(t *testing.T, mode string, ranges ...string) *node {
	t.Helper()
	return newNodeWith(t, mode, "", ranges...)
}

// newNodeWith is newNode whose switch starts with the ports and routes
// of switchConf, lines as `softnet switch --config` reads them: a node's
// overlay port to the other nodes, say.
func newNodeWith(t *testing.T, mode, switchConf string, ranges ...string) *node {
	t.Helper()
	netnstest.RequireRoot(t)
	dir := t.TempDir()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	n := &node{t: t, bin: binaries(t), network: "softnet-test-" + hex.EncodeToString(rnd[:]), switchConf: switchConf,
		socket: filepath.Join(dir, "softnet.sock"), netDir: filepath.Join(dir, "net.d"), ipamDir: filepath.Join(dir, "ipam")}
	var rs []any
	for _, r := range ranges {
		rs = append(rs, []any{map[string]any{"subnet": r}})
	}
	n.conf = map[string]any{"type": "softnet-cni", "socket": n.socket, "mode": mode, "mtu": 1400,
		"unknownKey": "ignored, as the spec says",
		"ipam":       map[string]any{"type": "host-local", "dataDir": n.ipamDir, "ranges": rs}}
	n.writeConf("1.1.0")
	t.Cleanup(func() {
		// What cnitool cached of this network, should a test fail
		// before its DEL.
		left, _ := filepath.Glob(filepath.Join(libcni.CacheDir, "results", n.network+"-*"))
		for _, f := range left {
			os.Remove(f)
		}
	})
	n.start()
	ports, routes, _ := n.state()
	n.startedWith = described(ports, routes)
	return n
}

// writeConf writes the network's conflist with cniVersion v.
func (n *node) writeConf(v string) {
	n.t.Helper()
	list := map[string]any{"cniVersion": v, "name": n.network, "plugins": []any{n.conf}}
	b, err := json.Marshal(list)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := os.MkdirAll(n.netDir, 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.netDir, "net.conflist"), b, 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// stdin is the plugin's configuration as a runtime hands it over.
func (n *node) stdin(v string, extra map[string]any) []byte {
	c := map[string]any{"cniVersion": v, "name": n.network}
	for k, x := range n.conf {
		c[k] = x
	}
	for k, x := range extra {
		c[k] = x
	}
	b, err := json.Marshal(c)
	if err != nil {
		n.t.Fatal(err)
	}
	return b
}

// start opens a switch with the ports and routes of switchConf; with
// none it takes ports of either kind.
func (n *node) start() {
	t := n.t
	cfg, err := vswitch.ParseConfig("switch.conf", strings.NewReader(n.switchConf))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := vswitch.Open(cfg, vswitch.Tuning{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Start(); err != nil {
		t.Fatal(err)
	}
	ln, err := control.Listen(n.socket, -1)
	if err != nil {
		t.Fatal(err)
	}
	n.sw, n.srv, n.served = sw, control.NewServer(sw, slog.New(slog.DiscardHandler)), make(chan error, 1)
	go func() { n.served <- n.srv.Serve(ln) }()
	t.Cleanup(n.stop)
}

// startProcess replaces the in-process switch by `softnet switch` run
// as a process of its own, whose memory can be told apart.
func (n *node) startProcess(more ...string) {
	t := n.t
	t.Helper()
	n.stop()
	n.stopped = false
	n.procOut = &bytes.Buffer{}
	args := append([]string{"switch", "--control", n.socket}, more...)
	if n.switchConf != "" {
		conf := filepath.Join(t.TempDir(), "switch.conf")
		if err := os.WriteFile(conf, []byte(n.switchConf), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", conf)
	}
	n.proc = exec.Command(filepath.Join(n.bin, "softnet"), args...)
	n.proc.Stdout, n.proc.Stderr = n.procOut, n.procOut
	if err := n.proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	c := control.NewClient(n.socket)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var ps []control.Port
		if err := c.Get(context.Background(), "/v1/ports", &ps); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("softnet switch never answered: %v\n%s", err, n.procOut)
		}
	}
}

// memory returns the switch process's resident and peak resident set
// (VmRSS, VmHWM) in KiB.
func (n *node) memory() (rss, peak int) {
	n.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.proc.Process.Pid))
	if err != nil {
		n.t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			fmt.Sscan(f[1], &rss)
		} else if len(f) == 3 && f[0] == "VmHWM:" {
			fmt.Sscan(f[1], &peak)
		}
	}
	return rss, peak
}

// stop stops the switch as softnet switch does and checks that every
// buffer came home.
func (n *node) stop() {
	if n.stopped {
		return
	}
	n.stopped = true
	if n.proc != nil {
		_ = n.proc.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- n.proc.Wait() }()
		select {
		case err := <-done:
			if err != nil || !strings.Contains(n.procOut.String(), "leak check: ok") {
				n.t.Errorf("softnet switch: %v\n%s", err, n.procOut)
			}
		case <-time.After(20 * time.Second):
			_ = n.proc.Process.Kill()
			<-done
			n.t.Errorf("softnet switch did not stop in 20 s\n%s", n.procOut)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.srv.Shutdown(ctx); err != nil {
		n.t.Errorf("shutdown: %v", err)
	}
	if err := <-n.served; err != nil {
		n.t.Errorf("serve: %v", err)
	}
	rep, err := n.sw.Close()
	if err != nil {
		n.t.Errorf("close: %v", err)
	}
	if rep == nil || rep.Leak != "ok" {
		n.t.Errorf("leak check: %v", rep)
	}
}

// cnitool runs the reference runtime: cnitool CMD NETWORK NETNS.
func (n *node) cnitool(cmd, netns, ifname string) (string, error) {
	return n.cnitoolIn(nil, n.network, cmd, netns, ifname)
}

// cnitoolIn runs cnitool for network inside the namespace in (nil: the
// test's own), with CNI_ARGS n.cniArgs.
func (n *node) cnitoolIn(in *netnstest.NS, network, cmd, netns, ifname string) (string, error) {
	args := []string{filepath.Join(n.bin, "cnitool"), cmd, network, netns}
	if in != nil {
		args = append([]string{"ip", "netns", "exec", in.Name}, args...)
	}
	c := exec.Command(args[0], args[1:]...)
	c.Env = append(os.Environ(), "CNI_PATH="+n.bin, "NETCONFPATH="+n.netDir, "CNI_IFNAME="+ifname)
	if n.cniArgs != "" {
		c.Env = append(c.Env, "CNI_ARGS="+n.cniArgs)
	}
	if n.capArgs != "" {
		c.Env = append(c.Env, "CAP_ARGS="+n.capArgs)
	}
	var out, stderr bytes.Buffer
	c.Stdout, c.Stderr = &out, &stderr
	err := c.Run()
	if err != nil {
		err = fmt.Errorf("cnitool %s %s: %w: %s%s", cmd, netns, err, out.String(), stderr.String())
	}
	return out.String(), err
}

// add attaches ns's eth0 through cnitool and returns the result.
func (n *node) add(ns *netnstest.NS, ifname string) *current.Result {
	n.t.Helper()
	out, err := n.cnitool("add", nsPath(ns), ifname)
	if err != nil {
		n.t.Fatal(err)
	}
	res := &current.Result{}
	if err := json.Unmarshal([]byte(out), res); err != nil {
		n.t.Fatalf("ADD result %q: %v", out, err)
	}
	return res
}

func (n *node) mustRun(cmd string, ns *netnstest.NS, ifname string) {
	n.t.Helper()
	if _, err := n.cnitool(cmd, nsPath(ns), ifname); err != nil {
		n.t.Fatal(err)
	}
}

func nsPath(ns *netnstest.NS) string { return "/var/run/netns/" + ns.Name }

// cnitoolID is the container ID cnitool gives a namespace.
func cnitoolID(netns string) string {
	s := sha512.Sum512([]byte(netns))
	return fmt.Sprintf("cnitool-%x", s[:10])
}

// state is what the switch and host-local hold.
func (n *node) state() (ports []control.Port, routes []control.Route, leases []string) {
	n.t.Helper()
	c := control.NewClient(n.socket)
	if err := c.Get(context.Background(), "/v1/ports", &ports); err != nil {
		n.t.Fatal(err)
	}
	if err := c.Get(context.Background(), "/v1/routes", &routes); err != nil {
		n.t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(n.ipamDir, n.network, "*"))
	for _, f := range files {
		if b := filepath.Base(f); b != "lock" && !strings.HasPrefix(b, "last_reserved_ip") {
			leases = append(leases, b)
		}
	}
	return ports, routes, leases
}

// portOf returns the switch's port of the attachment, if it has one.
func (n *node) portOf(ns *netnstest.NS, ifname string) (control.Port, bool) {
	ports, _, _ := n.state()
	name := portName(n.network, cnitoolID(nsPath(ns)), ifname)
	i := slices.IndexFunc(ports, func(p control.Port) bool { return p.Name == name })
	if i < 0 {
		return control.Port{}, false
	}
	return ports[i], true
}

// wantEmpty checks that the switch has only the ports and routes it
// started with and host-local no lease.
func (n *node) wantEmpty() {
	n.t.Helper()
	ports, routes, leases := n.state()
	if now := described(ports, routes); !slices.Equal(now, n.startedWith) || len(leases) != 0 {
		n.t.Errorf("left behind: %v, leases %v; the switch started with %v", now, leases, n.startedWith)
	}
}

// described lists ports by name and spec and routes as the
// configuration writes them, sorted.
func described(ports []control.Port, routes []control.Route) []string {
	var d []string
	for _, p := range ports {
		d = append(d, "port "+p.Spec)
	}
	for _, r := range routes {
		rt := "route " + r.Prefix + "=" + r.Port
		if r.Via != "" {
			rt += ",via=" + r.Via
		}
		d = append(d, rt)
	}
	slices.Sort(d)
	return d
}

func hasLink(t *testing.T, ns *netnstest.NS, ifname string) bool {
	t.Helper()
	_, err := ns.Exec("ip", "link", "show", ifname)
	return err == nil
}

func ping(t *testing.T, from *netnstest.NS, to net.IP) {
	t.Helper()
	if out, err := from.Exec("ping", "-c", "2", "-i", "0.2", "-W", "2", to.String()); err != nil {
		t.Fatalf("ping %s from %s: %v\n%s", to, from.Name, err, out)
	}
}

// transfer sends size bytes over TCP from one namespace to a listener
// in another and checks that they arrive whole.
func transfer(t *testing.T, from, to *netnstest.NS, addr net.IP, size int) {
	t.Helper()
	var ln net.Listener
	if err := to.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(addr.String(), "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan [32]byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- [32]byte{}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		h := sha256.New()
		_, _ = io.Copy(h, c)
		got <- [32]byte(h.Sum(nil))
	}()
	data := make([]byte, size)
	_, _ = rand.Read(data)
	var c net.Conn
	if err := from.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(data); err != nil {
		t.Fatalf("TCP to %s: %v", ln.Addr(), err)
	}
	c.Close()
	select {
	case sum := <-got:
		if sum != sha256.Sum256(data) {
			t.Fatalf("TCP to %s: %d bytes arrived changed or short", ln.Addr(), size)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("TCP to %s: no end after 30 s", ln.Addr())
	}
}

// ipOf returns the result's address of the family.
func ipOf(t *testing.T, res *current.Result, v4 bool) net.IP {
	t.Helper()
	for _, ip := range res.IPs {
		if (ip.Address.IP.To4() != nil) == v4 {
			return ip.Address.IP
		}
	}
	t.Fatalf("no IPv4=%v address in %v", v4, res)
	return nil
}

// A runtime's whole life of two pods on one node: ADD (result as the
// spec says), traffic between them, CHECK (and CHECK failing once the
// pod's address is gone), GC keeping only the valid attachment, DEL
// twice, STATUS; nothing is left behind.
func TestLifecycle(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	n := newNode(t, "tun", "198.18.4.0/24", "2001:db8:4::/64")
	a, b := netnstest.New(t), netnstest.New(t)
	ra, rb := n.add(a, "eth0"), n.add(b, "eth0")

	if len(ra.Interfaces) != 1 || ra.Interfaces[0].Name != "eth0" || ra.Interfaces[0].Sandbox != nsPath(a) || ra.Interfaces[0].Mtu != 1400 {
		t.Errorf("interfaces: %v", ra.Interfaces)
	}
	if len(ra.IPs) != 2 || ra.IPs[0].Interface == nil || *ra.IPs[0].Interface != 0 || len(ra.Routes) != 2 {
		t.Errorf("ips %v routes %v", ra.IPs, ra.Routes)
	}
	if out, err := a.Exec("ip", "-o", "link", "show", "eth0"); err != nil || !strings.Contains(out, "mtu 1400") {
		t.Errorf("eth0 in %s: %v %s", a.Name, err, out)
	}
	for _, v4 := range []bool{true, false} {
		ping(t, a, ipOf(t, rb, v4))
		ping(t, b, ipOf(t, ra, v4))
	}
	transfer(t, a, b, ipOf(t, rb, true), 4<<20)
	transfer(t, b, a, ipOf(t, ra, false), 4<<20)

	// The node's own namespace on a port of its own, with the default
	// routes, as docs/kubernetes.md sets it up: pods reach the node
	// (and what it routes) through their default route.
	host := netnstest.New(t)
	c := control.NewClient(n.socket)
	ctx := context.Background()
	if err := c.Post(ctx, "/v1/ports", control.PortRequest{Spec: "tun:node0,netns=" + host.Name}, nil); err != nil {
		t.Fatal(err)
	}
	for _, pfx := range []string{"0.0.0.0/0", "::/0"} {
		if err := c.Post(ctx, "/v1/routes", control.Route{Prefix: pfx, Port: "node0"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	host.AddAddr(t, "node0", netip.MustParsePrefix("198.18.0.1/32"))
	host.AddAddr(t, "node0", netip.MustParsePrefix("2001:db8::1/128"))
	for _, r := range []string{"198.18.4.0/24", "2001:db8:4::/64"} {
		if out, err := host.Exec("ip", "route", "add", r, "dev", "node0"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	ping(t, a, net.ParseIP("198.18.0.1"))
	ping(t, b, net.ParseIP("2001:db8::1"))
	ping(t, host, ipOf(t, ra, true))
	if err := c.Delete(ctx, "/v1/ports/node0"); err != nil {
		t.Fatal(err)
	}

	n.mustRun("check", a, "eth0")
	n.mustRun("check", b, "eth0")
	if out, err := a.Exec("ip", "-6", "route", "del", "default", "dev", "eth0"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if _, err := n.cnitool("check", nsPath(a), "eth0"); err == nil || !strings.Contains(err.Error(), "route ::/0 is missing") {
		t.Errorf("CHECK with the default route gone: %v", err)
	}
	if out, err := a.Exec("ip", "addr", "del", ra.IPs[0].Address.String(), "dev", "eth0"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if _, err := n.cnitool("check", nsPath(a), "eth0"); err == nil || !strings.Contains(err.Error(), "is missing") {
		t.Errorf("CHECK with the address gone: %v", err)
	}

	if _, err := n.cnitool("status", nsPath(a), "eth0"); err != nil {
		t.Errorf("STATUS: %v", err)
	}

	// GC as a runtime that knows only b's attachment: a's port and
	// lease go. (A cache of its own, so that libcni does not DEL what
	// cnitool cached.)
	cni := libcni.NewCNIConfigWithCacheDir([]string{n.bin}, t.TempDir(), nil)
	list, err := libcni.ConfListFromFile(filepath.Join(n.netDir, "net.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	keep := types.GCAttachment{ContainerID: cnitoolID(nsPath(b)), IfName: "eth0"}
	if err := cni.GCNetworkList(context.Background(), list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{keep}}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if _, ok := n.portOf(a, "eth0"); ok || hasLink(t, a, "eth0") {
		t.Errorf("GC left a's port or device")
	}
	if _, ok := n.portOf(b, "eth0"); !ok {
		t.Errorf("GC removed b's port, which is valid")
	}
	if _, _, leases := n.state(); len(leases) != 2 {
		t.Errorf("after GC, leases %v; want b's two", leases)
	}
	n.mustRun("check", b, "eth0")

	// DEL is idempotent: a is gone already, and b twice.
	n.mustRun("del", a, "eth0")
	n.mustRun("del", b, "eth0")
	n.mustRun("del", b, "eth0")
	if hasLink(t, b, "eth0") {
		t.Error("DEL left eth0 in b")
	}
	n.wantEmpty()
}

// Spec versions 0.4.0 and 1.0.0 get results of their version; a TAP
// switch bridges pods on one subnet.
// A runtime's pod (CNI_ARGS) stays with the port: the API lists it and
// softnet_port_info joins the port to it, with its namespace and device.
func TestPodOfPort(t *testing.T) {
	n := newNode(t, "tun", "198.18.7.0/24")
	pod := netnstest.New(t)
	id := strings.Repeat("9e", 32)
	n.cniArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-7f9c-x2;K8S_POD_INFRA_CONTAINER_ID=" + id + ";K8S_POD_UID=2b0a"
	n.add(pod, "eth0")
	p, ok := n.portOf(pod, "eth0")
	if want := (vswitch.Pod{Namespace: "shop", Name: "web-7f9c-x2", InfraContainerID: id}); !ok || p.Pod == nil || *p.Pod != want {
		t.Errorf("port %+v (found %v): want pod %+v", p, ok, want)
	}
	if n.sw != nil { // the switch in this process: scrape it
		rec := httptest.NewRecorder()
		control.MetricsHandler(n.sw).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		want := fmt.Sprintf(`softnet_port_info{dev="eth0",kind="tun",netns=%q,pod="web-7f9c-x2",pod_namespace="shop",port=%q} 1`, nsPath(pod), p.Name)
		if !strings.Contains(rec.Body.String(), want+"\n") {
			t.Errorf("/metrics has no %s:\n%s", want, rec.Body.String())
		}
	}
	n.mustRun("del", pod, "eth0")
	n.wantEmpty()
}

func TestVersionsAndTAP(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	n := newNode(t, "tap", "198.18.5.0/24")
	pods := []*netnstest.NS{netnstest.New(t), netnstest.New(t)}
	var addrs []net.IP
	for i, v := range []string{"0.4.0", "1.0.0"} {
		n.writeConf(v)
		out, err := n.cnitool("add", nsPath(pods[i]), "eth0")
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]any
		if err := json.Unmarshal([]byte(out), &raw); err != nil || raw["cniVersion"] != v {
			t.Fatalf("%s result: %v %s", v, err, out)
		}
		res := &current.Result{}
		_ = json.Unmarshal([]byte(out), res)
		if len(res.Interfaces) != 1 || res.Interfaces[0].Mac == "" {
			t.Errorf("%s: a TAP interface without its MAC: %s", v, out)
		}
		addrs = append(addrs, ipOf(t, res, true))
		n.mustRun("check", pods[i], "eth0")
	}
	ping(t, pods[0], addrs[1])
	ping(t, pods[1], addrs[0])
	for _, p := range pods {
		n.mustRun("del", p, "eth0")
	}
	n.wantEmpty()
}

// veth mode: each pod's eth0 is a veth the plugin makes, whose host end
// is an afxdp port of the switch. Pods reach each other by ping and by
// TCP (through the switch's software checksums: the pods keep their
// offloads), CHECK passes and notices a pod's veth replaced, DEL removes
// the port and the veth, twice over, and GC the ports of attachments
// that are gone.
func TestVeth(t *testing.T) {
	netnstest.RequireTools(t, "ping", "ip")
	n := newNode(t, "veth", "198.18.11.0/24")
	pods := []*netnstest.NS{netnstest.New(t), netnstest.New(t), netnstest.New(t)}
	var addrs []net.IP
	for _, p := range pods {
		res := n.add(p, "eth0")
		if len(res.Interfaces) != 2 || res.Interfaces[0].Mac == "" || res.Interfaces[1].Sandbox != "" {
			t.Errorf("veth mode's interfaces: %+v", res.Interfaces)
		}
		addrs = append(addrs, ipOf(t, res, true))
		n.mustRun("check", p, "eth0")
		pt, ok := n.portOf(p, "eth0")
		if !ok || !strings.HasPrefix(pt.Spec, "afxdp:") || pt.Down {
			t.Fatalf("the pod's port: %+v (found %v)", pt, ok)
		}
		if out, err := exec.Command("ip", "link", "show", pt.Name).CombinedOutput(); err != nil || !strings.Contains(string(out), "prog/xdp") {
			t.Errorf("host end %s of the pod's veth (%v):\n%s", pt.Name, err, out)
		}
	}
	ping(t, pods[0], addrs[1])
	ping(t, pods[1], addrs[0])
	transfer(t, pods[0], pods[1], addrs[1], 4<<20)
	transfer(t, pods[1], pods[0], addrs[0], 4<<20)

	// GC keeps the valid attachments' ports and veths.
	keep := []types.GCAttachment{{ContainerID: cnitoolID(nsPath(pods[0])), IfName: "eth0"}, {ContainerID: cnitoolID(nsPath(pods[1])), IfName: "eth0"}}
	gone, _ := n.portOf(pods[2], "eth0")
	cni := libcni.NewCNIConfigWithCacheDir([]string{n.bin}, t.TempDir(), nil)
	list, err := libcni.ConfListFromFile(filepath.Join(n.netDir, "net.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cni.GCNetworkList(context.Background(), list, &libcni.GCArgs{ValidAttachments: keep}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if _, ok := n.portOf(pods[2], "eth0"); ok {
		t.Error("GC left the port of an attachment that is not valid")
	}
	if out, err := exec.Command("ip", "link", "show", gone.Name).CombinedOutput(); err == nil {
		t.Errorf("GC left the host end of an attachment that is not valid:\n%s", out)
	}
	ping(t, pods[0], addrs[1])
	n.mustRun("del", pods[2], "eth0") // its IPAM lease

	for _, p := range pods[:2] {
		n.mustRun("del", p, "eth0")
		n.mustRun("del", p, "eth0") // again: nothing to do
		if hasLink(t, p, "eth0") {
			t.Errorf("%s: eth0 left after DEL", p.Name)
		}
	}
	n.wantEmpty()
	n.wantNoVeths()
}

// wantNoVeths: no host end of the network's veths is left.
func (n *node) wantNoVeths() {
	n.t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show", "type", "veth").CombinedOutput()
	if err != nil {
		n.t.Fatalf("ip link: %v\n%s", err, out)
	}
	if prefix := networkPrefix(n.network); strings.Contains(string(out), prefix) {
		n.t.Errorf("veths of the network left behind:\n%s", out)
	}
}

// Two nodes, each a namespace with its end of a veth underlay and a
// switch of its own, configured as docs/kubernetes.md configures a
// node: a routed vxlan port to the other node and a route to the other
// node's pod CIDR via it. A pod ADDed on each node reaches the other's
// by ping and TCP across the overlay, over an IPv4 and an IPv6
// underlay; DEL leaves each switch as it started.
func TestPodsOnTwoNodes(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	podCIDR := [2]string{"198.18.31.0/24", "198.18.32.0/24"}
	vtepMAC := [2]string{"02:00:00:00:20:01", "02:00:00:00:20:02"}
	for _, family := range []string{"ipv4", "ipv6"} {
		t.Run(family, func(t *testing.T) {
			underlay, bits := [2]netip.Addr{netip.MustParseAddr("198.18.30.1"), netip.MustParseAddr("198.18.30.2")}, 24
			if family == "ipv6" {
				underlay, bits = [2]netip.Addr{netip.MustParseAddr("2001:db8:30::1"), netip.MustParseAddr("2001:db8:30::2")}, 64
			}
			hosts := [2]*netnstest.NS{netnstest.New(t), netnstest.New(t)}
			if out, err := hosts[0].Exec("ip", "link", "add", "under0", "type", "veth", "peer", "name", "under1", "netns", hosts[1].Name); err != nil {
				t.Fatalf("veth underlay: %v: %s", err, out)
			}
			for i, h := range hosts {
				dev := fmt.Sprintf("under%d", i)
				if out, err := h.Exec("ip", "link", "set", dev, "up"); err != nil {
					t.Fatalf("%s up: %v: %s", dev, err, out)
				}
				h.AddAddr(t, dev, netip.PrefixFrom(underlay[i], bits))
			}

			var nodes [2]*node
			var pods [2]*netnstest.NS
			var addrs [2]net.IP
			for i := range nodes {
				peer := underlay[1-i]
				conf := fmt.Sprintf("port vxlan:vxlan0,vni=20,local=%s,remote=%s,mode=l3,vtep-mac=%s,fdb=%s@%s,netns=%s\n"+
					"route %s=vxlan0,via=%s\n", underlay[i], peer, vtepMAC[i], vtepMAC[1-i], peer, hosts[i].Name, podCIDR[1-i], peer)
				nodes[i] = newNodeWith(t, "tun", conf, podCIDR[i])
				pods[i] = netnstest.New(t)
				addrs[i] = ipOf(t, nodes[i].add(pods[i], "eth0"), true)
			}
			ping(t, pods[0], addrs[1])
			ping(t, pods[1], addrs[0])
			transfer(t, pods[0], pods[1], addrs[1], 4<<20)
			transfer(t, pods[1], pods[0], addrs[0], 4<<20)

			for i, n := range nodes {
				n.mustRun("del", pods[i], "eth0")
				if hasLink(t, pods[i], "eth0") {
					t.Errorf("DEL left eth0 in %s", pods[i].Name)
				}
				n.wantEmpty()
				n.stop()
			}
		})
	}
}

// cniError is a plugin's error as the spec writes it on stdout.
type cniError struct {
	CNIVersion string `json:"cniVersion"`
	Code       uint   `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details"`
}

// plugin runs softnet-cni as a runtime does, with exactly env.
func (n *node) plugin(env map[string]string, stdin []byte) (string, *cniError) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(n.bin, "softnet-cni"))
	c.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		c.Env = append(c.Env, k+"="+v)
	}
	c.Stdin = bytes.NewReader(stdin)
	var out bytes.Buffer
	c.Stdout = &out
	err := c.Run()
	var exit *exec.ExitError
	if err == nil {
		return out.String(), nil
	} else if !errors.As(err, &exit) {
		n.t.Fatal(err)
	}
	e := &cniError{}
	if jerr := json.Unmarshal(out.Bytes(), e); jerr != nil || e.Msg == "" {
		n.t.Fatalf("exit %v with stdout %q: not a CNI error", err, out.String())
	}
	return out.String(), e
}

func (n *node) env(cmd string, ns *netnstest.NS, ifname string) map[string]string {
	env := map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": "ctr", "CNI_IFNAME": ifname, "CNI_PATH": n.bin}
	if ns != nil {
		env["CNI_CONTAINERID"], env["CNI_NETNS"] = "ctr-"+ns.Name, nsPath(ns)
	}
	return env
}

// Each bad input is a CNI error with the spec's code and a message that
// says what to fix, and a failed ADD leaves no port, device or lease.
func TestBadInput(t *testing.T) {
	n := newNode(t, "tun", "198.18.6.0/30")
	pod := netnstest.New(t)
	good := n.stdin("1.1.0", nil)
	with := func(k string, v any) []byte { return n.stdin("1.1.0", map[string]any{k: v}) }
	without := func(k string) []byte {
		var c map[string]any
		_ = json.Unmarshal(good, &c)
		delete(c, k)
		b, _ := json.Marshal(c)
		return b
	}
	env := func(cmd string, change map[string]string) map[string]string {
		e := n.env(cmd, pod, "eth0")
		for k, v := range change {
			if v == "" {
				delete(e, k)
			} else {
				e[k] = v
			}
		}
		return e
	}
	notNS := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notNS, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stopped := filepath.Join(t.TempDir(), "none.sock")
	for _, c := range []struct {
		name  string
		env   map[string]string
		stdin []byte
		code  uint
		says  string
	}{
		{"malformed JSON", env("ADD", nil), []byte(`{"cniVersion": "1.1.0", "name": `), types.ErrDecodingFailure, "unmarshal"},
		{"unknown CNI_COMMAND", env("JUMP", nil), good, types.ErrInvalidEnvironmentVariables, "JUMP"},
		{"no CNI_NETNS", env("ADD", map[string]string{"CNI_NETNS": ""}), good, types.ErrInvalidEnvironmentVariables, "CNI_NETNS"},
		{"no CNI_CONTAINERID", env("ADD", map[string]string{"CNI_CONTAINERID": ""}), good, types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID"},
		{"no CNI_IFNAME", env("DEL", map[string]string{"CNI_IFNAME": ""}), good, types.ErrInvalidEnvironmentVariables, "CNI_IFNAME"},
		{"no CNI_PATH", env("ADD", map[string]string{"CNI_PATH": ""}), good, types.ErrInvalidEnvironmentVariables, "CNI_PATH"},
		{"netns missing", env("ADD", map[string]string{"CNI_NETNS": "/var/run/netns/softnet-no-such-ns"}), good, types.ErrInvalidEnvironmentVariables, "CNI_NETNS=/var/run/netns/softnet-no-such-ns"},
		{"netns a file", env("ADD", map[string]string{"CNI_NETNS": notNS}), good, types.ErrInvalidEnvironmentVariables, "not a network namespace"},
		{"netns of another kind", env("ADD", map[string]string{"CNI_NETNS": "/proc/self/ns/mnt"}), good, types.ErrInvalidEnvironmentVariables, "not a network namespace"},
		{"netns relative", env("ADD", map[string]string{"CNI_NETNS": "netns/x"}), good, types.ErrInvalidEnvironmentVariables, "absolute path"},
		{"ifname too long", env("ADD", map[string]string{"CNI_IFNAME": "a-name-too-long-for-linux"}), good, types.ErrInvalidEnvironmentVariables, "too long"},
		{"ifname used", env("ADD", map[string]string{"CNI_IFNAME": "lo"}), good, types.ErrInvalidEnvironmentVariables, "already has an interface"},
		// Names Linux takes but a port spec cannot: each would reach the
		// switch as options of the port. With no switch to ask, the
		// refusal is still the name's: nothing asked the switch first.
		{"ifname with router option", env("ADD", map[string]string{"CNI_IFNAME": "e,router=on"}), good, types.ErrInvalidEnvironmentVariables, `CNI_IFNAME="e,router=on"`},
		{"ifname with netns option", env("ADD", map[string]string{"CNI_IFNAME": "e,netns=foo"}), good, types.ErrInvalidEnvironmentVariables, `CNI_IFNAME="e,netns=foo"`},
		{"ifname with =", env("ADD", map[string]string{"CNI_IFNAME": "e=x"}), good, types.ErrInvalidEnvironmentVariables, "separate a port's options"},
		{"ifname with an option, no switch", env("ADD", map[string]string{"CNI_IFNAME": "e,router=on"}), with("socket", stopped), types.ErrInvalidEnvironmentVariables, "separate a port's options"},
		// Names Linux refuses that the CNI library lets through.
		{"ifname with byte 0xa0", env("ADD", map[string]string{"CNI_IFNAME": "e\xa0"}), good, types.ErrInvalidEnvironmentVariables, "Linux refuses"},
		{"ifname pattern", env("ADD", map[string]string{"CNI_IFNAME": "eth%d"}), good, types.ErrInvalidEnvironmentVariables, "patterns"},
		// A pod's names become labels of the switch's metrics: one no
		// runtime could have made is refused before anything is added.
		{"pod name injecting a label", env("ADD", map[string]string{"CNI_ARGS": "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web\"} softnet_port_up{port=\"x"}), good, types.ErrInvalidEnvironmentVariables, "pod name"},
		{"pod name with a newline", env("ADD", map[string]string{"CNI_ARGS": "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web\nsoftnet_port_up 1"}), good, types.ErrInvalidEnvironmentVariables, "pod name"},
		{"pod without namespace", env("ADD", map[string]string{"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAME=web"}), good, types.ErrInvalidEnvironmentVariables, "a namespace and a name"},
		{"netns with an option", env("ADD", map[string]string{"CNI_NETNS": "/var/run/netns/x,router=on"}), good, types.ErrInvalidEnvironmentVariables, "without commas"},
		{"incompatible version", env("ADD", nil), n.stdin("9.9.9", nil), types.ErrIncompatibleCNIVersion, "incompatible"},
		{"GC before 1.1.0", env("GC", nil), n.stdin("1.0.0", nil), types.ErrIncompatibleCNIVersion, "GC"},
		{"no name", env("ADD", nil), without("name"), types.ErrInvalidNetworkConfig, "name"},
		{"bad mode", env("ADD", nil), with("mode", "vxlan"), types.ErrInvalidNetworkConfig, `"mode"`},
		{"bad mtu", env("ADD", nil), with("mtu", 20), types.ErrInvalidNetworkConfig, `"mtu"`},
		{"mtu a string", env("ADD", nil), with("mtu", "1500"), types.ErrInvalidNetworkConfig, `"mtu": a JSON string where a number is wanted`},
		{"mode a number", env("ADD", nil), with("mode", 3), types.ErrInvalidNetworkConfig, `"mode": a JSON number where a string is wanted`},
		{"relative socket", env("ADD", nil), with("socket", "softnet.sock"), types.ErrInvalidNetworkConfig, `"socket"`},
		{"no ipam", env("ADD", nil), without("ipam"), types.ErrInvalidNetworkConfig, `"ipam"`},
		{"ipam missing", env("ADD", nil), with("ipam", map[string]any{"type": "softnet-no-such-ipam"}), types.ErrInvalidNetworkConfig, "not in CNI_PATH"},
		{"ipam missing, DEL", env("DEL", nil), with("ipam", map[string]any{"type": "softnet-no-such-ipam"}), types.ErrInvalidNetworkConfig, "not in CNI_PATH"},
		{"ipam fails", env("ADD", nil), with("ipam", map[string]any{"type": "host-local", "dataDir": n.ipamDir, "ranges": [][]any{{map[string]any{"subnet": "not-a-subnet"}}}}), 0, "IPAM plugin host-local ADD"},
		{"mode the switch does not run", env("ADD", map[string]string{"CNI_IFNAME": "eth5"}), with("mode", "tap"), types.ErrInvalidNetworkConfig, `set "mode"`},
		{"switch not running, ADD", env("ADD", nil), with("socket", stopped), types.ErrTryAgainLater, "no softnet switch is running on " + stopped},
		{"switch not running, STATUS", env("STATUS", nil), with("socket", stopped), types.ErrPluginNotAvailable, "start `softnet switch --control " + stopped},
		{"CHECK without prevResult", env("CHECK", nil), good, types.ErrInvalidNetworkConfig, "prevResult"},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			undo := func() {}
			if c.name == "mode the switch does not run" {
				// A TUN port first: then the switch takes no TAP port.
				other := netnstest.New(t)
				if out, e := n.plugin(n.env("ADD", other, "eth0"), good); e != nil {
					t.Fatalf("%s %v", out, e)
				}
				undo = func() {
					if out, e := n.plugin(n.env("DEL", other, "eth0"), good); e != nil {
						t.Errorf("DEL: %s", out)
					}
				}
			}
			out, e := n.plugin(c.env, c.stdin)
			undo()
			switch {
			case e == nil:
				t.Fatalf("succeeded: %s", out)
			case c.code != 0 && e.Code != c.code, !strings.Contains(e.Msg+" "+e.Details, c.says):
				t.Fatalf("got %s; want code %d saying %q", out, c.code, c.says)
			}
			t.Logf("code %d: %s %s", e.Code, e.Msg, e.Details)
			if c.env["CNI_COMMAND"] == "ADD" && c.env["CNI_IFNAME"] == "eth0" {
				if hasLink(t, pod, "eth0") {
					t.Error("a failed ADD left eth0")
				}
			}
			n.wantEmpty()
		})
	}

	// An ADD whose IPAM runs out of addresses half-way (after the port
	// was added) leaves nothing; the /30 has one address after the
	// gateway.
	first := netnstest.New(t)
	if out, e := n.plugin(n.env("ADD", first, "eth0"), good); e != nil {
		t.Fatalf("%s %v", out, e)
	}
	out, e := n.plugin(n.env("ADD", pod, "eth0"), good)
	if e == nil || !strings.Contains(e.Msg, "IPAM plugin host-local ADD") {
		t.Fatalf("ADD with the range exhausted: %s", out)
	}
	if hasLink(t, pod, "eth0") {
		t.Error("a failed ADD left eth0")
	}
	if ports, _, leases := n.state(); len(ports) != 1 || len(leases) != 1 {
		t.Errorf("after a failed ADD: ports %v leases %v; want only the first pod's", ports, leases)
	}
	if out, e := n.plugin(n.env("DEL", first, "eth0"), good); e != nil {
		t.Fatalf("%s %v", out, e)
	}

	// DEL succeeds with the namespace gone, without a switch, and when
	// the switch never heard of the container.
	for _, env := range []map[string]string{
		env("DEL", map[string]string{"CNI_NETNS": "/var/run/netns/softnet-no-such-ns"}),
		env("DEL", map[string]string{"CNI_NETNS": ""}),
		env("DEL", map[string]string{"CNI_CONTAINERID": "never-added"}),
	} {
		if out, e := n.plugin(env, good); e != nil {
			t.Errorf("DEL %v: %s", env, out)
		}
	}
	if out, e := n.plugin(env("DEL", nil), with("socket", stopped)); e != nil {
		t.Errorf("DEL without a switch: %s", out)
	}

	out, e = n.plugin(map[string]string{"CNI_COMMAND": "VERSION"}, []byte(`{"cniVersion": "1.1.0"}`))
	var ver struct {
		Supported []string `json:"supportedVersions"`
		Softnet   struct {
			Version string `json:"version"`
		} `json:"softnet"`
	}
	if e != nil || json.Unmarshal([]byte(out), &ver) != nil || !slices.Equal(ver.Supported, []string{"0.4.0", "1.0.0", "1.1.0"}) || ver.Softnet.Version == "" {
		t.Errorf("VERSION: %s", out)
	}
	n.wantEmpty()
}

// A hundred ADD/DEL cycles leave no port, route, lease, device or
// result cache behind, and the switch's buffers all come home.
func TestAddDelCycles(t *testing.T) {
	n := newNode(t, "tun", "198.18.7.0/24", "2001:db8:7::/64")
	pod := netnstest.New(t)
	for i := range 100 {
		n.add(pod, "eth0")
		if i%25 == 0 {
			n.mustRun("check", pod, "eth0")
		}
		n.mustRun("del", pod, "eth0")
		if hasLink(t, pod, "eth0") {
			t.Fatalf("cycle %d: DEL left eth0", i)
		}
	}
	n.wantEmpty()
	if left, _ := filepath.Glob(filepath.Join(libcni.CacheDir, "results", n.network+"-*")); len(left) != 0 {
		t.Errorf("cnitool's cache holds %v", left)
	}
	n.stop()
}

// A node filled to 110 pods, Kubernetes' default maximum, with ADDs
// run 10 at a time as a kubelet runs them: every pod reaches every
// other; then drained the same way, leaving nothing. The time per ADD
// and DEL (cnitool's, with host-local) is logged.
func TestNodeOf110Pods(t *testing.T) { nodeOf110Pods(t, "tun", "198.18.8.0/24") }

// The same node in veth mode: 110 veth pairs, their host ends 110 afxdp
// ports, and nothing of them left after DEL.
func TestNodeOf110VethPods(t *testing.T) { nodeOf110Pods(t, "veth", "198.18.10.0/24") }

func nodeOf110Pods(t *testing.T, mode, subnet string) {
	if testing.Short() {
		t.Skip("110 namespaces: not with -short")
	}
	const pods, parallel = 110, 10
	n := newNode(t, mode, subnet)
	state := filepath.Join(t.TempDir(), "state.json")
	switch {
	case *restart:
		n.startProcess("--state", state)
	case *compare:
		n.startProcess()
	}
	ns := make([]*netnstest.NS, pods)
	for i := range ns {
		ns[i] = netnstest.New(t)
	}
	addrs := make([]net.IP, pods)
	addTimes := inParallel(t, pods, parallel, func(i int) error {
		out, err := n.cnitool("add", nsPath(ns[i]), "eth0")
		if err != nil {
			return err
		}
		res := &current.Result{}
		if err := json.Unmarshal([]byte(out), res); err != nil || len(res.IPs) != 1 {
			return fmt.Errorf("ADD result %q: %v", out, err)
		}
		addrs[i] = res.IPs[0].Address.IP
		return nil
	})
	if ports, _, leases := n.state(); len(ports) != pods || len(leases) != pods {
		t.Fatalf("%d ports and %d leases for %d pods", len(ports), len(leases), pods)
	}
	if mode == "veth" {
		// Bridged, as the reference bridge is below: every pod and pod 0,
		// for the kernel's neighbour table.
		reach(t, ns, addrs, func(from, to int) bool { return from == 0 || to == 0 })
	} else {
		reach(t, ns, addrs, func(from, to int) bool { return true })
	}
	if *restart && mode != "veth" {
		restartKeepingPods(t, n, state, ns, addrs)
		reach(t, ns, addrs, func(from, to int) bool { return true })
	}
	var rss, peak int
	if *compare {
		rss, peak = n.memory()
	}
	delTimes := inParallel(t, pods, parallel, func(i int) error {
		_, err := n.cnitool("del", nsPath(ns[i]), "eth0")
		return err
	})
	n.wantEmpty()
	if mode == "veth" {
		n.wantNoVeths()
	}
	t.Logf("softnet-cni %s: %d pods, %d at a time: ADD p50 %v p99 %v; DEL p50 %v p99 %v", mode, pods, parallel,
		percentile(addTimes, 50), percentile(addTimes, 99), percentile(delTimes, 50), percentile(delTimes, 99))
	n.stop()
	if *compare {
		t.Logf("softnet switch at %d pods: RSS %d KiB, peak %d KiB", pods, rss, peak)
		bridgeReference(t, n, ns, parallel)
	}
}

// bridgeReference times the reference bridge plugin on the same pods:
// veth pairs on a kernel bridge in a node namespace of the test's, where
// cnitool runs, so that the bridge is not the test host's.
func bridgeReference(t *testing.T, n *node, ns []*netnstest.NS, parallel int) {
	node := netnstest.New(t)
	network := n.network + "-bridge"
	conf := map[string]any{"cniVersion": "1.1.0", "name": network, "plugins": []any{map[string]any{
		"type": "bridge", "bridge": "sncni0", "isGateway": true, "mtu": 1400,
		"ipam": map[string]any{"type": "host-local", "dataDir": n.ipamDir, "ranges": []any{[]any{map[string]any{"subnet": "198.18.9.0/24"}}}},
	}}}
	b, _ := json.Marshal(conf)
	if err := os.WriteFile(filepath.Join(n.netDir, "bridge.conflist"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	addrs := make([]net.IP, len(ns))
	addTimes := inParallel(t, len(ns), parallel, func(i int) error {
		out, err := n.cnitoolIn(node, network, "add", nsPath(ns[i]), "eth0")
		if err != nil {
			return err
		}
		res := &current.Result{}
		if err := json.Unmarshal([]byte(out), res); err != nil || len(res.IPs) != 1 {
			return fmt.Errorf("ADD result %q: %v", out, err)
		}
		addrs[i] = res.IPs[0].Address.IP
		return nil
	})
	// Not every pair: the kernel's neighbour table is one for all
	// namespaces, and 110 pods on one segment would need 11,990 entries,
	// past its gc_thresh3 (1024 by default). Every pod and pod 0.
	reach(t, ns, addrs, func(from, to int) bool { return from == 0 || to == 0 })
	delTimes := inParallel(t, len(ns), parallel, func(i int) error {
		_, err := n.cnitoolIn(node, network, "del", nsPath(ns[i]), "eth0")
		return err
	})
	t.Logf("bridge: %d pods, %d at a time: ADD p50 %v p99 %v; DEL p50 %v p99 %v", len(ns), parallel,
		percentile(addTimes, 50), percentile(addTimes, 99), percentile(delTimes, 50), percentile(delTimes, 99))
}

// inParallel runs f(0..count-1), at most width at a time, and returns
// how long each took; it fails the test on the first error.
func inParallel(t *testing.T, count, width int, f func(i int) error) []time.Duration {
	t.Helper()
	took := make([]time.Duration, count)
	errs := make([]error, count)
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	for i := range count {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			start := time.Now()
			errs[i] = f(i)
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return took
}

func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)].Round(100 * time.Microsecond)
}

// reach checks that every pod reaches every other for which want
// holds: each sends a UDP datagram to those pods' addresses, and each
// records whom it heard from. Datagrams lost on the way (on a bridge, while ARP resolves 110
// neighbours at once) are sent again, in at most 10 rounds a second
// apart.
func reach(t *testing.T, ns []*netnstest.NS, addrs []net.IP, want func(from, to int) bool) {
	t.Helper()
	const port = 7777
	conns := make([]*net.UDPConn, len(ns))
	for i := range ns {
		if err := ns[i].Do(func() (err error) {
			conns[i], err = net.ListenUDP("udp", &net.UDPAddr{IP: addrs[i], Port: port})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
	}
	var mu sync.Mutex
	heard := make([][]bool, len(ns)) // heard[to][from]
	var wg sync.WaitGroup
	for to, c := range conns {
		heard[to] = make([]bool, len(ns))
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 16)
			for {
				m, err := c.Read(buf)
				if err != nil {
					return // closed
				}
				var from int
				if _, err := fmt.Sscan(string(buf[:m]), &from); err == nil && from >= 0 && from < len(ns) {
					mu.Lock()
					heard[to][from] = true
					mu.Unlock()
				}
			}
		}()
	}
	rounds := 0
	for round := range 10 {
		rounds++
		missing := 0
		for from, c := range conns {
			for to := range conns {
				mu.Lock()
				done := to == from || !want(from, to) || heard[to][from]
				mu.Unlock()
				if !done {
					missing++
					if _, err := c.WriteToUDP([]byte(fmt.Sprint(from)), &net.UDPAddr{IP: addrs[to], Port: port}); err != nil {
						t.Fatalf("round %d: pod %d to %d: %v", round, from, to, err)
					}
				}
			}
			time.Sleep(time.Millisecond) // a pod's burst at a time: bounded rate
		}
		if missing == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	var unheard []string
	pairs := 0
	for to := range heard {
		for from, ok := range heard[to] {
			if from != to && want(from, to) {
				pairs++
				if !ok {
					unheard = append(unheard, fmt.Sprintf("%d→%d", from, to))
				}
			}
		}
	}
	if len(unheard) > 0 {
		t.Fatalf("%d of %d pairs never reached in %d rounds: %v", len(unheard), pairs, rounds, unheard[:min(len(unheard), 20)])
	}
	t.Logf("all %d pairs reached, in %d rounds", pairs, rounds-1)
}

// The bandwidth capability, as a runtime passes it (cnitool's CAP_ARGS,
// for a configuration that declares it), limits the pod's port: the
// pod's ingress is what the switch sends to it, the port's egress. Bad
// limits are a wrong configuration (code 7), and leave nothing behind.
func TestBandwidthCapability(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	n := newNode(t, "tun", "198.18.5.0/24")
	n.conf["capabilities"] = map[string]any{"bandwidth": true}
	n.writeConf("1.1.0")
	a, b := netnstest.New(t), netnstest.New(t)
	n.capArgs = `{"bandwidth": {"ingressRate": 100000000, "ingressBurst": 3000000, "egressRate": 10000000, "egressBurst": 0}}`
	n.add(a, "eth0")
	pa, ok := n.portOf(a, "eth0")
	if want := ",ingress-rate=10M,egress-rate=100M,egress-burst=3M"; !ok || !strings.HasSuffix(pa.Spec, want) {
		t.Errorf("port %+v, want a spec ending in %s", pa, want)
	}
	n.capArgs = ""
	rb := n.add(b, "eth0")
	if pb, _ := n.portOf(b, "eth0"); strings.Contains(pb.Spec, "rate") {
		t.Errorf("a pod without limits got %s", pb.Spec)
	}
	ping(t, a, ipOf(t, rb, true))

	n.capArgs = `{"bandwidth": {"ingressRate": 10, "ingressBurst": 100}}`
	c := netnstest.New(t)
	_, err := n.cnitool("add", nsPath(c), "eth0")
	if err == nil || !strings.Contains(err.Error(), "invalid network configuration") || !strings.Contains(err.Error(), "rate 10 bit/s") {
		t.Errorf("ADD with a rate of 10 bit/s: %v", err)
	}
	if _, ok := n.portOf(c, "eth0"); ok {
		t.Error("the refused ADD left a port")
	}
	n.capArgs = ""
	n.mustRun("del", a, "eth0")
	n.mustRun("del", b, "eth0")
}

// restartKeepingPods restarts the node's switch process (-cni.restart)
// as a DaemonSet's rolling update does, softnet ctl shutdown
// --keep-guests then a new switch on the same state, while each pod
// pings the next every 10 ms. No pod is ADDed again. Every pod must be
// answered after the restart; each pod's forwarding gap, the longest
// time between two replies, is logged with its p50 and p99.
func restartKeepingPods(t *testing.T, n *node, state string, ns []*netnstest.NS, addrs []net.IP) {
	t.Helper()
	const run = 6 * time.Second
	outs := make([]string, len(ns))
	var wg sync.WaitGroup
	for i := range ns {
		wg.Go(func() {
			outs[i], _ = ns[i].ExecTimeout(run+5*time.Second, "ping", "-D", "-n", "-i", "0.01", "-W", "1", "-w", fmt.Sprint(int(run.Seconds())), addrs[(i+1)%len(ns)].String())
		})
	}
	time.Sleep(time.Second)
	began := time.Now()
	if err := control.NewClient(n.socket).Post(context.Background(), "/v1/shutdown", control.ShutdownRequest{KeepGuests: true}, nil); err != nil {
		t.Fatal(err)
	}
	if err := n.proc.Wait(); err != nil || !strings.Contains(n.procOut.String(), "leak check: ok") {
		t.Fatalf("the switch stopping to keep its pods: %v\n%s", err, n.procOut)
	}
	n.stopped = true
	stopped := time.Since(began)
	n.startProcess("--state", state)
	ready := time.Since(began)
	wg.Wait()
	var gaps []time.Duration
	lost := 0
	for i, out := range outs {
		var last, gap float64
		answered := false
		for _, line := range strings.Split(out, "\n") {
			var at float64
			if !strings.Contains(line, "bytes from") || !strings.HasPrefix(line, "[") {
				continue
			}
			if _, err := fmt.Sscanf(line[1:], "%f]", &at); err != nil {
				continue
			}
			if last != 0 {
				gap = max(gap, at-last)
			}
			last = at
			answered = answered || time.Unix(0, int64(at*1e9)).After(began.Add(ready))
		}
		if !answered {
			lost++
			t.Errorf("pod %d: no reply after the restart:\n%s", i, out)
		}
		gaps = append(gaps, time.Duration(gap*float64(time.Second)))
	}
	t.Logf("restart keeping %d pods (machine loaded): old switch gone in %v, new one answering in %v; pods lost %d; forwarding gap per pod (pings every 10 ms) p50 %v p99 %v max %v",
		len(ns), stopped.Round(time.Millisecond), ready.Round(time.Millisecond), lost, percentile(gaps, 50), percentile(gaps, 99), slices.Max(gaps).Round(time.Millisecond))
}

// With "podCIDRsFrom", host-local's ranges are the node's pod CIDRs as
// softnet agent wrote them to its status file: none yet is an error to
// try again later that leaves nothing behind; then the pod's addresses
// come from them, both families.
func TestPodCIDRsFromTheAgent(t *testing.T) {
	n := newNode(t, "tun")
	status := filepath.Join(t.TempDir(), "agent.json")
	delete(n.conf["ipam"].(map[string]any), "ranges")
	n.conf["podCIDRsFrom"] = status
	n.writeConf("1.1.0")
	pod := netnstest.New(t)
	if out, err := n.cnitool("add", nsPath(pod), "eth0"); err == nil || !strings.Contains(out+err.Error(), "pod CIDRs are not known yet") {
		t.Fatalf("ADD without the agent's status: %v\n%s", err, out)
	}
	n.wantEmpty()
	if err := os.WriteFile(status, []byte(`{"node": "n1", "pod_cidrs": ["198.18.33.0/24", "2001:db8:33::/64"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	res := n.add(pod, "eth0")
	for _, c := range []struct {
		v4   bool
		cidr string
	}{{true, "198.18.33.0/24"}, {false, "2001:db8:33::/64"}} {
		ip, _ := netip.AddrFromSlice(ipOf(t, res, c.v4))
		if !netip.MustParsePrefix(c.cidr).Contains(ip.Unmap()) {
			t.Errorf("address %v, not of the node's pod CIDR %s", ip, c.cidr)
		}
	}
	n.mustRun("del", pod, "eth0")
	n.wantEmpty()
}
