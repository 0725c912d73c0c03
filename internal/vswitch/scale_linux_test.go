package vswitch

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"softnet.dev/internal/netnstest"
	"softnet.dev/tun"
)

// scaleGuests is how many guests the scale test puts on one switch: a
// node's worth of pods, fewer under the race detector.
func scaleGuests() int {
	if raceEnabled {
		return 128
	}
	return 250
}

// scaleGuest is one guest of the scale test: its namespace, its port and
// its addresses.
type scaleGuest struct {
	ns     *netnstest.NS
	dev    string
	v4, v6 string
}

// newScaleGuests makes n namespaces, concurrently: one at a time, 250
// would take most of the test's time.
func newScaleGuests(t *testing.T, n int, tap bool) []*scaleGuest {
	t.Helper()
	gs := make([]*scaleGuest, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			g := &scaleGuest{dev: fmt.Sprintf("sn%d", i+1)}
			if tap {
				// One subnet for the bridge: 198.18.1.1 to .250.
				g.v4, g.v6 = fmt.Sprintf("198.18.1.%d", i+1), fmt.Sprintf("2001:db8:1::%x", i+1)
			} else {
				// A subnet each, routed by the switch to its port.
				g.v4, g.v6 = fmt.Sprintf("198.18.%d.1", i+1), fmt.Sprintf("2001:db8:%x::1", i+1)
			}
			ns := netnstest.New(t)
			mu.Lock()
			g.ns, gs[i] = ns, g
			mu.Unlock()
		})
	}
	wg.Wait()
	return gs
}

