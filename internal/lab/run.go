package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// Timing of a transfer's measurement.
const (
	idleFor     = 250 * time.Millisecond // measuring the lab's own CPU use
	minSettle   = 200 * time.Millisecond // left out at each end of the window
	publishWait = 100 * time.Millisecond // for softnet's workers to publish after the transfer
)

// ErrNotRoot is returned when the lab cannot create namespaces and devices.
var ErrNotRoot = errors.New("softnet lab needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for namespaces and TUN devices)")

// Run measures every variant o asks for or, with o.Ports, many ports on
// one switch (ports.go), with o.Overlay guests across two hosts
// (overlay.go), with o.Vhost vhost-user ports against DPDK
// (vhost.go), or with o.AFXDP afxdp ports on veths against the kernel's
// bridge and Open vSwitch (afxdp.go). The variants are measured o.Runs times, one after
// another, each between two namespaces of its own that are removed before
// the next begins. Each round measures every variant once, starting one
// variant later than the round before. The report holds every variant
// measured, also when Run fails: a variant that fails (or leaks buffers)
// does not stop the others, and its error is returned at the end. When
// ctx is cancelled Run removes what exists, and returns an error that
// matches ctx's.
func Run(ctx context.Context, o Options) (*Report, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkHost(); err != nil {
		return nil, err
	}
	gen, note, err := pickGenerator(o.Traffic)
	if err != nil {
		return nil, err
	}
	_, builtin := gen.(builtinGen)
	rep := &Report{Traffic: gen.name(), Builtin: builtin, Note: note}
	if note != "" {
		o.Progress(note)
	}
	if o.Ports > 0 {
		rep.Options = o
		err := runPorts(ctx, o, gen, rep)
		if cerr := ctx.Err(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("lab interrupted: %w", cerr))
		}
		return rep, err
	}
	if len(o.Overlay) > 0 {
		rep.Options = o
		err := runOverlay(ctx, o, gen, rep)
		if cerr := ctx.Err(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("lab interrupted: %w", cerr))
		}
		return rep, err
	}
	if o.Bandwidth {
		rep.Options = o
		err := runBandwidth(ctx, o, rep)
		if cerr := ctx.Err(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("lab interrupted: %w", cerr))
		}
		return rep, err
	}
	if o.AFXDP {
		rep.Options = o
		err := runAFXDP(ctx, o, gen, rep)
		if cerr := ctx.Err(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("lab interrupted: %w", cerr))
		}
		return rep, err
	}
	if o.Vhost {
		rep.Options = o
		err := runVhost(ctx, o, gen, rep)
		if cerr := ctx.Err(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("lab interrupted: %w", cerr))
		}
		return rep, err
	}
	gens := generators{main: gen}
	if slices.ContainsFunc(o.Modes, func(m Mode) bool { return m.kind() == kindLatency }) {
		sp, err := findSockperf()
		if err != nil {
			// Skipped, not failed: the other modes are still worth a run.
			msg := fmt.Sprintf("latency modes skipped: sockperf is not installed (apt-get install sockperf): %v", err)
			rep.Note = strings.TrimPrefix(rep.Note+"; "+msg, "; ")
			o.Progress(msg)
			o.Modes = slices.DeleteFunc(slices.Clone(o.Modes), func(m Mode) bool { return m.kind() == kindLatency })
		} else {
			gens.latency = sp
			rep.Latency, rep.CPUs = sp.name(), sp.cpus
		}
	}
	rep.Options = o
	runID := newRunID()
	variants := Variants(o)
	runs := make([][]VariantResult, len(variants))
	var errs []error
	step, steps := 0, o.Runs*len(variants)
