package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"softnet.dev/internal/vswitch"
	"softnet.dev/program"
)

// The many-ports measurement (Options.Ports, `softnet lab --ports N`):
// N guests on one softnet switch, as a node's pods or a host's VMs would
// be. Half the ports are the switch's at start, the other half are added
// while it runs (AddPort and AddRoute, what `softnet ctl port add` and
// `route add` call; a TUN port with allow= its guest's prefixes). Then, in order: every guest pings a neighbour;
// the process's memory; its idle CPU; the time to add one more port,
// added and removed again and again while two other guests ping each
// other; and iperf3 between two guests on the crowded switch against the
// same two alone on a switch of their own.

// Bounds of the many-ports measurement.
const (
	portsParallel = 8 // namespaces created, configured and pinging at a time
	pingTries     = 3 // an IPv6 address's local route may come a little after it
	// The ping between two guests while a port comes and goes: churnPings
	// echoes every churnPingGap, so the adds spread over churnPings ×
	// churnPingGap.
	churnPings   = 300
	churnPingGap = 10 * time.Millisecond
)

// PortsResult is what a --ports run measured.
type PortsResult struct {
	Ports   int
	Workers int
	TAP     bool
	IO      string // the I/O path the devices got: "uring" or "syscall"
	// AtStart ports were the switch's when it opened, Live were added
	// while it ran, which took LiveAddSeconds (their routes included).
	AtStart, Live  int
	LiveAddSeconds float64
	// Neighbour is the port every other guest pinged; it pinged Ports[1].
	// Reach4 and Reach6 are the guests whose ping was answered, of Ports;
	// Unreachable names the others ("lab-p7 v6").
	Neighbour      string
	Reach4, Reach6 int
	Unreachable    []string
	// The lab's process (the switch runs in it) after the pings: its
	// resident set (VmRSS) and peak (VmHWM), reset before the switch
	// opened if RSSReset. PoolBytes is the buffer pool's mapped memory,
	// sized by the workers, not the ports.
	RSS, PeakRSS int64
	RSSReset     bool
	PoolBytes    int64
	// IdleCPUPct is the process's CPU time over IdleSeconds without
	// traffic, in percent of one CPU; IdleWorkerCPUPct its workers'
	// threads' alone. IdlePackets is what the switch received meanwhile
	// all the same: the guests' kernels' own (IPv6 router solicitations,
	// MLD reports), which the workers wake for.
	IdleCPUPct, IdleWorkerCPUPct float64
	IdleSeconds                  float64
	IdlePackets                  uint64
	// One more port (ChurnPort) added and removed Churn times with the
	// others present: the add's latency; and the ping between two other
	// guests meanwhile.
	ChurnPort                  string
	Churn                      int
	AddP50MS, AddP99MS, AddMax float64
	PingFrom, PingTo           string
	PingSent, PingReceived     int
	PingLossPct                float64
	// Throughput between Pair alone (a switch of their two ports) and
	// crowded (on the switch with the others), per mode.
	Pair       [2]string
	Throughput []PortsThroughput
	// Leak is the crowded switch's leak check, "ok" when every buffer
	// came home; AloneLeaks the alone switches' that failed.
	Leak       string
	AloneLeaks []string
}

// PortsThroughput is one mode's transfers between the pair, alone and
// crowded, round by round.
type PortsThroughput struct {
	Mode           Mode
	Alone, Crowded []float64 // Gbit/s of each round, in order
	// Ratio is the median crowded over the median alone.
	Ratio float64
}

// portsModes are the transfers the pair makes, alone and crowded.
var portsModes = []Mode{UDP, TCP}

// portGuest returns guest i (from 1) of a --ports run. On TUN ports
// guest i has 198.18.0.0/15's i-th /24 (198.18.i.1, then 198.19.…) and
// 2001:db8:i::1/64, each routed by the switch to its port; the guest
// routes the whole test range through its device. On TAP ports the
// guests share one subnet, 198.18.0.0/16 and 2001:db8::/64, host i.
func portGuest(runID string, i int, tap bool) *guest {
	g := &guest{ns: nsName(runID, i, 'p'), dev: fmt.Sprintf("lab-p%d", i)}
	if tap {
		g.v4 = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 16)
		g.v6 = netip.MustParsePrefix(fmt.Sprintf("2001:db8::%x/64", i))
	} else {
		base := 198<<24 | 18<<16 | uint32(i)<<8 | 1
		g.v4 = netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(base >> 24), byte(base >> 16), byte(base >> 8), byte(base)}), 24)
		g.v6 = netip.MustParsePrefix(fmt.Sprintf("2001:db8:%x::1/64", i))
	}
	return g
}

