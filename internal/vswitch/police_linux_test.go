package vswitch

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/port"
)

// flood sends n echo requests of 1000 bytes from g to dst 10 ms apart
// and returns how many were answered.
func floodPing(t *testing.T, g *guest, dst string, n int) int {
	t.Helper()
	out, _ := g.ns.ExecTimeout(30*time.Second, "ping", "-c", fmt.Sprint(n), "-i", "0.01", "-s", "1000", "-W", "1", dst)
	m := regexp.MustCompile(`(\d+) received`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ping %s from %s:\n%s", dst, g.ns.Name, out)
	}
	got, _ := strconv.Atoi(m[1])
	return got
}

// waitDrops waits until port i has counted at least want drops of r,
// and returns the count.
func waitDrops(sw *Switch, i int, r drop.Reason, want uint64) uint64 {
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := sw.Stats().Ports[i].Drops[r]
		if n >= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Rate limits change while the port runs, through ChangePort (the API)
// and Apply (SIGHUP), without reopening it: at 1 kbit/s a 1000-byte echo
// takes 8 s of tokens, so of ten sent 10 ms apart at most one passes,
// and the rest are dropped on the limited port with the direction's
// reason.
func TestSwitchRateLimitsLive(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 2)
	a, b := gs[0], gs[1]
	sw, stop := startSwitchConfig(t, gs, Config{})
	ping(t, a, b.v4)
	devices := func() []port.Port {
		var out []port.Port
		for _, pv := range sw.Ports() {
			out = append(out, pv.Port)
		}
		return out
	}
	before := devices()

	spec, err := sw.ChangePort(a.dev, []portkind.Field{{Key: "ingress-rate", Value: "1k"}, {Key: "ingress-burst", Value: "8"}}, slog.Attr{})
	if err != nil {
		t.Fatal(err)
	}
	if want := a.spec(t, ",ingress-rate=1k,ingress-burst=8").String(); spec.String() != want || sw.Config().Ports[0].String() != want {
		t.Fatalf("changed to %s (config %s), want %s", spec, sw.Config().Ports[0], want)
	}
	if got := floodPing(t, a, b.v4, 10); got > 1 {
		t.Errorf("%d of 10 echoes passed a's ingress limit", got)
	}
	if n := waitDrops(sw, 0, drop.PoliceIngress, 9); n < 9 {
		t.Errorf("a's port counted %d POLICE_INGRESS drops, want at least 9", n)
	}

	// SIGHUP's way: a's limit goes, b gets one on what it receives.
	text := strings.Replace(sw.Config().Text(), ",ingress-rate=1k,ingress-burst=8", "", 1)
	text = strings.Replace(text, "netns="+b.ns.Name, "netns="+b.ns.Name+",egress-rate=1k,egress-burst=8", 1)
	cfg, err := ParseConfig("test.conf", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	changes, err := sw.Apply(cfg, BySignal("SIGHUP"))
	if err != nil || len(changes) != 2 || !strings.HasPrefix(changes[0], "port changed: ") || !strings.HasPrefix(changes[1], "port changed: ") {
		t.Fatalf("apply: %v, changes %q", err, changes)
	}
	if got := floodPing(t, a, b.v4, 10); got > 1 {
		t.Errorf("%d of 10 echoes passed b's egress limit", got)
	}
	if n := waitDrops(sw, 1, drop.PoliceEgress, 9); n < 9 {
		t.Errorf("b's port counted %d POLICE_EGRESS drops, want at least 9", n)
	}

	// An empty value removes the option: the default, no limit.
	if _, err := sw.ChangePort(b.dev, []portkind.Field{{Key: "egress-rate"}, {Key: "egress-burst"}}, slog.Attr{}); err != nil {
		t.Fatal(err)
	}
	pingAll(t, a, b.v4, 3)
	for i, d := range devices() {
		if d != before[i] {
			t.Errorf("port %d was reopened", i)
		}
	}

	for name, tc := range map[string]struct {
		name string
		opts []portkind.Field
		want error
	}{
		"no such port":     {"nope", []portkind.Field{{Key: "ingress-rate", Value: "1M"}}, ErrNotFound},
		"not a rate":       {a.dev, []portkind.Field{{Key: "ingress-rate", Value: "fast"}}, ErrInvalid},
		"burst, no rate":   {a.dev, []portkind.Field{{Key: "egress-burst", Value: "1M"}}, ErrInvalid},
		"not changed live": {a.dev, []portkind.Field{{Key: "queues", Value: "2"}}, ErrRestart},
	} {
		if _, err := sw.ChangePort(tc.name, tc.opts, slog.Attr{}); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	stop()
}
