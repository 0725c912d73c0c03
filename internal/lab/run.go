package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
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

// Run measures every variant o asks for, one after another, each between
// two namespaces of its own that are removed before the next begins. The
// report holds every variant measured, also when Run fails: a variant
// that fails (or leaks buffers) does not stop the others, and its error
// is returned at the end. When ctx is cancelled Run removes what exists,
// and returns an error that matches ctx's.
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
	rep := &Report{Options: o, Traffic: gen.name(), Builtin: builtin, Note: note}
	if note != "" {
		o.Progress(note)
	}
	runID := newRunID()
	variants := Variants(o)
	var errs []error
	for i, v := range variants {
		if ctx.Err() != nil {
			break
		}
		o.Progress(fmt.Sprintf("[%d/%d] %s", i+1, len(variants), v.Name))
		var vr *VariantResult
		var err error
		// Goroutines the variant starts (the engine's worker) carry its
		// name in CPU profiles: go tool pprof -tagfocus variant=+bulk.
		pprof.Do(ctx, pprof.Labels("variant", v.Name), func(ctx context.Context) {
			vr, err = runVariant(ctx, o, gen, runID, i, v, rep)
		})
		if vr != nil {
			rep.Variants = append(rep.Variants, *vr)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", v.Name, err))
			if ctx.Err() != nil {
				o.Progress(fmt.Sprintf("[%d/%d] %s interrupted; what it created is removed", i+1, len(variants), v.Name))
			} else {
				o.Progress(fmt.Sprintf("[%d/%d] %s failed: %v", i+1, len(variants), v.Name, err))
			}
		}
	}
	rep.setRatios()
	if err := ctx.Err(); err != nil {
		errs = append(errs, fmt.Errorf("lab interrupted: %w", err))
	}
	return rep, errors.Join(errs...)
}

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
func runVariant(ctx context.Context, o Options, gen generator, runID string, index int, v Variant, rep *Report) (vr *VariantResult, err error) {
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
		res, err := runMode(ctx, o, gen, pair, dp, gc, v, m)
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
		return openSoftnet(p, v.softnet, o.TAP, o.Log)
	}
}

// runMode runs one transfer through the datapath and measures it.
func runMode(ctx context.Context, o Options, gen generator, pair *guestPair, dp datapath, gc *guestCounters, v Variant, m Mode) (Result, error) {
	res := Result{Mode: m, Variant: v.Name}
	// Garbage from the setup is collected now, not in the window.
	runtime.GC()
	idle := idleRate(idleFor)
	res.RSSReset = resetPeakRSS()
	p := &probe{dp: dp}
	if s, ok := dp.(*softnetPath); ok {
		p.devices = s.deviceNoMem
	}
	o.Progress(fmt.Sprintf("      %s: %s for %v", v.Name, m, o.Duration))
	g0 := gc.sample()
	s0 := p.take()
	fl, err := gen.start(ctx, pair, m, o.Duration, o.IPv6)
	if err != nil {
		return res, err
	}
	p.flow = fl
	// The window leaves out a tenth of the transfer at each end: the
	// start (processes, connection set-up, slow start) and the end.
	settle := max(minSettle, o.Duration/10)
	var w0, w1 snapshot
	measured := false
	if sleepCtx(ctx, settle) {
		// The timer exists before the window opens: nothing of the lab's
		// own is allocated inside it.
		end := time.NewTimer(o.Duration - 2*settle)
		w0 = p.windowStart()
		select {
		case <-end.C:
			w1 = p.windowEnd()
			measured = true
		case <-ctx.Done():
			end.Stop()
		}
	}
	fr, err := fl.wait(ctx)
	if err != nil {
		return res, err
	}
	if !measured {
		return res, ctx.Err()
	}
	sleepCtx(ctx, publishWait)
	s1 := p.take()
	g1 := gc.sample()
	if rss, err := peakRSS(); err == nil && v.InProcess() {
		res.PeakRSS = ptr(rss)
	}

	res.Gbps = fr.bitsPerSecond / 1e9
	res.Duration = fr.seconds
	switch {
	case m == UDP && fr.seconds > 0:
		res.PPS = float64(fr.packets) / fr.seconds
	case g0.ok && g1.ok && fr.seconds > 0:
		res.PPS = float64(g1.rxB-g0.rxB) / fr.seconds
	}
	if g0.ok && g1.ok {
		res.SenderDevDrops = ptr(g1.txDroppedA - g0.txDroppedA)
		res.ReceiverSocketDrops = ptr(g1.rcvbufB - g0.rcvbufB)
	}
	if fr.hasLoss {
		res.LossPct = ptr(fr.lossPct)
	}
	if fr.hasRetransmits {
		res.Retransmits = ptr(fr.retransmits)
	}
	fill(&res, s0, w0, w1, s1, idle, dp.poolBytes())
	o.Progress(fmt.Sprintf("      %s: %s %.2f Gbit/s", v.Name, m, res.Gbps))
	return res, nil
}

// sleepCtx sleeps for d and reports whether it did, false if ctx ended
// it early.
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
