package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"softnet.dev/internal/control"
	"softnet.dev/internal/netnstest"
	"softnet.dev/internal/vswitch"
)

// readState reads and checks the state file at path, failing the test
// if it is not a valid state.
func readState(t *testing.T, path string) vswitch.Config {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := vswitch.ParseState(path, b)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// items lists cfg's ports and routes with their origins, as "SPEC ORIGIN".
func items(cfg vswitch.Config) []string {
	var out []string
	for _, p := range cfg.Ports {
		out = append(out, p.String()+" "+p.Origin.String())
	}
	for _, r := range cfg.Routes {
		out = append(out, r.String()+" "+r.Origin.String())
	}
	return out
}

// A switch with --state saves every port and route softnet ctl adds
// before it answers, and a switch started again with the state has them
// again, with their origins, beside the configuration's. A port whose
// namespace went away while the switch was down is reported and
// skipped; the others come up and reach each other.
func TestSwitchStateRestores(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	netnstest.RequireRoot(t)
	bin := buildSoftnet(t)
	var ns [3]*netnstest.NS
	for i := range ns {
		ns[i] = netnstest.New(t)
	}
	dir := t.TempDir()
	state, conf := filepath.Join(dir, "state.json"), filepath.Join(dir, "softnet.conf")
	if err := os.WriteFile(conf, []byte("port tun:sr1,netns="+ns[0].Name+"\nroute 198.18.1.0/24=sr1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", conf, "--state", state}
	sp := startSwitch(t, bin, args...)
	sp.mustCtl(t, "port", "add", "tun:sr2,netns="+ns[1].Name)
	sp.mustCtl(t, "route", "add", "198.18.2.0/24=sr2")
	sp.mustCtl(t, "port", "add", "tun:sr3,netns="+ns[2].Name)
	sp.mustCtl(t, "route", "add", "198.18.3.0/24=sr3")
	want := []string{"tun:sr1,netns=" + ns[0].Name + " config", "tun:sr2,netns=" + ns[1].Name + " api", "tun:sr3,netns=" + ns[2].Name + " api",
		"198.18.1.0/24=sr1 config", "198.18.2.0/24=sr2 api", "198.18.3.0/24=sr3 api"}
	if got := items(readState(t, state)); !slices.Equal(got, want) {
		t.Errorf("state once acknowledged %q, want %q", got, want)
	}
	// A second switch on the same state is refused before it opens
	// anything.
	_, errOut, code := run(t, "switch", "--control", filepath.Join(dir, "other.sock"), "--state", state, "--port", "tun:sr9,netns="+ns[0].Name)
	if code != exitFailure || !strings.Contains(errOut, "state file "+state+": in use by another process") {
		t.Errorf("a second switch on the state: exit %d, %s", code, errOut)
	}
	sp.stop(t)
	ns[2].Delete(t)

	sp = startSwitch(t, bin, args...)
	rec, _ := sp.waitLog(t, 0, "the skipped port", func(r map[string]any) bool { return r["msg"] == "state file: port skipped; its routes too" })
	if rec["port"] != "sr3" || !strings.Contains(rec["err"].(string), ns[2].Name) || rec["file"] != state {
		t.Errorf("skipped %v", rec)
	}
	if got := items(readState(t, state)); !slices.Equal(got, []string{want[0], want[1], want[3], want[4]}) {
		t.Errorf("state after the restart %q", got)
	}
	out := sp.mustCtl(t, "port", "list", "--json")
	if !strings.Contains(out, `"name":"sr2"`) || !strings.Contains(out, `"origin":"api"`) || strings.Contains(out, "sr3") {
		t.Errorf("ports after the restart: %s", out)
	}
	guest(t, ns[0], "sr1", 1)
	guest(t, ns[1], "sr2", 2)
	if err := ping(t, ns[0], "198.18.2.1"); err != nil {
		t.Errorf("across the restored port: %v", err)
	}
	sp.stop(t)
}

// A state file that is truncated, garbage, of another version or names
// what cannot be is refused with its name and what is wrong, and the
// switch starts nothing; --state-reset starts without it and keeps it
// aside.
func TestSwitchStateBad(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	good := `{"version": 1, "workers": 1, "ports": [{"spec": "tun:sb2,netns=` + ns.Name + `", "origin": "api"}], "routes": [], "services": [], "filters": []}`
	for name, c := range map[string]struct{ text, want string }{
		"truncated":   {good[:len(good)/2], "not a state (truncated or garbled?): unexpected EOF"},
		"garbage":     {"\x00\x17garbage", "not a state (truncated or garbled?)"},
		"two values":  {good + good, "more than one JSON value"},
		"version":     {strings.Replace(good, `"version": 1`, `"version": 7`, 1), "version 7, want 1"},
		"bad spec":    {strings.Replace(good, "tun:sb2", "tun:", 1), "port 1: port"},
		"bad origin":  {strings.Replace(good, `"api"`, `"kernel"`, 1), `origin "kernel": want config, api or agent`},
		"other kinds": {strings.Replace(good, "tun:sb2", "tap:sb2", 1), "its ports and routes with the configuration's: mixing"},
	} {
		if err := os.WriteFile(state, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := run(t, "switch", "--control", filepath.Join(dir, "sw.sock"), "--state", state, "--port", "tun:sb1,netns="+ns.Name)
		if code != exitFailure || !strings.Contains(errOut, "state file "+state) || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "nothing was started") {
			t.Errorf("%s: exit %d, stderr %s", name, code, errOut)
		}
		if out, err := ns.Exec("ip", "link", "show", "sb1"); err == nil {
			t.Errorf("%s: the refused start left a device:\n%s", name, out)
		}
	}
	const garbage = "{garbage"
	if err := os.WriteFile(state, []byte(garbage), 0o600); err != nil {
		t.Fatal(err)
	}
	sp := startSwitch(t, buildSoftnet(t), "--state", state, "--state-reset", "--port", "tun:sb1,netns="+ns.Name)
	rec, _ := sp.waitLog(t, 0, "the reset", func(r map[string]any) bool { return strings.HasPrefix(r["msg"].(string), "--state-reset") })
	aside, _ := rec["aside"].(string)
	if b, err := os.ReadFile(aside); string(b) != garbage || err != nil || !strings.Contains(rec["its_error"].(string), "not a state") {
		t.Errorf("the bad state kept aside as %q: %q, %v; logged %v", aside, b, err, rec)
	}
	if got := items(readState(t, state)); !slices.Equal(got, []string{"tun:sb1,netns=" + ns.Name + " config"}) {
		t.Errorf("the new state %q", got)
	}
	sp.stop(t)
}

// killRounds is how many times TestSwitchStateSurvivesKill kills the
// switch.
const killRounds = 100

// A switch killed with SIGKILL at a random moment of a stream of API
// changes, 100 times, each time started again from its state: every
// start has every change that was acknowledged before the kill, and the
// change in flight either whole or not at all; the state file always
// reads as a state. vhost-user ports need no device, so each round is
// quick.
func TestSwitchStateSurvivesKill(t *testing.T) {
	bin := buildSoftnet(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 33))
	var changes, inFlightKept, inFlightLost int // what the rounds met
	acked := map[string]bool{}                  // the ports every start must have
	next := 0
	for round := range killRounds {
		sp := startSwitch(t, bin, "--state", state)
		var ports []control.Port
		c := control.NewClient(sp.socket)
		if err := c.Get(context.Background(), "/v1/ports", &ports); err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, p := range ports {
			got[p.Name] = true
		}
		if !maps.Equal(got, acked) {
			t.Fatalf("round %d: the restarted switch has %v, want %v", round, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(acked)))
		}
		// The stream: adds and removes, one at a time, until the kill.
		type op struct {
			name string
			add  bool
		}
		var inflight op
		killAfter := time.Duration(rng.IntN(40_000)) * time.Microsecond // before the stream shares rng
		done := make(chan struct{})
		var mu sync.Mutex
		stop := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				names := slices.Sorted(maps.Keys(acked))
				o := op{add: len(names) < 3 || rng.IntN(2) == 0}
				if o.add {
					next++
					o.name = fmt.Sprintf("k%d", next)
				} else {
					o.name = names[rng.IntN(len(names))]
				}
				inflight = o
				mu.Unlock()
				var err error
				if o.add {
					err = c.Post(context.Background(), "/v1/ports", control.PortRequest{Spec: "vhost-user:" + o.name + ",socket=" + filepath.Join(dir, o.name)}, nil)
				} else {
					err = c.Delete(context.Background(), "/v1/ports/"+o.name)
				}
				mu.Lock()
				if err == nil {
					changes++
					acked[o.name] = o.add
					if !o.add {
						delete(acked, o.name)
					}
					inflight = op{}
				}
				mu.Unlock()
				if err != nil {
					return // the switch was killed
				}
			}
		}()
		time.Sleep(killAfter)
		if err := sp.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		close(stop)
		<-done
		<-sp.exited
		// The state must be the acknowledged one, with the change in
		// flight or without it.
		saved := map[string]bool{}
		for _, p := range readState(t, state).Ports {
			saved[p.Name] = true
		}
		with := maps.Clone(acked)
		if inflight.name != "" {
			if inflight.add {
				with[inflight.name] = true
			} else {
				delete(with, inflight.name)
			}
		}
		switch {
		case maps.Equal(saved, acked):
			if inflight.name != "" {
				inFlightLost++
			}
		case maps.Equal(saved, with):
			inFlightKept++
			acked = with // the next start has it
		default:
			t.Fatalf("round %d (seed %d): the state has %v; acknowledged %v, in flight %+v", round, seed, slices.Sorted(maps.Keys(saved)), slices.Sorted(maps.Keys(acked)), inflight)
		}
	}
	t.Logf("seed %d: %d changes acknowledged; killed in flight %d times, the change saved %d times", seed, changes, inFlightKept+inFlightLost, inFlightKept)
}

