package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"softnet.dev/internal/buildinfo"
	"softnet.dev/internal/control"
	"softnet.dev/internal/netnstest"
)

// ctl shows what a running switch holds: its ports (kind, the kind's
// options, state, queues, device, namespace; a vhost-user port waiting
// for its VM says so), its forwarding table (stations learned from a
// ping across the bridge, a vxlan port's static station and its remote)
// and its version.
func TestCtlShow(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	netnstest.RequireRoot(t)
	bin := buildSoftnet(t)
	g1, g2, under := netnstest.New(t), netnstest.New(t), netnstest.New(t)
	mustExec(t, under, "ip", "link", "set", "lo", "up")
	vsock := filepath.Join(t.TempDir(), "vm.sock")
	sp := startSwitch(t, bin, "--port", "tap:sw1,netns="+g1.Name, "--port", "tap:sw2,netns="+g2.Name,
		"--port", "vhost-user:swvm,socket="+vsock,
		"--port", "vxlan:swvx,vni=42,local=127.0.0.1,remote=127.0.0.2,fdb=02:00:00:00:00:42@127.0.0.2,netns="+under.Name)
	g1.AddAddr(t, "sw1", netip.MustParsePrefix("198.18.30.1/24"))
	g2.AddAddr(t, "sw2", netip.MustParsePrefix("198.18.30.2/24"))
	if err := ping(t, g1, "198.18.30.2"); err != nil {
		t.Fatal(err)
	}
	mac := func(ns *netnstest.NS, dev string) string {
		out, err := ns.Exec("cat", "/sys/class/net/"+dev+"/address")
		if err != nil {
			t.Fatalf("%s's MAC: %v %s", dev, err, out)
		}
		return strings.TrimSpace(out)
	}
	mac1, mac2 := mac(g1, "sw1"), mac(g2, "sw2")

	// fdb show: the guests' stations, learned, and the vxlan port's
	// static one behind its remote.
	var stations []control.Station
	if err := json.Unmarshal([]byte(sp.mustCtl(t, "fdb", "show", "--json")), &stations); err != nil {
		t.Fatal(err)
	}
	found := map[string]control.Station{}
	for _, e := range stations {
		found[e.MAC+" "+e.Port] = e
	}
	for _, key := range []string{mac1 + " sw1", mac2 + " sw2"} {
		if e, ok := found[key]; !ok || e.Static || e.Dst != "" || e.AgeSeconds < 0 || e.AgeSeconds > 60 {
			t.Errorf("fdb: station %s: %+v, %v", key, e, ok)
		}
	}
	if e := found["02:00:00:00:00:42 swvx"]; !e.Static || e.Dst != "127.0.0.2" || e.AgeSeconds != 0 {
		t.Errorf("fdb: the vxlan port's static station: %+v (all: %+v)", e, stations)
	}
	table := sp.mustCtl(t, "fdb", "show")
	for _, re := range []string{`(?m)^mac\s+port\s+dst\s+age\s+type$`, `(?m)^` + mac1 + `\s+sw1\s+-\s+\d+s\s+learned$`,
		`(?m)^02:00:00:00:00:42\s+swvx\s+127\.0\.0\.2\s+-\s+static$`} {
		if !regexp.MustCompile(re).MatchString(table) {
			t.Errorf("fdb show lacks %s:\n%s", re, table)
		}
	}

	// port show NAME: a field a line; the vhost-user port waits for its
	// VM, and port list says so too.
	out := sp.mustCtl(t, "port", "show", "swvm")
	for _, re := range []string{`(?m)^kind\s+vhost-user$`, `(?m)^origin\s+config$`, `(?m)^options\s+socket=` + regexp.QuoteMeta(vsock) + `$`,
		`(?m)^state\s+up; no front-end connected$`, `(?m)^  frontend\s+waiting$`, `(?m)^queues\s+1$`, `(?m)^device\s+-$`, `(?m)^namespace\s+-$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("port show swvm lacks %s:\n%s", re, out)
		}
	}
	if out := sp.mustCtl(t, "port", "list"); !regexp.MustCompile(`(?m)^swvm\s+up; no front-end connected\s+vhost-user:swvm`).MatchString(out) {
		t.Errorf("port list does not say swvm waits:\n%s", out)
	}
	var p control.Port
	if err := json.Unmarshal([]byte(sp.mustCtl(t, "port", "show", "sw1", "--json")), &p); err != nil ||
		p.Kind != "tap" || p.Device != "sw1" || p.Netns != g1.Name || !p.Created || p.Queues < 1 || p.State != "" || p.Options != nil {
		t.Errorf("port show sw1 --json: %+v, %v", p, err)
	}
	// Without NAME, a table of every port; the vxlan port's options are
	// its kind's, as its spec writes them.
	out = sp.mustCtl(t, "port", "show")
	for _, re := range []string{`(?m)^name\s+kind\s+origin\s+state\s+queues\s+device\s+namespace\s+options$`,
		`(?m)^sw2\s+tap\s+config\s+up\s+\d+\s+sw2\s+` + g2.Name + `\s+-$`,
		`(?m)^swvx\s+vxlan\s+config\s+up\s+\d+\s+-\s+` + under.Name + `\s+vni=42,local=127\.0\.0\.1,remote=127\.0\.0\.2,fdb=02:00:00:00:00:42@127\.0\.0\.2$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("port show lacks %s:\n%s", re, out)
		}
	}
	if _, errOut, code := sp.ctl(t, "port", "show", "nope"); code != exitFailure || !strings.Contains(errOut, "no such port: nope") {
		t.Errorf("port show nope: exit %d, %q", code, errOut)
	}

	// ctl version is the switch's, as the binary itself says it.
	own, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var want, got buildinfo.Info
	if err := json.Unmarshal(own, &want); err != nil || json.Unmarshal([]byte(sp.mustCtl(t, "version", "--json")), &got) != nil || got != want {
		t.Errorf("ctl version --json %+v, the binary's %+v (%v)", got, want, err)
	}
	sp.stop(t)
}