// portSpec is guest g's port, as `softnet switch` opens it by default
// (offload and GRO on) with o's TAP and I/O path. A TUN port added live
// says what its guest sends from (allow=): its routes come only after
// it, and until then the switch would warn that it may send from
// nowhere.
func portSpec(g *guest, o Options, live bool) vswitch.PortSpec {
	spec := guestPort(o.TAP, g)
	spec.IO = o.IO
	if live && !o.TAP {
		spec.Allow = &program.Allow{Prefixes: []netip.Prefix{g.v4.Masked(), g.v6.Masked()}}
	}
	return spec
}

// portRoutes are the switch's routes to a TUN guest's subnets; none on
// TAP, whose guests are bridged.
func portRoutes(g *guest, tap bool) []vswitch.RouteSpec {
	if tap {
		return nil
	}
	return []vswitch.RouteSpec{{Prefix: g.v4.Masked(), Port: g.dev}, {Prefix: g.v6.Masked(), Port: g.dev}}
}

// portsConfig is a switch of guests gs.
func portsConfig(gs []*guest, o Options) vswitch.Config {
	cfg := vswitch.Config{Workers: o.Workers}
	for _, g := range gs {
		cfg.Ports = append(cfg.Ports, portSpec(g, o, false))
		cfg.Routes = append(cfg.Routes, portRoutes(g, o.TAP)...)
	}
	return cfg
}

// openPortsSwitch opens and starts a switch of guests gs with o's
// workers and I/O path.
func openPortsSwitch(gs []*guest, o Options) (*softnetPath, error) {
	return openSoftnet(portsConfig(gs, o), vswitch.Tuning{}, o.Log)
}

// addGuestPort adds g's port and its routes to the running switch.
func addGuestPort(sw *vswitch.Switch, g *guest, o Options) error {
	if err := sw.AddPort(portSpec(g, o, true), slog.Attr{}); err != nil {
		return err
	}
	for _, rt := range portRoutes(g, o.TAP) {
		if err := sw.AddRoute(rt, slog.Attr{}); err != nil {
			return err
		}
	}
	return nil
}

// configurePort gives guest g its addresses on its port's device and, on
// TUN, routes the test range through it: one ip(8) process per guest.
func (g *guest) configurePort(tap bool) error {
	cmds := []string{
		fmt.Sprintf("addr add %s dev %s", g.v4, g.dev),
		fmt.Sprintf("addr add %s dev %s nodad", g.v6, g.dev),
		fmt.Sprintf("link set %s up", g.dev),
	}
	if !tap {
		cmds = append(cmds,
			fmt.Sprintf("route add 198.18.0.0/15 dev %s", g.dev),
			fmt.Sprintf("route add 2001:db8::/32 dev %s", g.dev))
	}
	return ipBatch(g.ns, cmds)
}

// ping pings dst from g once, up to pingTries times until it is answered.
func (g *guest) ping(dst netip.Addr) error {
	var err error
	for range pingTries {
		if err = ip("netns", "exec", g.ns, "ping", "-c", "1", "-W", "2", dst.String()); err == nil {
			return nil
		}
	}
	return err
}

