package vswitch

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/tun"
)

// mustPort parses spec.
func mustPort(t *testing.T, spec string) PortSpec {
	t.Helper()
	p, err := ParsePort(spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (g *guest) spec(t *testing.T, opts string) PortSpec {
	t.Helper()
	return mustPort(t, "tun:"+g.dev+",netns="+g.ns.Name+opts)
}

func (g *guest) routes(t *testing.T) []RouteSpec {
	t.Helper()
	var out []RouteSpec
	for _, pfx := range []string{g.net4, g.net6} {
		r, err := ParseRoute(pfx + "=" + g.dev)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// addGuest adds g's port and routes to the running switch and gives g
// its addresses and routes to the others; the others route to g.
func addGuest(t *testing.T, sw *Switch, g *guest, opts string, others ...*guest) {
	t.Helper()
	if err := sw.AddPort(g.spec(t, opts), slog.Attr{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range g.routes(t) {
		if err := sw.AddRoute(r, slog.Attr{}); err != nil {
			t.Fatal(err)
		}
	}
	g.configure(t, append(others, g))
	for _, o := range others {
		o.run(t, "ip", "route", "replace", g.net4, "dev", o.dev)
		o.run(t, "ip", "-6", "route", "replace", g.net6, "dev", o.dev)
	}
}

// gone fails unless g's device has left its namespace.
func gone(t *testing.T, g *guest) {
	t.Helper()
	if out, err := g.ns.Exec("ip", "link", "show", g.dev); err == nil {
		t.Errorf("%s: device %s still there after its port was removed:\n%s", g.ns.Name, g.dev, out)
	}
}

// While two guests ping each other, a third guest's port is added (on
// both I/O paths in turn), talks to both and is removed again: its
// device goes, its routes go, and the first two lose no echo.
func TestSwitchLivePorts(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 3)
	a, b, c := gs[0], gs[1], gs[2]
	sw, stop := startSwitchConfig(t, gs[:2], Config{})
	ping(t, a, b.v4)
	const echoes = 80
	pinged := make(chan string, 1)
	go func() {
		out, err := a.ns.ExecTimeout(30*time.Second, "ping", "-c", fmt.Sprint(echoes), "-i", "0.05", "-W", "2", b.v4)
		if err != nil {
			out += err.Error()
		}
		pinged <- out
	}()
	for _, io := range []string{"", ",io=syscall"} {
		addGuest(t, sw, c, io, a, b)
		ping(t, c, a.v4)
		ping(t, c, b.v6)
		if err := sw.RemovePort(c.dev, slog.Attr{}); err != nil {
			t.Fatal(err)
		}
		gone(t, c)
		if slices.ContainsFunc(sw.Config().Routes, func(r RouteSpec) bool { return r.Port == c.dev }) {
			t.Errorf("routes to a removed port stay: %v", sw.Config().Routes)
		}
		if len(sw.Stats().Ports) != 2 {
			t.Errorf("ports after removal: %+v", sw.Stats().Ports)
		}
	}
	if out := <-pinged; !strings.Contains(out, fmt.Sprintf("%d packets transmitted, %d received", echoes, echoes)) {
		t.Errorf("the ping between the ports that stayed lost echoes:\n%s", out)
	}
	stop()
}

// Routes come and go while the switch runs; a guest whose sources are
// its routes may send only from what is routed to it at the time.
func TestSwitchLiveRoutes(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 2)
	a, b := gs[0], gs[1]
	sw, stop := startSwitchConfig(t, gs, Config{})
	ping(t, a, b.v4)
	r := b.routes(t)[0]
	if err := sw.RemoveRoute(r.Prefix, slog.Attr{}); err != nil {
		t.Fatal(err)
	}
	before := sw.Stats().Ports[0].Drops[drop.NoRoute]
	if pingOnce(a, b.v4) {
		t.Fatal("a ping crossed a removed route")
	}
	if after := sw.Stats().Ports[0].Drops[drop.NoRoute]; after == before {
		// Counters are published every few rounds and before a sleep.
		time.Sleep(100 * time.Millisecond)
		if sw.Stats().Ports[0].Drops[drop.NoRoute] == before {
			t.Error("the unroutable echo is not counted as NO_ROUTE")
		}
	}
	if err := sw.AddRoute(r, slog.Attr{}); err != nil {
		t.Fatal(err)
	}
	ping(t, a, b.v4)

	for name, tc := range map[string]struct {
		err  error
		want error
	}{
		"route to a missing port":  {sw.AddRoute(RouteSpec{Prefix: r.Prefix, Port: "nope"}, slog.Attr{}), ErrNotFound},
		"duplicate route":          {sw.AddRoute(r, slog.Attr{}), ErrExists},
		"removing a missing route": {sw.RemoveRoute(netip.MustParsePrefix("198.19.0.0/16"), slog.Attr{}), ErrNotFound},
		"removing a missing port":  {sw.RemovePort("nope", slog.Attr{}), ErrNotFound},
		"duplicate port":           {sw.AddPort(a.spec(t, ""), slog.Attr{}), ErrExists},
		"tap beside tun":           {sw.AddPort(mustPort(t, "tap:snx"), slog.Attr{}), ErrInvalid},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", name, tc.err, tc.want)
		}
	}
	if got := len(sw.Config().Routes); got != 4 {
		t.Errorf("refused changes changed the routes: %v", sw.Config().Routes)
	}
	stop()
}

// A switch that starts with no port gets them all from Apply, as from a
// configuration file read on SIGHUP; a configuration that cannot apply
// changes nothing; applying the first again removes what it lacks.
func TestSwitchApply(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 3)
	a, b, c := gs[0], gs[1], gs[2]
	sw, stop := startSwitchConfig(t, nil, Config{})
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
	apply := func(text string) ([]string, error) {
		cfg, err := ParseConfig("test.conf", strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return sw.Apply(cfg, slog.Attr{})
	}
	two := text(a, b)
	if changes, err := apply(two); err != nil || len(changes) != 6 {
		t.Fatalf("from nothing to two guests: %v, changes %q", err, changes)
	}
	a.configure(t, gs)
	b.configure(t, gs)
	ping(t, a, b.v6)

	running := sw.Config().Text()
	for name, bad := range map[string]string{
		"workers":        "workers 2\n" + two,
		"missing netns":  two + "port tun:sn9,netns=softnet-no-such-ns\n",
		"filters":        two + "filter deny proto=udp dport=53\n",
		"route, no port": two + "route 198.19.0.0/16=sn9\n",
	} {
		cfg, err := ParseConfig("test.conf", strings.NewReader(bad))
		if err == nil {
			_, err = sw.Apply(cfg, slog.Attr{})
		}
		if err == nil {
			t.Errorf("%s: applied", name)
		}
		if got := sw.Config().Text(); got != running {
			t.Errorf("%s: the refused configuration changed the switch:\n%s", name, got)
		}
	}

	// The third guest joins and b loses its IPv6 route.
	three := strings.Replace(text(a, b, c), "route "+b.net6+"="+b.dev+"\n", "", 1)
	changes, err := apply(three)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"route removed: " + b.net6 + "=" + b.dev, "port added: " + c.spec(t, "").String(), "route added: " + c.net4 + "=" + c.dev, "route added: " + c.net6 + "=" + c.dev}
	if !slices.Equal(changes, want) {
		t.Errorf("changes %q, want %q", changes, want)
	}
	c.configure(t, gs)
	ping(t, c, a.v4)
	if pingOnce(c, b.v6) {
		t.Error("a ping crossed the route the file removed")
	}
	if _, err := apply(two); err != nil {
		t.Fatal(err)
	}
	gone(t, c)
	ping(t, a, b.v6)
	stop()
	gone(t, a)
	gone(t, b)
}

// A port whose device cannot be opened is refused as ErrDevice, with
// tun's message, and changes nothing.
func TestSwitchAddPortDeviceError(t *testing.T) {
	gs := newGuests(t, 2)
	sw, stop := startSwitchConfig(t, gs, Config{})
	err := sw.AddPort(mustPort(t, "tun:sn9,netns=softnet-no-such-ns"), slog.Attr{})
	if !errors.Is(err, ErrDevice) || !strings.Contains(err.Error(), "softnet-no-such-ns") {
		t.Errorf("a port in a missing namespace: %v", err)
	}
	if len(sw.Config().Ports) != 2 {
		t.Errorf("ports after the refusal: %v", sw.Config().Ports)
	}
	stop()
}

// A configuration file read again on SIGHUP is checked as a whole before
// anything changes. One that turns the TUN ports into TAP ports is valid
// on its own, but a running switch's programs are those of its ports'
// kind: it is refused, the switch keeps its ports and routes and they
// still forward. One whose second new port cannot be opened removes
// nothing, and the first new port's device is closed again; nor does one
// that moves a port to a namespace that does not exist.
func TestSwitchApplyChecksFirst(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 3)
	a, b, c := gs[0], gs[1], gs[2]
	sw, stop := startSwitchConfig(t, gs[:2], Config{})
	ping(t, a, b.v4)
	running := sw.Config().Text()
	port := func(g *guest, kind string) string {
		return "port " + strings.Replace(g.spec(t, "").String(), "tun:", kind+":", 1) + "\n"
	}
	routes := func(g *guest) string {
		var s strings.Builder
		for _, r := range g.routes(t) {
			fmt.Fprintf(&s, "route %s\n", r)
		}
		return s.String()
	}
	for name, tc := range map[string]struct {
		text string
		want error
	}{
		"tun ports turned tap": {port(a, "tap") + port(b, "tap"), ErrRestart},
		// b's routes would go, c would come, but sn9 cannot be opened.
		"a new port that cannot be opened": {port(a, "tun") + routes(a) + port(b, "tun") + port(c, "tun") + "port tun:sn9,netns=softnet-no-such-ns\n", ErrDevice},
		// b's device would be b's no more, but the new one cannot be opened.
		"a port moved to a missing namespace": {port(a, "tun") + routes(a) + "port tun:" + b.dev + ",netns=softnet-no-such-ns\n" + routes(b), ErrDevice},
	} {
		cfg, err := ParseConfig("test.conf", strings.NewReader(tc.text))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		changes, err := sw.Apply(cfg, slog.Attr{})
		if !errors.Is(err, tc.want) || len(changes) > 0 {
			t.Errorf("%s: %v, changes %q; want %v and none", name, err, changes, tc.want)
		}
		if got := sw.Config().Text(); got != running {
			t.Errorf("%s: the refused configuration changed the switch:\n%s", name, got)
		}
		gone(t, c)
		ping(t, a, b.v4)
		ping(t, b, a.v6)
	}
	stop()
}

// Ten ports are removed at once, as a kubelet deletes ten pods, while
// their guests send and two other guests ping each other, on both I/O
// paths: every removal succeeds, every removed device leaves its
// namespace, the two lose no echo and still reach each other, a removed
// name can be added again at once, and every buffer comes home.
func TestSwitchRemovePortsConcurrently(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.RequireTools(t, "ping")
	for _, ioPath := range []tun.IO{tun.IOAuto, tun.IOSyscall} {
		t.Run("io="+ioPath.String(), func(t *testing.T) {
			opts := "" // io_uring where the kernel has it
			if ioPath != tun.IOAuto {
				opts = ",io=" + ioPath.String()
			}
			testRemovePortsConcurrently(t, opts)
		})
	}
}

func testRemovePortsConcurrently(t *testing.T, opts string) {
	const removed = 10
	gs := newScaleGuests(t, removed+2, false)
	a, b, leaving := gs[0], gs[1], gs[2:]
	var cfg Config
	for _, g := range gs {
		cfg.Ports = append(cfg.Ports, g.spec(t, false, opts))
		cfg.Routes = append(cfg.Routes, g.routes(t)...)
	}
	sw, err := Open(cfg, Tuning{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop := runSwitch(t, sw, nil)
	parallel(t, gs, func(g *scaleGuest) error { return g.configure(false) })
	if err := a.pingOnce(b.v4); err != nil {
		t.Fatal(err)
	}

	const echoes = 100
	pinged := make(chan string, 1)
	go func() {
		out, err := a.ns.ExecTimeout(30*time.Second, "ping", "-c", fmt.Sprint(echoes), "-i", "0.02", "-W", "2", b.v4)
		if err != nil {
			out += err.Error()
		}
		pinged <- out
	}()
	// The leaving guests send until their devices go: their packets are
	// in the switch's queues as it removes their ports. Each ping ends
	// with its device, or after its count or deadline.
	var senders sync.WaitGroup
	for _, g := range leaving {
		senders.Go(func() {
			_, _ = g.ns.ExecTimeout(30*time.Second, "ping", "-q", "-c", "1000", "-i", "0.002", "-w", "4", a.v4)
		})
	}
	time.Sleep(300 * time.Millisecond)

	var removing sync.WaitGroup
	errs := make(chan error, len(leaving))
	for _, g := range leaving {
		removing.Go(func() {
			if err := sw.RemovePort(g.dev, slog.Attr{}); err != nil {
				errs <- err
			}
		})
	}
	removing.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	senders.Wait()
	for _, g := range leaving {
		if out, err := g.ns.Exec("ip", "link", "show", g.dev); err == nil {
			t.Errorf("%s: device %s still there after its port was removed:\n%s", g.ns.Name, g.dev, out)
		}
	}
	if ports := sw.Ports(); len(ports) != 2 || ports[0].Spec.Name != a.dev || ports[1].Spec.Name != b.dev {
		t.Errorf("ports after the removals: %+v, want %s and %s", ports, a.dev, b.dev)
	}
	if rs := sw.Config().Routes; len(rs) != 4 {
		t.Errorf("routes after the removals: %v, want the 4 to %s and %s", rs, a.dev, b.dev)
	}
	if out := <-pinged; !strings.Contains(out, fmt.Sprintf("%d packets transmitted, %d received", echoes, echoes)) {
		t.Errorf("the ping between the ports that stayed lost echoes:\n%s", out)
	}
	for _, to := range []string{b.v4, b.v6} {
		if err := a.pingOnce(to); err != nil {
			t.Error(err)
		}
	}

	// A removed name comes back, its device anew, and forwards.
	back := leaving[0]
	if err := sw.AddPort(back.spec(t, false, opts), slog.Attr{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range back.routes(t) {
		if err := sw.AddRoute(r, slog.Attr{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := back.configure(false); err != nil {
		t.Fatal(err)
	}
	if err := back.pingOnce(a.v4); err != nil {
		t.Error(err)
	}
	stop()
}