// route list shows a routed vxlan port's routes with their remote.
func TestCtlRouteListVia(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := buildSoftnet(t)
	g, under := netnstest.New(t), netnstest.New(t)
	mustExec(t, under, "ip", "link", "set", "lo", "up")
	sp := startSwitch(t, bin, "--port", "tun:sr1,netns="+g.Name,
		"--port", "vxlan:srvx,vni=7,local=127.0.0.1,remote=127.0.0.2,mode=l3,vtep-mac=02:00:00:00:00:01,fdb=02:00:00:00:00:02@127.0.0.2,netns="+under.Name,
		"--route", "198.18.41.0/24=sr1", "--route", "198.18.40.0/24=srvx,via=127.0.0.2")
	out := sp.mustCtl(t, "route", "list")
	for _, re := range []string{`(?m)^prefix\s+port\s+via\s+origin$`, `(?m)^198\.18\.41\.0/24\s+sr1\s+-\s+config$`, `(?m)^198\.18\.40\.0/24\s+srvx\s+127\.0\.0\.2\s+config$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("route list lacks %s:\n%s", re, out)
		}
	}
	var routes []control.Route
	if err := json.Unmarshal([]byte(sp.mustCtl(t, "route", "list", "--json")), &routes); err != nil || len(routes) != 2 ||
		routes[1] != (control.Route{Prefix: "198.18.40.0/24", Port: "srvx", Via: "127.0.0.2", Origin: "config"}) {
		t.Errorf("route list --json: %+v, %v", routes, err)
	}
	sp.stop(t)
}

// A switch run as a service reads its flags from the file: metrics
// served where the file says (with softnet_build_info), the command
// line's flags winning over the file's, and a reload
// that changes a setting is refused, naming it, while the switch goes
// on.
func TestSwitchConfigFileSettings(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := buildSoftnet(t)
	g1, g2 := netnstest.New(t), netnstest.New(t)
	// The file's log-format text loses to the command line's json
	// (startSwitch's), which the test reads.
	// A port that was free a moment ago: --metrics takes no port 0.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	state := filepath.Join(t.TempDir(), "state.json")
	text := "state " + state + "\nmetrics " + addr + "\nbusy-poll 0\nlog-format text\nport tun:sk1,netns=" + g1.Name + "\nport tun:sk2,netns=" + g2.Name + "\n"
	file := filepath.Join(t.TempDir(), "softnet.conf")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	sp := startSwitch(t, bin, "--config", file)
	rec, _ := sp.waitLog(t, 0, "the metrics' address", func(r map[string]any) bool { return r["msg"] == "metrics" })
	url, _ := rec["url"].(string)
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "\nsoftnet_build_info{") || !strings.Contains(string(body), `softnet_port_up{port="sk2"} 1`) {
		t.Errorf("metrics at %s:\n%s", url, body)
	}

	// The file's state: a change through the API is kept there.
	sp.mustCtl(t, "route", "add", "198.18.50.0/24=sk1")
	if b, err := os.ReadFile(state); err != nil || !strings.Contains(string(b), "198.18.50.0/24") {
		t.Errorf("the state file the config file names: %v\n%s", err, b)
	}

	if err := os.WriteFile(file, []byte(strings.Replace(text, "busy-poll 0", "busy-poll 50us", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	n := sp.logLen()
	if err := sp.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	rec, _ = sp.waitLog(t, n, "the refused reload", func(r map[string]any) bool { return r["level"] == "ERROR" })
	if msg, _ := rec["err"].(string); !strings.Contains(msg, file+":3: busy-poll \"50us\": the switch runs with \"0s\"; a setting changes with a restart") {
		t.Errorf("reload with a changed setting: %v", rec)
	}
	sp.stop(t)
}