func (g *scaleGuest) spec(t *testing.T, tap bool, opts string) PortSpec {
	t.Helper()
	kind := "tun:"
	if tap {
		kind = "tap:"
	}
	p, err := ParsePort(kind + g.dev + ",netns=" + g.ns.Name + opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// routes are the switch's routes to a TUN guest's subnets.
func (g *scaleGuest) routes(t *testing.T) []RouteSpec {
	t.Helper()
	v4 := strings.TrimSuffix(g.v4, ".1") + ".0/24"
	v6 := strings.TrimSuffix(g.v6, "::1") + "::/64"
	var out []RouteSpec
	for _, pfx := range []string{v4, v6} {
		r, err := ParseRoute(pfx + "=" + g.dev)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// configure gives the guest its addresses and, on TUN, routes to the
// whole test range through its port, in one command.
func (g *scaleGuest) configure(tap bool) error {
	cmds := []string{"set -e"}
	if tap {
		cmds = append(cmds,
			fmt.Sprintf("ip addr add %s/24 dev %s", g.v4, g.dev),
			fmt.Sprintf("ip -6 addr add %s/64 dev %s nodad", g.v6, g.dev))
	} else {
		cmds = append(cmds,
			fmt.Sprintf("ip addr add %s/24 dev %s", g.v4, g.dev),
			fmt.Sprintf("ip -6 addr add %s/64 dev %s nodad", g.v6, g.dev),
			fmt.Sprintf("ip route add 198.18.0.0/15 dev %s", g.dev),
			fmt.Sprintf("ip -6 route add 2001:db8::/32 dev %s", g.dev))
	}
	if out, err := g.ns.Exec("sh", "-c", strings.Join(cmds, "; ")); err != nil {
		return fmt.Errorf("%s: %w\n%s", g.ns.Name, err, out)
	}
	return nil
}

// pingOnce pings to from g, v4 or v6, a few times if need be: an IPv6
// address's local route may come a little after the address.
func (g *scaleGuest) pingOnce(to string) error {
	var err error
	for try := 0; try < 3; try++ {
		var out string
		if out, err = g.ns.Exec("ping", "-c", "1", "-W", "2", to); err == nil {
			return nil
		}
		err = fmt.Errorf("%s: ping %s: %w\n%s", g.ns.Name, to, err, out)
	}
	return err
}

// overflowRetries bounds the tries of a ping that failed while the
// host's neighbour tables overflowed, five seconds apart: the kernel
// frees, when full, the entries not updated for five seconds.
const overflowRetries = 4

// neighOverflows is the host's ARP and ND table overflows since boot,
// added: what the test compares is whether they grew.
func neighOverflows(t *testing.T) uint64 {
	t.Helper()
	arp, nd, err := netnstest.NeighOverflows()
	if err != nil {
		t.Fatal(err)
	}
	return arp + nd
}

// ping pings to from g (pingOnce). If that fails while the host's
// neighbour tables have overflowed since the pings began (overflowed),
// the failure may be no fault of the switch: a hub that cannot make an
// entry for a guest does not answer its neighbour solicitation. It
// tries again then, a bounded number of times, and says how many.
func (g *scaleGuest) ping(to string, overflowed func() bool) (retries int, err error) {
	err = g.pingOnce(to)
	for err != nil && retries < overflowRetries && overflowed() {
		time.Sleep(5 * time.Second)
		retries++
		err = g.pingOnce(to)
	}
	return retries, err
}

// A node's worth of guests on one switch, on TUN and on TAP ports, on
// both I/O paths, with one and two workers: half the ports at start,
// half added while it runs; every guest reaches its neighbour over IPv4
// and IPv6, and at the end every buffer is home and no goroutine is left.
func TestSwitchScale(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.RequireTools(t, "ping")
	for _, kind := range []string{"tun", "tap"} {
		for _, io := range []tun.IO{tun.IOAuto, tun.IOSyscall} {
			for _, workers := range []int{1, 2} {
				t.Run(fmt.Sprintf("%s/io=%s/workers=%d", kind, io, workers), func(t *testing.T) {
					testScale(t, kind == "tap", io, workers, scaleGuests())
				})
			}
		}
	}
}

func testScale(t *testing.T, tap bool, ioPath tun.IO, workers, n int) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// Its guests need about half the host's neighbour tables, which
	// every namespace shares (netnstest.NeighOverflows): two of these
	// at once, from two go test processes on one machine, overflow
	// them and fail each other's IPv6 pings.
	netnstest.LockHost(t, "switchscale")
	gs := newScaleGuests(t, n, tap)
	cfg := Config{Workers: workers}
	atStart := gs[:n/2]
	opts := "" // io_uring where the kernel has it
	if ioPath != tun.IOAuto {
		opts = ",io=" + ioPath.String()
	}
	for _, g := range atStart {
		cfg.Ports = append(cfg.Ports, g.spec(t, tap, opts))
		if !tap {
			cfg.Routes = append(cfg.Routes, g.routes(t)...)
		}
	}
	sw, err := Open(cfg, Tuning{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop := runSwitch(t, sw, nil)
	for _, g := range gs[n/2:] {
		if err := sw.AddPort(g.spec(t, tap, opts), slog.Attr{}); err != nil {
			t.Fatal(err)
		}
		if !tap {
			for _, r := range g.routes(t) {
				if err := sw.AddRoute(r, slog.Attr{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	parallel(t, gs, func(g *scaleGuest) error { return g.configure(tap) })
	// Every guest pings the first, which answers all of them.
	hub := gs[0]
	var failed []string
	var retried, retriedOK int
	var mu sync.Mutex
	overflows0 := neighOverflows(t)
	overflowed := func() bool {
		arp, nd, err := netnstest.NeighOverflows()
		return err == nil && arp+nd > overflows0
	}
	parallel(t, gs[1:], func(g *scaleGuest) error {
		for _, to := range []string{hub.v4, hub.v6} {
			retries, err := g.ping(to, overflowed)
			mu.Lock()
			if retries > 0 {
				retried++
				if err == nil {
					retriedOK++
				}
			}
			if err != nil {
				failed = append(failed, g.dev+" to "+to)
			}
			mu.Unlock()
			if err != nil {
				t.Log(err)
			}
		}
		return nil
	})
	overflows := neighOverflows(t) - overflows0
	if retried > 0 || overflows > 0 {
		t.Logf("the host's neighbour tables overflowed %d times during the pings (other namespaces' entries count too); %d failed pings were tried again after it, %d of them then answered", overflows, retried, retriedOK)
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d pings failed (the host's neighbour tables overflowed %d times meanwhile): %s", len(failed), 2*(n-1), overflows, strings.Join(failed, ", "))
	}
	s := sw.Stats()
	if len(failed) > 0 {
		for _, p := range s.Ports {
			t.Logf("port %+v", p)
		}
		for _, w := range s.Workers {
			t.Logf("worker %+v", w)
		}
	}
	if len(s.Ports) < n {
		t.Errorf("switch reports %d ports, want %d", len(s.Ports), n)
	}
	stop()
}

// parallel runs f for every guest, eight at a time.
func parallel(t *testing.T, gs []*scaleGuest, f func(*scaleGuest) error) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	errs := make(chan error, len(gs))
	for _, g := range gs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := f(g); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// With four workers each TUN port has four queues, and the kernel
// spreads connections over them: every connection completes, whichever
// queue and worker its packets take (before the workers' budget, half
// of them hung on queues that got no buffers).
func TestSwitchFourWorkersShortConnections(t *testing.T) {
	gs := newGuests(t, 2)
	stop := startSwitch(t, gs, 4)
	for i := range 20 {
		transfer(t, gs[0], gs[1], gs[1].v4, 5300+i, 64<<10)
	}
	stop()
}