rounds:
	for round := range o.Runs {
		for _, i := range rotation(len(variants), round) {
			if ctx.Err() != nil {
				break rounds
			}
			v := variants[i]
			step++
			label := fmt.Sprintf("[%d/%d] %s", step, steps, v.Name)
			if o.Runs > 1 {
				label += fmt.Sprintf(" (run %d of %d)", round+1, o.Runs)
			}
			o.Progress(label)
			var vr *VariantResult
			var err error
			// Goroutines the variant starts (the engine's worker) carry its
			// name in CPU profiles: go tool pprof -tagfocus variant=+bulk.
			pprof.Do(ctx, pprof.Labels("variant", v.Name), func(ctx context.Context) {
				vr, err = runVariant(ctx, o, gens, runID, round*len(variants)+i, v, rep)
			})
			if vr != nil {
				runs[i] = append(runs[i], *vr)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", v.Name, err))
				if ctx.Err() != nil {
					o.Progress(fmt.Sprintf("%s interrupted; what it created is removed", label))
				} else {
					o.Progress(fmt.Sprintf("%s failed: %v", label, err))
				}
			}
		}
	}
	for i := range variants {
		if len(runs[i]) > 0 {
			rep.Variants = append(rep.Variants, aggregateVariant(runs[i], o.Modes))
		}
	}
	rep.setRatios()
	if err := ctx.Err(); err != nil {
		errs = append(errs, fmt.Errorf("lab interrupted: %w", err))
	}
	return rep, errors.Join(errs...)
}

// generators are what a run's modes use: iperf3 or the built-in
// generator for throughput, the built-in one for udp-gso (iperf3 3.12 has
// no UDP_SEGMENT), sockperf for latency (nil when it is not installed).
type generators struct {
	main    generator
	latency generator
}

func (g generators) forMode(m Mode) generator {
	switch {
	case m == UDPGSO:
		return builtinGen{}
	case m.kind() == kindLatency:
		return g.latency
	}
	return g.main
}

// skipError is a mode that cannot run on a variant (udp-gso on a device
// without checksum offload): reported, not failed.
type skipError struct{ err error }

func (e skipError) Error() string { return e.err.Error() }
func (e skipError) Unwrap() error { return e.err }

// checkHost returns why the lab cannot run here, or nil.
func checkHost() error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("softnet lab needs /dev/net/tun: %w", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("softnet lab needs ip(8) from iproute2: %w", err)
	}
	return nil
}

// pickGenerator returns the traffic generator t asks for, and a note if
// auto fell back to the built-in one.
func pickGenerator(t Traffic) (generator, string, error) {
	if t == TrafficBuiltin {
		return builtinGen{}, "", nil
	}
	g, err := findIperf3()
	switch {
	case err == nil:
		return g, "", nil
	case t == TrafficIperf3:
		return nil, "", fmt.Errorf("iperf3 not found (apt-get install iperf3, or --traffic builtin): %w", err)
	}
	return builtinGen{}, "iperf3 is not installed: using the built-in generator", nil
}

