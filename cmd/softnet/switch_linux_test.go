package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"softnet.dev/internal/control"
	"softnet.dev/internal/netnstest"
	"softnet.dev/internal/unixsock"
	"softnet.dev/internal/vswitch"
	"softnet.dev/packet"
)

// buildSoftnet builds the binary once per test into its temporary
// directory.
func buildSoftnet(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "softnet")
	if out, err := exec.Command("go", "build", "-o", bin, "softnet.dev/cmd/softnet").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// switchProc is a `softnet switch` process with its control socket and
// its log (JSON lines on stderr).
type switchProc struct {
	cmd    *exec.Cmd
	socket string
	stats  string // --stats-json
	exited chan struct{}
	err    error // Wait's, once exited is closed

	mu  sync.Mutex
	log []map[string]any
}

// startSwitch runs bin switch with args, its socket and stats file in
// the test's directory, and waits until its API answers. A switch still
// running at the end is killed.
func startSwitch(t *testing.T, bin string, args ...string) *switchProc {
	t.Helper()
	dir := t.TempDir()
	sp := &switchProc{socket: filepath.Join(dir, "sw.sock"), stats: filepath.Join(dir, "stats.json"), exited: make(chan struct{})}
	sp.cmd = exec.Command(bin, append([]string{"switch", "--control", sp.socket, "--stats-json", sp.stats, "--log-format", "json"}, args...)...)
	stderr, err := sp.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				rec = map[string]any{"msg": sc.Text()}
			}
			sp.mu.Lock()
			sp.log = append(sp.log, rec)
			sp.mu.Unlock()
		}
	}()
	go func() {
		<-logged // Wait must not close the pipe under the reader
		sp.err = sp.cmd.Wait()
		close(sp.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-sp.exited:
		default:
			_ = sp.cmd.Process.Kill()
			<-sp.exited
		}
	})
	c := control.NewClient(sp.socket)
	for deadline := time.Now().Add(20 * time.Second); ; {
		var rep vswitch.Report
		if err := c.Get(context.Background(), "/v1/stats", &rep); err == nil {
			break
		}
		select {
		case <-sp.exited:
			t.Fatalf("switch exited: %v; log:\n%s", sp.err, sp.logText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("switch API not answering after 20 s; log:\n%s", sp.logText())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return sp
}

func (sp *switchProc) logText() string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	var b strings.Builder
	for _, rec := range sp.log {
		line, _ := json.Marshal(rec)
		b.Write(append(line, '\n'))
	}
	return b.String()
}

// waitLog waits until the switch has logged a record for which match
// is true, after the first skip records, and returns it and the count of
// records then.
func (sp *switchProc) waitLog(t *testing.T, skip int, what string, match func(map[string]any) bool) (map[string]any, int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		sp.mu.Lock()
		for i := skip; i < len(sp.log); i++ {
			if match(sp.log[i]) {
				rec := sp.log[i]
				sp.mu.Unlock()
				return rec, i + 1
			}
		}
		sp.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("the switch did not log %s within 10 s; log:\n%s", what, sp.logText())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (sp *switchProc) logLen() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.log)
}

// stop ends the switch with SIGTERM and checks that it exited 0 with
// every buffer home.
func (sp *switchProc) stop(t *testing.T) {
	t.Helper()
	if err := sp.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sp.exited:
		if sp.err != nil {
			t.Errorf("switch: %v; log:\n%s", sp.err, sp.logText())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("switch still running 15 s after SIGTERM")
	}
	b, err := os.ReadFile(sp.stats)
	if err != nil {
		t.Fatal(err)
	}
	var rep vswitch.Report
	if err := json.Unmarshal(b, &rep); err != nil || rep.Leak != "ok" {
		t.Errorf("leak check %q (%v)", rep.Leak, err)
	}
}

// ctl runs softnet ctl on the switch's socket, in this process.
func (sp *switchProc) ctl(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return run(t, append([]string{"ctl", "--socket", sp.socket}, args...)...)
}

// routeList is route list --json's routes, each as PREFIX=PORT.
func routeList(t *testing.T, sp *switchProc) []string {
	t.Helper()
	var routes []control.Route
	if err := json.Unmarshal([]byte(sp.mustCtl(t, "route", "list", "--json")), &routes); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range routes {
		out = append(out, r.Prefix+"="+r.Port)
	}
	return out
}