// forEach runs f(i) for i in [0, n), portsParallel at a time, and returns
// their errors joined. Once ctx is done it starts no more.
func forEach(ctx context.Context, n int, f func(i int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, portsParallel)
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// addNamespaces creates the guests' namespaces, portsParallel at a time,
// and registers their removal (as many at a time) as one step.
func addNamespaces(ctx context.Context, gs []*guest, u *undoStack) error {
	made := make([]bool, len(gs))
	u.push(fmt.Sprintf("%d namespaces", len(gs)), func() error {
		return forEach(context.Background(), len(gs), func(i int) error {
			if !made[i] {
				return nil
			}
			return deleteNamespace(gs[i].ns)
		})
	})
	return forEach(ctx, len(gs), func(i int) error {
		if err := addNamespace(gs[i].ns); err != nil {
			return err
		}
		made[i] = true // each goroutine its own element; read after wg.Wait
		return nil
	})
}

// runPorts is the many-ports measurement; it fills rep.Ports as it goes,
// so that an interrupted or failed run reports what it measured.
func runPorts(ctx context.Context, o Options, gen generator, rep *Report) (err error) {
	u := &undoStack{}
	defer func() {
		if uerr := u.unwind(); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	n := o.Ports
	runID := newRunID()
	// Guests 1 to n, and one more whose port comes and goes.
	gs := make([]*guest, n+1)
	for i := range gs {
		gs[i] = portGuest(runID, i+1, o.TAP)
		rep.Namespaces = append(rep.Namespaces, gs[i].ns)
	}
	guests, extra := gs[:n], gs[n]
	pr := &PortsResult{Ports: n, Workers: o.Workers, TAP: o.TAP, AtStart: n / 2, Live: n - n/2}
	rep.Ports = pr

	o.Progress(fmt.Sprintf("creating %d namespaces, %d at a time", len(gs), portsParallel))
	start := time.Now()
	if err := addNamespaces(ctx, gs, u); err != nil {
		return err
	}
	o.Progress(fmt.Sprintf("      created in %.1f s", time.Since(start).Seconds()))

	runtime.GC()
	pr.RSSReset = resetPeakRSS()
	sp, err := openPortsSwitch(guests[:pr.AtStart], o)
	if err != nil {
		return err
	}
	u.push("switch", func() error {
		leak, err := sp.close()
		pr.Leak = leak
		if leak != "ok" {
			err = errors.Join(err, fmt.Errorf("leak check: %s", leak))
		}
		return err
	})
	sw := sp.sw
	pr.PoolBytes = sp.poolBytes()
	if devs := sp.devices(); len(devs) > 0 {
		io, _ := devs[0].IO()
		pr.IO = io.String()
	}
	o.Progress(fmt.Sprintf("switch opened with %d ports (%d workers, io=%s); adding %d live", pr.AtStart, o.Workers, pr.IO, pr.Live))
	start = time.Now()
	for _, g := range guests[pr.AtStart:] {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := addGuestPort(sw, g, o); err != nil {
			return err
		}
	}
	pr.LiveAddSeconds = time.Since(start).Seconds()
	if err := forEach(ctx, n, func(i int) error { return guests[i].configurePort(o.TAP) }); err != nil {
		return err
	}

	if err := pingNeighbour(ctx, o, guests, pr); err != nil {
		return err
	}
	if pr.RSS, err = currentRSS(); err != nil {
		return err
	}
	if pr.PeakRSS, err = peakRSS(); err != nil {
		return err
	}
	o.Progress(fmt.Sprintf("      RSS %.0f MiB, peak %.0f MiB; pool %.0f MiB mapped", mib(pr.RSS), mib(pr.PeakRSS), mib(pr.PoolBytes)))

	if err := measureIdle(ctx, o, sp, pr); err != nil {
		return err
	}
	if err := churn(ctx, o, sw, guests, extra, pr); err != nil {
		return err
	}
	return pairThroughput(ctx, o, gen, sw, guests, pr, u)
}

// pingNeighbour has every guest ping the first (which pings the second),
// over IPv4 and IPv6, and counts the answered.
func pingNeighbour(ctx context.Context, o Options, guests []*guest, pr *PortsResult) error {
	hub := guests[0]
	pr.Neighbour = hub.dev
	o.Progress(fmt.Sprintf("every port pings %s (v4 and v6)", hub.dev))
	var mu sync.Mutex
	err := forEach(ctx, len(guests), func(i int) error {
		g, to := guests[i], hub
		if i == 0 {
			to = guests[1]
		}
		for _, v6 := range []bool{false, true} {
			perr := g.ping(to.addr(v6))
			mu.Lock()
			switch {
			case perr == nil && v6:
				pr.Reach6++
			case perr == nil:
				pr.Reach4++
			case v6:
				pr.Unreachable = append(pr.Unreachable, g.dev+" v6")
			default:
				pr.Unreachable = append(pr.Unreachable, g.dev+" v4")
			}
			mu.Unlock()
		}
		return nil
	})
	slices.Sort(pr.Unreachable)
	o.Progress(fmt.Sprintf("      %d of %d reachable (v4), %d of %d (v6)", pr.Reach4, pr.Ports, pr.Reach6, pr.Ports))
	return err
}

// measureIdle measures the process's CPU time while the lab sends
// nothing.
func measureIdle(ctx context.Context, o Options, sp *softnetPath, pr *PortsResult) error {
	o.Progress(fmt.Sprintf("idle for %v", o.PortsIdle))
	runtime.GC()
	tids := sp.workerThreads()
	sample := func() (proc, workers time.Duration, rx uint64, err error) {
		if proc, err = processCPU(); err != nil {
			return 0, 0, 0, err
		}
		if workers, err = threadsCPU(tids); err != nil {
			return 0, 0, 0, err
		}
		c, _ := sp.counters()
		return proc, workers, c.rxPackets, nil
	}
	p0, w0, rx0, err := sample()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if !sleepCtx(ctx, o.PortsIdle) {
		return ctx.Err()
	}
	p1, w1, rx1, err := sample()
	if err != nil {
		return err
	}
	wall := time.Since(t0)
	pr.IdleSeconds = wall.Seconds()
	pr.IdleCPUPct = 100 * float64(p1-p0) / float64(wall)
	pr.IdleWorkerCPUPct = 100 * float64(w1-w0) / float64(wall)
	pr.IdlePackets = rx1 - rx0
	o.Progress(fmt.Sprintf("      %.2f%% of one CPU, workers %.2f%%; %d packets from the guests meanwhile", pr.IdleCPUPct, pr.IdleWorkerCPUPct, pr.IdlePackets))
	return nil
}

// pingSummary is ping(8)'s "N packets transmitted, M received" line.
var pingSummary = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)

// churn adds the extra guest's port and removes it again, o.PortsChurn
// times spread over a ping between the second and third guests, and
// times each add.
func churn(ctx context.Context, o Options, sw *vswitch.Switch, guests []*guest, extra *guest, pr *PortsResult) error {
	from, to := guests[1], guests[2]
	pr.ChurnPort, pr.PingFrom, pr.PingTo = extra.dev, from.dev, to.dev
	o.Progress(fmt.Sprintf("adding and removing %s %d times while %s pings %s", extra.dev, o.PortsChurn, from.dev, to.dev))
	dir, err := os.MkdirTemp("", "softnet-lab-ping-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "ping.log")
	span := churnPings * churnPingGap
	ping, err := startProcess(ctx, from.ns, out, out, "ping", "-c", strconv.Itoa(churnPings),
		"-i", strconv.FormatFloat(churnPingGap.Seconds(), 'f', -1, 64), "-W", "1",
		"-w", strconv.Itoa(int(2*span/time.Second)+2), to.v4.Addr().String())
	if err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	defer ping.kill()
	gap := span / time.Duration(o.PortsChurn+1)
	adds := make([]float64, 0, o.PortsChurn)
	for range o.PortsChurn {
		if !sleepCtx(ctx, gap) {
			return ctx.Err()
		}
		t0 := time.Now()
		if err := sw.AddPort(portSpec(extra, o, true), slog.Attr{}); err != nil {
			return fmt.Errorf("churn: %w", err)
		}
		adds = append(adds, float64(time.Since(t0))/float64(time.Millisecond))
		if err := sw.RemovePort(extra.dev, slog.Attr{}); err != nil {
			return fmt.Errorf("churn: %w", err)
		}
	}
	pr.Churn = len(adds)
	pr.AddP50MS, pr.AddP99MS, pr.AddMax = percentile(adds, 0.50), percentile(adds, 0.99), slices.Max(adds)
	if err := ping.wait(ctx, 2*span+5*time.Second); err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	m := pingSummary.FindSubmatch(b)
	if m == nil {
		return fmt.Errorf("ping from %s to %s: no summary%s", from.ns, to.v4.Addr(), ping.tail())
	}
	pr.PingSent, _ = strconv.Atoi(string(m[1]))
	pr.PingReceived, _ = strconv.Atoi(string(m[2]))
	if pr.PingSent > 0 {
		pr.PingLossPct = 100 * float64(pr.PingSent-pr.PingReceived) / float64(pr.PingSent)
	}
	o.Progress(fmt.Sprintf("      add p50 %.2f ms, p99 %.2f ms; ping %d of %d answered", pr.AddP50MS, pr.AddP99MS, pr.PingReceived, pr.PingSent))
	return nil
}

// percentile returns the p-quantile of vs, the nearest rank.
func percentile(vs []float64, p float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// pairThroughput measures the last two guests' transfers, o.Runs rounds
// of: alone on a switch of their own two ports, then back on the crowded
// switch with every other port. The pair's ports move: removed from one
// switch, opened by the other with the same names in the same
// namespaces, the guests configured again. The crowded switch stays open
// (idle, in this process) while the pair runs alone: what differs is the
// N-2 ports the pair's switch serves.
func pairThroughput(ctx context.Context, o Options, gen generator, sw *vswitch.Switch, guests []*guest, pr *PortsResult, u *undoStack) error {
	pair := &guestPair{a: guests[len(guests)-2], b: guests[len(guests)-1]}
	pr.Pair = [2]string{pair.a.dev, pair.b.dev}
	pr.Throughput = make([]PortsThroughput, len(portsModes))
	for i, m := range portsModes {
		pr.Throughput[i].Mode = m
	}
	onCrowded := true
	for round := range o.Runs {
		for _, crowded := range []bool{false, true} {
			where := "alone"
			if crowded {
				where = fmt.Sprintf("with %d other ports", len(guests)-2)
			}
			o.Progress(fmt.Sprintf("[%d/%d] %s and %s %s", round+1, o.Runs, pair.a.dev, pair.b.dev, where))
			var err error
			if crowded {
				err = pairOnCrowded(ctx, o, gen, sw, pair, pr)
				onCrowded = err == nil
			} else {
				if onCrowded {
					for _, g := range pair.guests() {
						if err := sw.RemovePort(g.dev, slog.Attr{}); err != nil {
							return err
						}
					}
					onCrowded = false
				}
				err = pairAlone(ctx, o, gen, pair, pr, u)
			}
			if err != nil {
				return err
			}
		}
	}
	for i := range pr.Throughput {
		t := &pr.Throughput[i]
		if a := median(t.Alone); a > 0 && len(t.Crowded) > 0 {
			t.Ratio = median(t.Crowded) / a
		}
	}
	return nil
}

// pairAlone measures the pair on a switch of their two ports, closed
// again (and leak-checked) before it returns.
func pairAlone(ctx context.Context, o Options, gen generator, pair *guestPair, pr *PortsResult, u *undoStack) (err error) {
	both := pair.guests()
	sp, err := openPortsSwitch(both[:], o)
	if err != nil {
		return err
	}
	closed := false
	closeAlone := func() error {
		if closed {
			return nil
		}
		closed = true
		leak, err := sp.close()
		if leak != "ok" {
			pr.AloneLeaks = append(pr.AloneLeaks, leak)
			err = errors.Join(err, fmt.Errorf("alone: leak check: %s", leak))
		}
		return err
	}
	u.push("the pair's switch", closeAlone)
	if err := measurePair(ctx, o, gen, pair, pr, false); err != nil {
		return err
	}
	return closeAlone()
}

// pairOnCrowded adds the pair's ports back to the crowded switch and
// measures them there.
func pairOnCrowded(ctx context.Context, o Options, gen generator, sw *vswitch.Switch, pair *guestPair, pr *PortsResult) error {
	for _, g := range pair.guests() {
		if err := addGuestPort(sw, g, o); err != nil {
			return err
		}
	}
	return measurePair(ctx, o, gen, pair, pr, true)
}

// measurePair configures the pair's fresh devices, waits for the path
// and runs each of portsModes from a to b.
func measurePair(ctx context.Context, o Options, gen generator, pair *guestPair, pr *PortsResult, crowded bool) error {
	for _, g := range pair.guests() {
		if err := g.configurePort(o.TAP); err != nil {
			return err
		}
	}
	if err := pair.checkPath(ctx, false); err != nil {
		return err
	}
	for i, m := range portsModes {
		fl, err := gen.start(ctx, pair, newTransfer(m, o.Duration, false))
		if err != nil {
			return err
		}
		fr, err := fl.wait(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
		gbps := fr.bitsPerSecond / 1e9
		t := &pr.Throughput[i]
		if crowded {
			t.Crowded = append(t.Crowded, gbps)
		} else {
			t.Alone = append(t.Alone, gbps)
		}
		o.Progress(fmt.Sprintf("      %s %.2f Gbit/s", m, gbps))
	}
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
