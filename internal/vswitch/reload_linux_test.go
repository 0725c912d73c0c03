package vswitch

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/port"
)

// portOf returns the port named name as the switch runs it, or nil.
func portOf(sw *Switch, name string) port.Port {
	for _, pv := range sw.Ports() {
		if pv.Spec.Name == name {
			return pv.Port
		}
	}
	return nil
}

// withPort returns cfg with its port of spec's name replaced by spec.
func withPort(t *testing.T, cfg Config, spec string) Config {
	t.Helper()
	p, err := ParsePort(spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Ports = slices.Clone(cfg.Ports)
	cfg.Ports[cfg.portIndex(p.Name)] = p
	return cfg
}

// A reload that gives a vxlan port another remote changes the running
// port: its sockets stay open, what it learned stays, the guests' port
// is not touched, and the new remote is reached at once; the same in a
// configuration that is invalid elsewhere changes nothing. One that
// changes its VNI closes the port and opens it again.
func TestApplyChangesVXLANRemotesInPlace(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	hosts := newThreeHosts(t)
	gs := newGuests(t, 3)
	for i, g := range gs {
		g.v4, g.v6 = fmt.Sprintf("198.18.9.%d", i+1), fmt.Sprintf("2001:db8:9::%d", i+1)
	}
	sw, _ := startOverlaySwitch(t, gs[0], hosts[0], hosts[1])
	startOverlaySwitch(t, gs[1], hosts[1], hosts[0], hosts[2])
	startOverlaySwitch(t, gs[2], hosts[2], hosts[0], hosts[1])
	ping(t, gs[0], gs[1].v4)
	vx, tap := portOf(sw, "vx"), portOf(sw, gs[0].dev)
	learned := vxlanStatsOf(t, sw.Stats()).Stations
	if learned == 0 {
		t.Fatal("the vxlan port learned nothing from the ping")
	}

	cur := sw.Config()
	spec := cur.Ports[cur.portIndex("vx")].String() + ",remote=" + hosts[2].addr.String()
	next := withPort(t, cur, spec)

	// The whole configuration is checked before the port is touched: a
	// route to a bridged port refuses the change of remotes with it.
	bad := next
	bad.Routes = []RouteSpec{{Prefix: netip.MustParsePrefix("198.18.50.0/24"), Port: "vx"}}
	if _, err := sw.Apply(bad, slog.Attr{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a route to a bridged port: %v", err)
	}
	if sw.Config().Text() != cur.Text() || portOf(sw, "vx") != vx {
		t.Error("a refused configuration changed the switch")
	}

	changes, err := sw.Apply(next, slog.Attr{})
	if want := []string{"port changed: " + next.Ports[1].String()}; err != nil || !slices.Equal(changes, want) {
		t.Fatalf("changes %q, %v; want %q", changes, err, want)
	}
	if portOf(sw, "vx") != vx || portOf(sw, gs[0].dev) != tap {
		t.Fatal("a change of remotes reopened a port")
	}
	if got := vxlanStatsOf(t, sw.Stats()).Stations; got < learned {
		t.Errorf("%d stations learned before the change, %d after", learned, got)
	}
	if sw.Config().Text() != next.Text() {
		t.Errorf("running configuration\n%s\nwant\n%s", sw.Config().Text(), next.Text())
	}
	ping(t, gs[0], gs[2].v4)

	// What the kind cannot take live reopens the port.
	other := withPort(t, sw.Config(), strings.Replace(spec, "vni=42", "vni=43", 1))
	changes, err = sw.Apply(other, slog.Attr{})
	if want := []string{"port removed: vx", "port added: " + other.Ports[1].String()}; err != nil || !slices.Equal(changes, want) {
		t.Fatalf("changes %q, %v; want %q", changes, err, want)
	}
	if portOf(sw, "vx") == vx || portOf(sw, gs[0].dev) != tap {
		t.Fatal("a change of VNI did not reopen the vxlan port alone")
	}
}

// A reload that changes a routed vxlan port's remote VTEP MAC (its fdb=)
// changes the running port, and its routes reach the remote by the new
// MAC at once: frames to a wrong MAC are refused by the far end
// (OTHERHOST), to the right one they arrive.
func TestApplyChangesRoutedVXLANInPlace(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	ha, hb := newUnderlay(t, false)
	gs := routedGuests(t)
	sw, _ := startRoutedSwitch(t, 0, gs[0], ha, hb, "")
	swB, _ := startRoutedSwitch(t, 1, gs[1], hb, ha, "")
	ping(t, gs[0], gs[1].v4)
	vx := portOf(sw, "vx")
	good := sw.Config()
	spec := good.Ports[good.portIndex("vx")].String()
	wrong := withPort(t, good, strings.Replace(spec, "fdb="+vtepMAC[1], "fdb=02:00:00:00:42:99", 1))
	for _, cfg := range []Config{wrong, good} {
		changes, err := sw.Apply(cfg, slog.Attr{})
		if want := []string{"port changed: " + cfg.Ports[1].String()}; err != nil || !slices.Equal(changes, want) {
			t.Fatalf("changes %q, %v; want %q", changes, err, want)
		}
		if portOf(sw, "vx") != vx {
			t.Fatal("a change of a VTEP MAC reopened the port")
		}
		if cfg.Ports[1].String() == spec {
			break
		}
		pingOnce(gs[0], gs[1].v4)
		waitFor(t, 15*time.Second, "a frame to the wrong VTEP MAC refused", func() bool {
			return vxlanStatsOf(t, swB.Stats()).RxDrops[drop.OtherHost] > 0
		})
	}
	ping(t, gs[0], gs[1].v4)
	ping(t, gs[0], gs[1].v6)
}

// A reload that adds a port whose device a removal is still closing
// (RemovePort closes it outside the switch's lock) waits for the close,
// then opens the device again, and the guest is reached through it.
func TestApplyWaitsForAClosingPort(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 2)
	a, b := gs[0], gs[1]
	sw, stop := startSwitchConfig(t, gs, Config{})
	ping(t, a, b.v4)
	running := sw.Config()
	// RemovePort's two halves, the close held back.
	sw.mu.Lock()
	closeDevice, err := sw.removePort(b.dev, slog.Attr{})
	sw.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		changes []string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		changes, err := sw.Apply(running, slog.Attr{})
		done <- result{changes, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("Apply returned while %s was still closing: %v, changes %q", b.dev, r.err, r.changes)
	case <-time.After(200 * time.Millisecond):
	}
	if err := closeDevice(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if want := "port added: " + b.spec(t, "").String(); r.err != nil || !slices.Contains(r.changes, want) {
			t.Fatalf("Apply: %v, changes %q; want %q", r.err, r.changes, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Apply did not return once the device was closed")
	}
	b.configure(t, gs)
	ping(t, a, b.v4)
	stop()
}

// A reload changes what the configuration made and never what the
// control API made: a guest added through the API keeps its device and
// its routes across reloads that leave it out, remove another port or
// name it otherwise, and the conflict is logged with what was kept.
func TestApplyKeepsWhatTheAPIMade(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 3)
	a, b, c := gs[0], gs[1], gs[2]
	var log syncBuffer
	sw, err := Open(Config{}, Tuning{}, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop := runSwitch(t, sw, nil)
	text := func(gs ...*guest) string {
		var s strings.Builder
		for _, g := range gs {
			fmt.Fprintf(&s, "port %s\n", g.spec(t, ""))
			for _, r := range g.routes(t) {
				fmt.Fprintf(&s, "route %s\n", r)
			}
		}
		return s.String()
	}
	apply := func(text string) []string {
		t.Helper()
		cfg, err := ParseConfig("test.conf", strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		changes, err := sw.Apply(cfg, slog.Attr{})
		if err != nil {
			t.Fatal(err)
		}
		return changes
	}
	apply(text(a, b))
	cp := c.spec(t, "")
	cp.Origin = FromAPI
	if err := sw.AddPort(cp, slog.Attr{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range c.routes(t) {
		r.Origin = FromAPI
		if err := sw.AddRoute(r, slog.Attr{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range gs {
		g.configure(t, gs)
	}
	ping(t, a, c.v4)
	if changes := apply(text(a, b)); len(changes) != 0 {
		t.Errorf("the same file again changed %q", changes)
	}
	if changes := apply(text(a)); !slices.Equal(changes, []string{"route removed: " + b.net4 + "=" + b.dev, "route removed: " + b.net6 + "=" + b.dev, "port removed: " + b.dev}) {
		t.Errorf("leaving b out changed %q", changes)
	}
	gone(t, b)
	ping(t, a, c.v6)
	// The file names c, in b's namespace, and routes a's prefix... to c.
	conflict := text(a) + "port tun:" + c.dev + ",netns=" + b.ns.Name + "\nroute 198.18.99.0/24=" + c.dev + "\n"
	if changes := apply(conflict); len(changes) != 0 {
		t.Errorf("a file naming the API's port changed %q", changes)
	}
	ping(t, a, c.v4)
	for _, want := range []string{
		`msg="config reload: kept the API's port, not the configuration's" port=` + c.dev + ` kept="` + cp.String() + `" ignored="tun:` + c.dev + ",netns=" + b.ns.Name + `" at=test.conf:4`,
		`msg="config reload: ignored the configuration's route to the API's port" route="198.18.99.0/24=` + c.dev + `"`,
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, log.String())
		}
	}
	var origins []string
	for _, pv := range sw.Ports() {
		origins = append(origins, pv.Spec.Name+" "+pv.Spec.Origin.String())
	}
	for _, r := range sw.Config().Routes {
		origins = append(origins, r.String()+" "+r.Origin.String())
	}
	if want := []string{a.dev + " config", c.dev + " api", a.net4 + "=" + a.dev + " config", a.net6 + "=" + a.dev + " config", c.net4 + "=" + c.dev + " api", c.net6 + "=" + c.dev + " api"}; !slices.Equal(origins, want) {
		t.Errorf("origins %q, want %q", origins, want)
	}
	stop()
}