func (sp *switchProc) mustCtl(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := sp.ctl(t, args...)
	if code != exitOK {
		t.Fatalf("ctl %v: exit %d\n%s%s", args, code, out, errOut)
	}
	return out
}

func mustExec(t *testing.T, ns *netnstest.NS, args ...string) {
	t.Helper()
	if out, err := ns.Exec(args...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// guest gives the switch's device in ns the address 198.18.N.1/24 and
// routes 198.18.0.0/16 through it.
func guest(t *testing.T, ns *netnstest.NS, dev string, n int) {
	t.Helper()
	ns.AddAddr(t, dev, netip.MustParsePrefix(fmt.Sprintf("198.18.%d.1/24", n)))
	mustExec(t, ns, "ip", "route", "add", "198.18.0.0/16", "dev", dev)
}

// ping sends two echo requests from ns to the address to; without ping
// the test skips, naming its package.
func ping(t *testing.T, ns *netnstest.NS, to string) error {
	t.Helper()
	netnstest.RequireTools(t, "ping")
	_, err := ns.Exec("ping", "-c", "2", "-i", "0.2", "-W", "2", to)
	return err
}

var pingStats = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

// While two guests ping each other, a third guest's port is added with
// softnet ctl, routed, reaches both, and is removed again: its device
// leaves its namespace and the ping between the first two loses nothing.
func TestCtlPortsWhileTrafficFlows(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	netnstest.RequireRoot(t)
	bin := buildSoftnet(t)
	var ns [3]*netnstest.NS
	for i := range ns {
		ns[i] = netnstest.New(t)
	}
	sp := startSwitch(t, bin, "--port", "tun:sc1,netns="+ns[0].Name, "--port", "tun:sc2,netns="+ns[1].Name,
		"--route", "198.18.1.0/24=sc1", "--route", "198.18.2.0/24=sc2")
	guest(t, ns[0], "sc1", 1)
	guest(t, ns[1], "sc2", 2)
	if err := ping(t, ns[0], "198.18.2.1"); err != nil {
		t.Fatal(err)
	}

	// Bounded: 300 echo requests, 20 ms apart, within 30 s.
	const pings = 300
	pinged := make(chan string, 1)
	go func() {
		out, _ := ns[0].ExecTimeout(30*time.Second, "ping", "-c", fmt.Sprint(pings), "-i", "0.02", "-W", "2", "198.18.2.1")
		pinged <- out
	}()

	logged := sp.logLen()
	out := sp.mustCtl(t, "port", "add", "tun:sc3,netns="+ns[2].Name)
	if !strings.Contains(out, "sc3") || !strings.Contains(out, "tun:sc3,netns="+ns[2].Name) {
		t.Errorf("port add printed:\n%s", out)
	}
	// The log says who added it: ctl runs in this process.
	rec, _ := sp.waitLog(t, logged, "the port added", func(r map[string]any) bool { return r["msg"] == "port added" })
	me := map[string]any{"uid": float64(os.Getuid()), "gid": float64(os.Getgid()), "pid": float64(os.Getpid())}
	if by, _ := rec["by"].(map[string]any); by["uid"] != me["uid"] || by["gid"] != me["gid"] || by["pid"] != me["pid"] {
		t.Errorf("port added by %v, want %v", rec["by"], me)
	}
	sp.mustCtl(t, "route", "add", "198.18.3.0/24=sc3")
	guest(t, ns[2], "sc3", 3)
	for _, to := range []string{"198.18.1.1", "198.18.2.1"} {
		if err := ping(t, ns[2], to); err != nil {
			t.Errorf("from the added port's guest: %v", err)
		}
	}
	if out := sp.mustCtl(t, "route", "list"); out != "prefix         port  via  origin\n198.18.1.0/24  sc1   -    config\n198.18.2.0/24  sc2   -    config\n198.18.3.0/24  sc3   -    api\n" {
		t.Errorf("route list:\n%s", out)
	}
	var ports []control.Port
	if err := json.Unmarshal([]byte(sp.mustCtl(t, "port", "list", "--json")), &ports); err != nil || len(ports) != 3 || ports[2].Name != "sc3" || !ports[2].Created {
		t.Errorf("port list --json: %+v, %v", ports, err)
	}

	// port set changes the rate limits in place: the device stays.
	out = sp.mustCtl(t, "port", "set", "sc3", "ingress-rate=100M", "egress-rate=1G", "egress-burst=10M")
	if !strings.Contains(out, "tun:sc3,netns="+ns[2].Name+",ingress-rate=100M,egress-rate=1G,egress-burst=10M") {
		t.Errorf("port set printed:\n%s", out)
	}
	out = sp.mustCtl(t, "port", "set", "sc3", "egress-rate=", "egress-burst=")
	if !strings.Contains(out, "tun:sc3,netns="+ns[2].Name+",ingress-rate=100M ") {
		t.Errorf("port set printed:\n%s", out)
	}
	if err := ping(t, ns[2], "198.18.1.1"); err != nil {
		t.Errorf("after port set: %v", err)
	}

	// A capture of the busy port with the smallest buffer keeps what it
	// was asked for and says what it lost.
	pcapFile := filepath.Join(t.TempDir(), "sc1.pcap")
	if _, errOut, code := sp.ctl(t, "capture", "sc1", "-c", "4", "-B", "256", "--filter", "proto icmp", "-w", pcapFile); code != exitOK || !strings.Contains(errOut, "4 packets captured; 0 packets dropped because the capture's buffer was full") {
		t.Errorf("capture: exit %d, stderr %q", code, errOut)
	}

	// What the switch refuses exits 1 with its message; a bad argument
	// exits 2 before asking it.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"port", "del", "nope"}, exitFailure, "port nope: not found"},
		{[]string{"port", "set", "nope", "ingress-rate=1M"}, exitFailure, "port nope: not found"},
		{[]string{"port", "set", "sc3", "queues=2"}, exitFailure, "remove the port and add it again"},
		{[]string{"port", "set", "sc3", "ingress-rate=fast"}, exitFailure, `ingress-rate "fast"`},
		{[]string{"port", "set", "sc3"}, exitUsage, "port set needs"},
		{[]string{"port", "set", "sc3", "ingress-rate"}, exitUsage, "want OPTION=VALUE"},
		{[]string{"port", "add", "tun:sc3,netns=" + ns[0].Name}, exitFailure, "a port named sc3"},
		{[]string{"port", "add", "tun:sc9,netns=softnet-no-such-ns"}, exitFailure, "softnet-no-such-ns"},
		{[]string{"route", "add", "198.18.3.0/24=sc1"}, exitFailure, "a route to 198.18.3.0/24"},
		{[]string{"route", "add", "198.18.9.0/24=nope"}, exitFailure, "no port nope"},
		{[]string{"route", "del", "198.18.9.0/24"}, exitFailure, "not found"},
		{[]string{"capture", "sc1", "-B", "64", "-w", "-"}, exitFailure, `buffer="64": want 256 to 65536`},
		{[]string{"port", "add", "tux:sc9"}, exitUsage, `unknown kind "tux"`},
		{[]string{"port", "add"}, exitUsage, "needs SPEC"},
		{[]string{"route", "add", "198.18.9.0/24"}, exitUsage, "want PREFIX=PORT"},
		{[]string{"route", "del", "198.18.9"}, exitUsage, "route del"},
		{[]string{"--socket", filepath.Join(t.TempDir(), "none.sock"), "port", "list"}, exitNoSwitch, "no switch is running"},
	} {
		_, errOut, code := sp.ctl(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("ctl %v: exit %d, stderr %q; want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}

	sp.mustCtl(t, "port", "del", "sc3")
	if out, err := ns[2].Exec("ip", "link", "show", "sc3"); err == nil {
		t.Errorf("sc3 still in its namespace after port del:\n%s", out)
	}
	if out := sp.mustCtl(t, "route", "list"); strings.Contains(out, "sc3") {
		t.Errorf("sc3's route outlived it:\n%s", out)
	}
	select {
	case <-pinged:
		t.Fatal("the ping ended before the ports were changed: it proves nothing (make it longer)")
	default:
	}
	// The reply count, not the timing, is what is checked.
	m := pingStats.FindStringSubmatch(<-pinged)
	if m == nil || m[1] != fmt.Sprint(pings) || m[2] != fmt.Sprint(pings) {
		t.Errorf("ping between the untouched guests: %v, want %d of %d", m, pings, pings)
	}

	// Echo requests to a prefix routed nowhere drop as NO_ROUTE on sc1,
	// which drops --json lists as JSON, as the table does.
	_ = ping(t, ns[0], "198.18.9.1")
	var rows []dropRow
	if err := json.Unmarshal([]byte(sp.mustCtl(t, "drops", "--json")), &rows); err != nil ||
		!slices.ContainsFunc(rows, func(r dropRow) bool {
			return r.Port == "sc1" && r.Dir == "" && r.Reason == "NO_ROUTE" && r.Packets >= 2
		}) {
		t.Errorf("drops --json: %+v, %v; want sc1's NO_ROUTE drops", rows, err)
	}
	if out := sp.mustCtl(t, "drops"); !regexp.MustCompile(`(?m)^sc1 +NO_ROUTE +\d+$`).MatchString(out) {
		t.Errorf("drops:\n%s", out)
	}

	// Without --config, SIGHUP is logged and the switch goes on.
	n := sp.logLen()
	if err := sp.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	sp.waitLog(t, n, "nothing to reload", func(r map[string]any) bool {
		msg, _ := r["msg"].(string)
		return strings.Contains(msg, "nothing to reload")
	})
	if err := ping(t, ns[0], "198.18.2.1"); err != nil {
		t.Errorf("after SIGHUP: %v", err)
	}
	sp.stop(t)
}

// SIGHUP applies a changed configuration file (with the command line's
// flags, as at start) and refuses a broken one, changing nothing and
// naming its file and line.
func TestSwitchSIGHUP(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	netnstest.RequireRoot(t)
	bin := buildSoftnet(t)
	var ns [3]*netnstest.NS
	for i := range ns {
		ns[i] = netnstest.New(t)
	}
	file := filepath.Join(t.TempDir(), "softnet.conf")
	write := func(lines ...string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	port := func(i int) string { return fmt.Sprintf("port tun:sh%d,netns=%s", i+1, ns[i].Name) }
	write("# two guests", port(0), port(1), "route 198.18.1.0/24=sh1", "route 198.18.2.0/24=sh2", "route 198.18.9.0/24=sh2")
	sp := startSwitch(t, bin, "--config", file, "--route", "198.18.8.0/24=sh1")
	guest(t, ns[0], "sh1", 1)
	guest(t, ns[1], "sh2", 2)
	hup := func() int {
		t.Helper()
		n := sp.logLen()
		if err := sp.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		return n
	}
	routes := func() []string {
		t.Helper()
		return routeList(t, sp)
	}
	portNames := func() []string {
		t.Helper()
		var ports []control.Port
		if err := json.Unmarshal([]byte(sp.mustCtl(t, "port", "list", "--json")), &ports); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range ports {
			names = append(names, p.Name)
		}
		return names
	}
	isReload := func(r map[string]any) bool {
		msg, _ := r["msg"].(string)
		return strings.HasPrefix(msg, "config reloaded")
	}

	// A port and its route added, a route removed.
	write("# three guests", port(0), port(1), port(2), "route 198.18.1.0/24=sh1", "route 198.18.2.0/24=sh2", "route 198.18.3.0/24=sh3")
	n := hup()
	var changes []string
	for len(changes) < 3 {
		var rec map[string]any
		rec, n = sp.waitLog(t, n, "the reload's changes", func(r map[string]any) bool {
			return isReload(r) || r["level"] == "ERROR"
		})
		if rec["level"] == "ERROR" {
			t.Fatalf("reload failed: %v", rec)
		}
		if by, _ := rec["by"].(map[string]any); by["signal"] != "SIGHUP" {
			t.Errorf("reload's change logged by %v, want the signal", rec["by"])
		}
		changes = append(changes, rec["change"].(string))
	}
	if rec, _ := sp.waitLog(t, 0, "the port added", func(r map[string]any) bool { return r["msg"] == "port added" }); rec["port"] != "sh3" {
		t.Errorf("port added: %v", rec)
	} else if by, _ := rec["by"].(map[string]any); by["signal"] != "SIGHUP" {
		t.Errorf("port added by %v, want the signal", rec["by"])
	}
	slices.Sort(changes)
	want := []string{"port added: tun:sh3,netns=" + ns[2].Name, "route added: 198.18.3.0/24=sh3", "route removed: 198.18.9.0/24=sh2"}
	if !slices.Equal(changes, want) {
		t.Errorf("changes logged %q, want %q", changes, want)
	}
	if got := portNames(); !slices.Equal(got, []string{"sh1", "sh2", "sh3"}) {
		t.Errorf("ports after the reload: %v", got)
	}
	// The command line's route stays: the reloaded configuration is the
	// file and the flags.
	wantRoutes := []string{"198.18.1.0/24=sh1", "198.18.2.0/24=sh2", "198.18.8.0/24=sh1", "198.18.3.0/24=sh3"}
	if got := routes(); !slices.Equal(got, wantRoutes) {
		t.Errorf("routes after the reload: %v, want %v", got, wantRoutes)
	}
	guest(t, ns[2], "sh3", 3)
	for _, to := range []string{"198.18.1.1", "198.18.2.1"} {
		if err := ping(t, ns[2], to); err != nil {
			t.Errorf("from the reloaded port's guest: %v", err)
		}
	}
	var cfgBefore control.Config
	if err := control.NewClient(sp.socket).Get(context.Background(), "/v1/config", &cfgBefore); err != nil {
		t.Fatal(err)
	}

	// Broken files change nothing; the error names the file's line.
	for _, c := range []struct {
		lines []string
		want  string
	}{
		{[]string{port(0), port(1), "route 198.18.4.0/24", "port tun:sh4"}, file + ":3: "},
		{[]string{port(0), port(1), "route 198.18.1.0/24=sh1", "route 198.18.1.0/24=sh2"}, file + ":4: "},
		{[]string{"workers 2", port(0), port(1), port(2)}, "needs a restart"},
		{[]string{port(0), port(1), port(2), "port tun:sh5,netns=softnet-no-such-ns"}, "softnet-no-such-ns"},
	} {
		write(c.lines...)
		rec, _ := sp.waitLog(t, hup(), "the reload's error", func(r map[string]any) bool {
			return isReload(r) || r["level"] == "ERROR"
		})
		if msg, _ := rec["err"].(string); rec["level"] != "ERROR" || !strings.Contains(msg, c.want) {
			t.Errorf("reload of %q: logged %v, want an error with %q", c.lines, rec, c.want)
		}
		var cfg control.Config
		if err := control.NewClient(sp.socket).Get(context.Background(), "/v1/config", &cfg); err != nil || cfg != cfgBefore {
			t.Errorf("reload of %q changed the configuration to:\n%s(%v)", c.lines, cfg.Text, err)
		}
	}
	if _, err := ns[2].Exec("ip", "link", "show", "sh3"); err != nil {
		t.Errorf("sh3 gone after the failed reloads: %v", err)
	}
	if err := ping(t, ns[0], "198.18.2.1"); err != nil {
		t.Errorf("after the reloads: %v", err)
	}

	// A missing file is an error too, and the switch goes on.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	rec, _ := sp.waitLog(t, hup(), "the missing file's error", func(r map[string]any) bool { return r["level"] == "ERROR" })
	if msg, _ := rec["err"].(string); !strings.Contains(msg, "no such file") {
		t.Errorf("reload of a missing file: %v", rec)
	}
	sp.stop(t)
}

// --control-group gives the socket to a group, whose members may then
// use it; a group that does not exist stops the switch before it starts.
func TestSwitchControlGroup(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "sw.sock")
	_, errOut, code := run(t, "switch", "--control", socket, "--control-group", "softnet-no-such-group")
	if code != exitUsage || !strings.Contains(errOut, `--control-group: group "softnet-no-such-group": no such group`) {
		t.Errorf("unknown group: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket made for an unknown group: %v", err)
	}
	if _, errOut, code := run(t, "switch", "--control", "", "--control-group", "daemon"); code != exitUsage || !strings.Contains(errOut, "no control socket") {
		t.Errorf("--control-group without a socket: exit %d, stderr %q", code, errOut)
	}

	netnstest.RequireRoot(t) // giving the socket to a group one is not in needs CAP_CHOWN
	name, gid := "", -1
	for _, g := range []string{"nogroup", "daemon", "bin"} {
		if id, err := unixsock.LookupGroup(g); err == nil && id != os.Getegid() {
			name, gid = g, id
			break
		}
	}
	if gid < 0 {
		// Any name resolves to the process's own group, which a socket
		// has without the flag: the check below would prove nothing.
		t.Skip("no group other than the process's own: nogroup, daemon and bin do not exist")
	}
	sp := startSwitch(t, buildSoftnet(t), "--control-group", name)
	fi, err := os.Stat(sp.socket)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Gid) != gid || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket %v with group %d, want 0660 and %s (%d)", fi.Mode(), st.Gid, name, gid)
	}
	sp.stop(t)
}

// A user the socket's mode keeps out is told so, with what to do about
// it, and ctl exits 4 (not 1, which is the switch refusing a request).
func TestCtlPermissionDenied(t *testing.T) {
	netnstest.RequireRoot(t) // to run ctl as another user
	bin := buildSoftnet(t)
	sp := startSwitch(t, bin)
	// The binary's and the socket's directories, and theirs, open to
	// the other user: what keeps it out is the socket's mode alone.
	for _, f := range []string{bin, sp.socket} {
		for _, d := range []string{filepath.Dir(f), filepath.Dir(filepath.Dir(f))} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.Command(bin, "ctl", "--socket", sp.socket, "stats")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitDenied || !strings.Contains(stderr.String(), "permission denied") || !strings.Contains(stderr.String(), "--control-group GROUP") {
		t.Errorf("ctl as uid 65534: %v, stderr %q; want exit %d and a hint about --control-group", err, stderr.String(), exitDenied)
	}
	sp.stop(t)
}

// softnet ctl capture and drops --watch, open when the switch stops, end
// cleanly and say that the switch stopped.
func TestCtlStreamsEndWhenTheSwitchStops(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	netnstest.RequireRoot(t)
	bin := buildSoftnet(t)
	var ns [2]*netnstest.NS
	for i := range ns {
		ns[i] = netnstest.New(t)
	}
	sp := startSwitch(t, bin, "--port", "tun:ss1,netns="+ns[0].Name, "--port", "tun:ss2,netns="+ns[1].Name,
		"--route", "198.18.1.0/24=ss1", "--route", "198.18.2.0/24=ss2")
	guest(t, ns[0], "ss1", 1)
	guest(t, ns[1], "ss2", 2)

	// The two clients, as an operator runs them.
	type client struct {
		cmd            *exec.Cmd
		stdout, stderr *lockedBuffer
		exited         chan struct{}
		err            error // Wait's, once exited is closed
	}
	start := func(args ...string) *client {
		c := &client{cmd: exec.Command(bin, append([]string{"ctl", "--socket", sp.socket}, args...)...),
			stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, exited: make(chan struct{})}
		c.cmd.Stdout, c.cmd.Stderr = c.stdout, c.stderr
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { c.err = c.cmd.Wait(); close(c.exited) }()
		t.Cleanup(func() {
			select {
			case <-c.exited:
			default:
				_ = c.cmd.Process.Kill()
				<-c.exited
			}
		})
		return c
	}
	pcapFile := filepath.Join(t.TempDir(), "ss1.pcap")
	capture := start("capture", "ss1", "-w", pcapFile)
	watch := start("drops", "--watch")
	// The capture runs once its file has the pcap header; the watch once
	// it shows a drop: a packet from ss2's prefix sent on ss1, dropped as
	// spoofed. Bounded: at most 200 packets, 50 ms apart.
	for i := 0; ; i++ {
		fi, err := os.Stat(pcapFile)
		if err == nil && fi.Size() >= 24 && strings.Contains(watch.stdout.String(), "IP_RPFILTER") {
			break
		}
		if i == 200 {
			t.Fatalf("the clients did not start within 10 s: capture %q, watch %q %q", capture.stderr.String(), watch.stdout.String(), watch.stderr.String())
		}
		pkt := make([]byte, 64)
		pkt = pkt[:packet.PutUDP(pkt, netip.MustParseAddrPort("198.18.2.7:1000"), netip.MustParseAddrPort("198.18.2.1:7"), []byte("spoofed"))]
		ns[0].Inject(t, "ss1", false, pkt)
		time.Sleep(50 * time.Millisecond)
	}
	if err := ping(t, ns[0], "198.18.2.1"); err != nil {
		t.Fatal(err)
	}
	sp.stop(t)
	for name, c := range map[string]*client{"capture": capture, "drops --watch": watch} {
		select {
		case <-c.exited:
			if c.err != nil || !strings.Contains(c.stderr.String(), "; the switch stopped") {
				t.Errorf("ctl %s: %v, stderr %q", name, c.err, c.stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("ctl %s still running 10 s after the switch stopped", name)
		}
	}
	// The capture holds the pings: 2 requests and 2 replies.
	var n int
	if _, err := fmt.Sscanf(capture.stderr.String(), "%d packets captured", &n); err != nil || n < 4 {
		t.Errorf("ctl capture: %q, want 4 packets or more", capture.stderr.String())
	}
}

// lockedBuffer is a child process's output, read while it runs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