// runVariant sets up variant number index, runs every mode through it and
// takes it down again, whatever happens.
func runVariant(ctx context.Context, o Options, gens generators, runID string, index int, v Variant, rep *Report) (vr *VariantResult, err error) {
	u := &undoStack{}
	defer func() {
		if uerr := u.unwind(); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	rep.Namespaces = append(rep.Namespaces, nsName(runID, index, 'a'), nsName(runID, index, 'b'))
	pair, err := newGuestPair(runID, index, u)
	if err != nil {
		return nil, err
	}
	dp, err := openDatapath(pair, v, o)
	if err != nil {
		return nil, err
	}
	vr = &VariantResult{Variant: v}
	open := true
	closeDP := func() error {
		if !open {
			return nil
		}
		open = false
		leak, err := dp.close()
		if v.Softnet() {
			vr.Leak = leak
			if leak != "ok" {
				err = errors.Join(err, fmt.Errorf("leak check: %s", leak))
			}
		}
		return err
	}
	u.push(v.Name+" datapath", closeDP)
	if err := pair.configure(); err != nil {
		return vr, err
	}
	if err := pair.checkPath(ctx, o.IPv6); err != nil {
		return vr, err
	}
	gc, err := openGuestCounters(pair)
	if err != nil {
		return vr, err
	}
	u.push("netlink sockets", func() error { gc.close(); return nil })
	for _, m := range o.Modes {
		var res Result
		var err error
		if m.kind() == kindPDR {
			res, err = runPDR(ctx, o, gens.main, pair, dp, gc, v, m)
		} else {
			res, err = runMode(ctx, o, gens.forMode(m), pair, dp, gc, v, m)
		}
		var skip skipError
		if errors.As(err, &skip) && ctx.Err() == nil {
			if vr.Skipped == nil {
				vr.Skipped = map[Mode]string{}
			}
			vr.Skipped[m] = skip.Error()
			o.Progress(fmt.Sprintf("      %s: %s skipped: %v", v.Name, m, skip))
			continue
		}
		if err != nil {
			return vr, fmt.Errorf("%s: %w", m, err)
		}
		vr.Results = append(vr.Results, res)
	}
	// Now rather than at unwind: the leak check belongs to the result.
	return vr, closeDP()
}

// openDatapath joins the guests as the variant says.
func openDatapath(p *guestPair, v Variant, o Options) (datapath, error) {
	switch v.kind {
	case pathVeth:
		return openVeth(p)
	case pathWireguardGo:
		return openBatchPath(p, WireguardGo, o.TAP, attachWireguardGo)
	case pathSoftnetTUN:
		return openBatchPath(p, SoftnetTUN, o.TAP, attachSoftnetTUN)
	default:
		return openPairSwitch(p, v.softnet, o.TAP, o.Log)
	}
}

// runMode runs one transfer through the datapath and measures it.
func runMode(ctx context.Context, o Options, gen generator, pair *guestPair, dp datapath, gc *guestCounters, v Variant, m Mode) (Result, error) {
	res := Result{Mode: m, Variant: v.Name}
	// Garbage from the setup is collected now, not in the window.
	runtime.GC()
	idle := idleRate(idleFor)
	res.RSSReset = resetPeakRSS()
	p := &probe{dp: dp, guests: gc}
	if s, ok := dp.(*softnetPath); ok {
		p.devices = s.deviceNoMem
	}
	o.Progress(fmt.Sprintf("      %s: %s for %v", v.Name, m, o.Duration))
	s0 := p.take()
	fl, err := gen.start(ctx, pair, newTransfer(m, o.Duration, o.IPv6))
	if err != nil {
		return res, err
	}
	p.flow = fl
	var w0, w1 snapshot
	measured := window(ctx, o.Duration, func() { w0 = p.windowStart() }, func() { w1 = p.windowEnd() })
	fr, err := fl.wait(ctx)
	if err != nil {
		return res, err
	}
	if !measured {
		return res, ctx.Err()
	}
	sleepCtx(ctx, publishWait)
	s1 := p.take()
	if rss, err := peakRSS(); err == nil && v.InProcess() {
		res.PeakRSS = ptr(rss)
	}

	res.Gbps = fr.bitsPerSecond / 1e9
	res.Duration = fr.seconds
	g0, g1 := s0.guests, s1.guests
	switch {
	case m.kind() == kindUDP && fr.seconds > 0:
		res.PPS = float64(fr.packets) / fr.seconds
	case m.kind() == kindTCP && g0.ok && g1.ok && fr.seconds > 0:
		res.PPS = float64(g1.rxB-g0.rxB) / fr.seconds
	}
	if g0.ok && g1.ok && m.kind() != kindLatency {
		dev := g1.txDroppedA - g0.txDroppedA
		if m == UDPGSO {
			// The device counts a GSO packet once; each is one send of
			// gsoSegments datagrams.
			dev *= uint64(gsoSegments(m.payload(o.IPv6)))
		}
		res.SenderDevDrops = ptr(dev)
		res.ReceiverSocketDrops = ptr(g1.rcvbufB - g0.rcvbufB)
	}
	if fr.hasLoss {
		res.LossPct = ptr(fr.lossPct)
	}
	if fr.hasRetransmits {
		res.Retransmits = ptr(fr.retransmits)
	}
	if m.kind() == kindUDP {
		lostWhere(&res)
	}
	fill(&res, s0, w0, w1, s1, idle, dp.poolBytes())
	if l := fr.latency; l != nil {
		res.LatencyP50US, res.LatencyP99US, res.LatencyAvgUS = ptr(l.p50), ptr(l.p99), ptr(l.avg)
		// A ping-pong moves too little for a cost per Gbit to mean much.
		res.CPUPerGbit, res.WorkerCPUPerGbit, res.AllocsPerPacket = nil, nil, nil
		o.Progress(fmt.Sprintf("      %s: %s p50 %.1f µs, p99 %.1f µs one way", v.Name, m, l.p50, l.p99))
		return res, nil
	}
	o.Progress(fmt.Sprintf("      %s: %s %.2f Gbit/s, %.0f kpps", v.Name, m, res.Gbps, res.PPS/1e3))
	return res, nil
}

// runPDR searches for the highest offered UDP rate that the datapath
// carries with loss at most PDRLossPct, in o.PDRSteps trials of
// o.PDRTrial, the receiver with a large socket buffer.
func runPDR(ctx context.Context, o Options, gen generator, pair *guestPair, dp datapath, gc *guestCounters, v Variant, m Mode) (Result, error) {
	res := Result{Mode: m, Variant: v.Name}
	payload := m.payload(o.IPv6)
	o.Progress(fmt.Sprintf("      %s: %s, %d trials of %v", v.Name, m, o.PDRSteps, o.PDRTrial))
	trial := func(ctx context.Context, rate float64) (pdrTrial, error) {
		t := transfer{mode: m, d: o.PDRTrial, ipv6: o.IPv6, payload: payload, rate: rate, rcvbuf: pdrRcvBuf}
		g0, b0 := gc.sample(), pathDrops(dp)
		fl, err := gen.start(ctx, pair, t)
		if err != nil {
			return pdrTrial{}, err
		}
		fr, err := fl.wait(ctx)
		if err != nil {
			return pdrTrial{}, err
		}
		sleepCtx(ctx, publishWait)
		g1, b1 := gc.sample(), pathDrops(dp)
		tr := pdrTrial{Offered: rate, Received: fr.bitsPerSecond, LossPct: fr.lossPct, Lost: fr.lost, PathDrops: b1 - b0}
		if fr.seconds > 0 {
			tr.PPS = float64(fr.packets) / fr.seconds
			tr.Sent = float64(fr.packets+fr.lost) * float64(payload) * 8 / fr.seconds
		}
		if g0.ok && g1.ok {
			tr.DevDrops, tr.SockDrops = g1.txDroppedA-g0.txDroppedA, g1.rcvbufB-g0.rcvbufB
		}
		verdict := "pass"
		if !tr.pass() {
			verdict = "fail"
		}
		o.Progress(fmt.Sprintf("        offered %s: sent %.3f, received %.3f Gbit/s, loss %.2f%%: %s", fmtRate(rate), tr.Sent/1e9, tr.Received/1e9, tr.LossPct, verdict))
		return tr, nil
	}
	out, err := pdrSearch(ctx, o.PDRSteps, trial)
	if err != nil {
		return res, err
	}
	p := &PDRResult{Trials: len(out.trials), Limit: pdrLimit(out)}
	if out.fail != nil {
		p.BoundGbps = out.fail.offered() / 1e9
	}
	if b := out.best; b != nil {
		p.OfferedGbps = b.offered() / 1e9
		res.Gbps, res.PPS, res.LossPct = b.Received/1e9, b.PPS, ptr(b.LossPct)
		res.Duration = o.PDRTrial.Seconds()
	}
	res.PDR = p
	o.Progress(fmt.Sprintf("      %s: %s %.3f Gbit/s received at %.3f offered; limit: %s", v.Name, m, res.Gbps, p.OfferedGbps, p.Limit))
	return res, nil
}

// pathDrops returns the packets an in-process softnet datapath has
// dropped so far, for any reason; 0 for the others.
func pathDrops(dp datapath) uint64 {
	s, ok := dp.buffers()
	if !ok {
		return 0
	}
	var n uint64
	for _, c := range s.Drops {
		n += c
	}
	return n
}

// fmtRate prints an offered rate: "no limit" for 0.
func fmtRate(bps float64) string {
	if bps <= 0 {
		return "no limit"
	}
	return fmt.Sprintf("%.3f Gbit/s", bps/1e9)
}

// sleepCtx sleeps for d and reports whether it did, false if ctx ended
// it early.
// window measures the middle of a transfer of length d: it waits out a
// tenth of it (processes, connection set-up, slow start), calls open,
// and calls close a tenth before its end. It reports whether the window
// closed; false if ctx ended first.
func window(ctx context.Context, d time.Duration, open, close func()) bool {
	settle := max(minSettle, d/10)
	if !sleepCtx(ctx, settle) {
		return false
	}
	// The timer exists before the window opens: nothing of the lab's own
	// is allocated inside it.
	end := time.NewTimer(d - 2*settle)
	defer end.Stop()
	open()
	select {
	case <-end.C:
		close()
		return true
	case <-ctx.Done():
		return false
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
