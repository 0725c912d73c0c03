package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"softnet.dev/internal/vswitch"
)

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.ExecuteContext(context.Background())
	code = exitCodeTo(&errb, err)
	return out.String(), errb.String(), code
}

func TestBenchJSONLines(t *testing.T) {
	out, _, code := run(t, "bench", "--json", "--quiet", "--duration", "20ms", "--reps", "1", "flush", "alloc")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	results, goals := map[string]int{}, 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var obj map[string]any
		if err := json.Unmarshal(sc.Bytes(), &obj); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if _, isGoal := obj["goal"]; isGoal {
			// One repetition shows no spread: no verdict but inconclusive.
			if ratios, _ := obj["ratios"].([]any); obj["verdict"] != "inconclusive" || obj["met"] != false || len(ratios) != 1 {
				t.Errorf("goal line %q", sc.Text())
			}
			goals++
			continue
		}
		for _, k := range []string{"experiment", "variant", "metric", "value", "unit"} {
			if _, ok := obj[k]; !ok {
				t.Fatalf("line %q lacks %q", sc.Text(), k)
			}
		}
		if v, _ := obj["value"].(float64); !(v > 0) {
			t.Fatalf("non-positive value in %q", sc.Text())
		}
		results[obj["experiment"].(string)]++
	}
	if results["flush"] != 4 || results["alloc"] != 5 || goals != 4 {
		t.Fatalf("results per experiment: %v, %d goals", results, goals)
	}
}

func TestBenchTable(t *testing.T) {
	out, _, code := run(t, "bench", "--quiet", "--duration", "20ms", "--reps", "1", "flush")
	if code != exitOK || !strings.Contains(out, "swap-contended") || !strings.Contains(out, "goal swap <= 1.00x mutex") ||
		!strings.Contains(out, "inconclusive: one repetition shows no spread") || !strings.Contains(out, "0 met, 2 inconclusive, 0 not met") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "no-such-experiment"},
		{"bench", "--duration", "0s"},
		{"bench", "--no-such-flag"},
		// Unknown commands and missing or extra arguments: usage, not
		// "the switch refused" (1).
		{"no-such-command"},
		{"ctl", "no-such-command"},
		{"ctl", "port", "no-such-command"},
		{"ctl", "route", "no-such-command"},
		{"ctl", "capture"},
		{"ctl", "port", "del"},
		{"switch", "extra"},
		// --watch 0s would print once, as no --watch does.
		{"ctl", "stats", "--watch=0s"},
		{"ctl", "stats", "--watch", "0s"},
		{"ctl", "stats", "--watch=-1s"},
		// Refused before the ports are looked at (here there are none).
		{"switch", "--control", "", "--metrics", "nohost"},
		{"switch", "--control", "", "--metrics", "127.0.0.1:99999"},
	} {
		if _, _, code := run(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// A flag's bad value is told in the user's terms, not strconv's or
// time's.
func TestFlagValueErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"switch", "--workers", "x"}, `--workers "x": want a whole number`},
		{[]string{"switch", "--busy-poll", "5"}, `--busy-poll "5": want a duration such as 200µs, 5s or 1m`},
		{[]string{"ctl", "stats", "-n", "many"}, `--count "many": want a whole number`},
		{[]string{"switch", "--filter", "allow", "dport=53"}, `unexpected argument "dport=53": each flag takes one value; quote a rule with spaces`},
	} {
		_, stderr, code := run(t, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "strconv") || strings.Contains(stderr, "time:") {
			t.Errorf("%q: exit %d, %s; want %q", c.args, code, stderr, c.want)
		}
	}
}

func TestHelp(t *testing.T) {
	out, _, code := run(t, "bench", "--help")
	if code != exitOK || !strings.Contains(out, "remote-free") || !strings.Contains(out, "--duration") {
		t.Fatalf("exit %d, help:\n%s", code, out)
	}
}

// softnet switch --help describes every kind of port of the switch's
// table, and every option every port has.
func TestSwitchHelpListsTheKinds(t *testing.T) {
	out, _, code := run(t, "switch", "--help")
	if code != exitOK {
		t.Fatalf("exit %d, help:\n%s", code, out)
	}
	for _, k := range vswitch.Kinds() {
		if !strings.Contains(out, "\n  "+k+":NAME") {
			t.Errorf("help lacks the kind %s:\n%s", k, out)
		}
	}
	for _, opt := range []string{"netns", "dev", "queues", "offload", "gro", "io", "allow", "mac", "dhcp-server", "router"} {
		if !strings.Contains(out, "\n  "+opt+" ") {
			t.Errorf("help lacks the option %s", opt)
		}
	}
}

// Bad addresses and prefixes are reported in the user's terms, never
// in the Go parser's (netip.ParsePrefix("...")).
func TestAddressErrorsSpeakTheUsersTerms(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ctl", "route", "del", "10.0.0.0"}, `"10.0.0.0" is not a prefix: want ADDRESS/LENGTH`},
		{[]string{"ctl", "route", "del", "10.0.0.0/33"}, `length "33": want 0 to 32 for IPv4`},
		{[]string{"switch", "--control", "", "--port", "tun:snc0,allow=10.0.0.0/33", "--port", "tun:snc1"}, `length "33": want 0 to 32`},
		{[]string{"switch", "--control", "", "--filter", "deny src=1.2.3", "--port", "tun:snc0", "--port", "tun:snc1"}, `"1.2.3" is neither a prefix nor an IP address`},
		{[]string{"switch", "--control", "", "--port", "tun:", "--port", "tun:snc1"}, `no port name: want tun:NAME`},
		{[]string{"switch", "--control", "", "--port", "vxlan:v,vni=5", "--port", "tun:snc1"}, `vxlan ports need local=IP`},
	} {
		_, stderr, code := run(t, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "Parse") {
			t.Errorf("%q: exit %d, %s; want exit %d and %q", c.args, code, stderr, exitUsage, c.want)
		}
	}
}

// --cpus names CPUs this process may run on: a worker pinned to another
// would run unpinned, on CPUs meant for the VMs.
func TestSwitchRefusesCPUsItCannotUse(t *testing.T) {
	_, stderr, code := run(t, "switch", "--control", "", "--cpus", "0,1023")
	if code != exitUsage || !strings.Contains(stderr, "--cpus 0,1023: CPU 1023 is not one this process may run on") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// --metrics takes a bare port as every address's, as :PORT.
func TestMetricsListenAddr(t *testing.T) {
	for in, want := range map[string]string{"": "", "9477": ":9477", ":9477": ":9477", "127.0.0.1:9477": "127.0.0.1:9477", "[::1]:9477": "[::1]:9477"} {
		if got, err := metricsListenAddr(in); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "65536", "nohost", "127.0.0.1:0", "127.0.0.1:http", "::1:9477"} {
		if got, err := metricsListenAddr(in); err == nil || !strings.Contains(err.Error(), "--metrics") {
			t.Errorf("%q: %q, %v; want an error", in, got, err)
		}
	}
}