// A switch asked to stop keeping its guests leaves their devices in
// place, up, with the addresses and routes the guests gave them; the
// next switch with the same state adopts them (the configuration's and
// the API's) and the guests reach each other again without being
// configured again. A kept device deleted while no switch ran is
// reported and its port skipped. A plain stop then removes every device.
func TestSwitchRestartKeepsGuests(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	netnstest.RequireRoot(t)
	bin := buildSoftnet(t)
	var ns [3]*netnstest.NS
	for i := range ns {
		ns[i] = netnstest.New(t)
	}
	dir := t.TempDir()
	state, conf := filepath.Join(dir, "state.json"), filepath.Join(dir, "softnet.conf")
	if err := os.WriteFile(conf, []byte("port tun:kg1,netns="+ns[0].Name+"\nroute 198.18.1.0/24=kg1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", conf, "--state", state}
	sp := startSwitch(t, bin, args...)
	if _, errOut, code := sp.ctl(t, "shutdown", "--keep-guests", "--socket", filepath.Join(dir, "none.sock")); code != exitNoSwitch {
		t.Errorf("shutdown of no switch: exit %d, %s", code, errOut)
	}
	for i, n := range []string{"kg2", "kg3"} {
		sp.mustCtl(t, "port", "add", "tun:"+n+",netns="+ns[i+1].Name)
		sp.mustCtl(t, "route", "add", fmt.Sprintf("198.18.%d.0/24=%s", i+2, n))
	}
	for i, n := range []string{"kg1", "kg2", "kg3"} {
		guest(t, ns[i], n, i+1)
	}
	if err := ping(t, ns[0], "198.18.2.1"); err != nil {
		t.Fatal(err)
	}
	// Pings every 10 ms across the restart, for the log.
	pinged := make(chan string, 1)
	go func() {
		out, _ := ns[0].ExecTimeout(30*time.Second, "ping", "-c", "400", "-i", "0.01", "-W", "1", "198.18.2.1")
		pinged <- out
	}()
	time.Sleep(300 * time.Millisecond)
	sp.mustCtl(t, "shutdown", "--keep-guests")
	select {
	case <-sp.exited:
		if sp.err != nil {
			t.Fatalf("switch: %v\n%s", sp.err, sp.logText())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("switch still running 15 s after shutdown")
	}
	for i, n := range []string{"kg1", "kg2", "kg3"} {
		out, err := ns[i].Exec("ip", "addr", "show", "dev", n)
		if err != nil || !strings.Contains(out, fmt.Sprintf("198.18.%d.1/24", i+1)) || !strings.Contains(out, ",UP") {
			t.Errorf("%s after a stop that keeps guests: %v\n%s", n, err, out)
		}
	}
	mustExec(t, ns[2], "ip", "link", "del", "kg3")

	sp = startSwitch(t, bin, args...)
	rec, _ := sp.waitLog(t, 0, "the skipped port", func(r map[string]any) bool { return r["msg"] == "state file: port skipped; its routes too" })
	if rec["port"] != "kg3" || !strings.Contains(rec["err"].(string), "its device went away") {
		t.Errorf("skipped %v", rec)
	}
	adopted := 0
	sp.mu.Lock()
	for _, r := range sp.log {
		if r["msg"] == "port" && r["adopted"] == true {
			adopted++
		}
	}
	sp.mu.Unlock()
	if adopted != 2 {
		t.Errorf("%d ports adopted their devices, want 2; log:\n%s", adopted, sp.logText())
	}
	// No guest is configured again.
	if err := ping(t, ns[0], "198.18.2.1"); err != nil {
		t.Errorf("across the adopted devices: %v", err)
	}
	out := <-pinged
	t.Logf("pings every 10 ms across the restart (machine loaded):\n%s", out[strings.LastIndex(strings.TrimRight(out, "\n"), "\n---"):])
	if got := items(readState(t, state)); !slices.Equal(got, []string{"tun:kg1,netns=" + ns[0].Name + " config", "tun:kg2,netns=" + ns[1].Name + " api",
		"198.18.1.0/24=kg1 config", "198.18.2.0/24=kg2 api"}) {
		t.Errorf("state after the restart %q", got)
	}
	sp.stop(t)
	for i, n := range []string{"kg1", "kg2"} {
		if out, err := ns[i].Exec("ip", "link", "show", n); err == nil {
			t.Errorf("%s outlived a plain stop:\n%s", n, out)
		}
	}
	// A switch without a state file refuses to keep guests.
	sp = startSwitch(t, bin, "--state", "", "--port", "tun:kg1,netns="+ns[0].Name, "--port", "tun:kg2,netns="+ns[1].Name)
	if _, errOut, code := sp.ctl(t, "shutdown", "--keep-guests"); code != exitFailure || !strings.Contains(errOut, "needs a switch with a state file") {
		t.Errorf("keep guests without a state: exit %d, %s", code, errOut)
	}
	sp.stop(t)
}

// A switch with a state file that dies (SIGKILL) leaves the devices it
// created, which are persistent while it runs, configured; the next
// switch adopts them and the guests talk again. Its plain stop then
// removes them.
func TestSwitchCrashKeepsGuests(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	netnstest.RequireRoot(t)
	bin := buildSoftnet(t)
	var ns [2]*netnstest.NS
	for i := range ns {
		ns[i] = netnstest.New(t)
	}
	state := filepath.Join(t.TempDir(), "state.json")
	sp := startSwitch(t, bin, "--state", state)
	for i, n := range []string{"kc1", "kc2"} {
		sp.mustCtl(t, "port", "add", "tun:"+n+",netns="+ns[i].Name)
		sp.mustCtl(t, "route", "add", fmt.Sprintf("198.18.%d.0/24=%s", i+1, n))
		guest(t, ns[i], n, i+1)
	}
	if err := ping(t, ns[0], "198.18.2.1"); err != nil {
		t.Fatal(err)
	}
	if err := sp.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-sp.exited
	sp = startSwitch(t, bin, "--state", state)
	if err := ping(t, ns[0], "198.18.2.1"); err != nil {
		t.Errorf("after a crash, across the adopted devices: %v\n%s", err, sp.logText())
	}
	sp.stop(t)
	for i, n := range []string{"kc1", "kc2"} {
		if out, err := ns[i].Exec("ip", "link", "show", n); err == nil {
			t.Errorf("%s outlived a plain stop:\n%s", n, out)
		}
	}
}
