package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"softnet.dev/internal/dpdk"
)

// The AF_XDP measurement (Options.AFXDP, `softnet lab --afxdp`): the veth
// topology of a pod network, two guests, each a namespace whose lab-a
// (lab-b) is one end of a veth pair, the other end (lab-ha, lab-hb) in a
// host namespace, joined there by each configuration in turn: softnet's
// afxdp ports (a `softnet switch` process, one worker), the kernel's
// bridge, and Open vSwitch's afxdp netdev (a private ovsdb-server and
// ovs-vswitchd, package dpdk, without DPDK: a netdev bridge, the NORMAL
// action). softnet's TAP path is the fourth, with TAP devices in the
// guests instead of veths. Then the idle CPU of a switch with
// AFXDPIdlePorts afxdp ports on as many veths.

// Names of the --afxdp configurations.
const (
	AFXDPSoftnet = "softnet-afxdp"
	AFXDPTAP     = "softnet-tap"
	AFXDPBridge  = "kernel-bridge" // the reference of the ratios
	AFXDPOVS     = "ovs-afxdp"
)

// AFXDPConfigs are the configurations of an --afxdp run, in order.
var AFXDPConfigs = []string{AFXDPSoftnet, AFXDPTAP, AFXDPBridge, AFXDPOVS}

// AFXDPModes are an --afxdp run's default modes.
var AFXDPModes = []Mode{UDP64, TCP}

const (
	// AFXDPIdlePorts is how many afxdp ports the idle measurement's
	// switch has.
	AFXDPIdlePorts  = 100
	afxdpIdleSettle = 2 * time.Second
	afxdpIdleWindow = 5 * time.Second
	afxdpPathWait   = 20 * time.Second // Open vSwitch's afxdp ports take a moment to start
	afxdpOVSBridge  = "br-lab"
)

// AFXDPResult is what an --afxdp run measured.
type AFXDPResult struct {
	// Configs are the configurations measured; each Result's Ratio is to
	// kernel-bridge's in the same mode.
	Configs []VariantResult
	// Skipped says which configurations were left out and why.
	Skipped    []string
	OVSVersion string `json:",omitempty"`
	// IdleCPUPct is the switch process's CPU time with IdlePorts afxdp
	// ports and no traffic, in percent of one CPU, over IdleSeconds;
	// IdleError why it has no figure.
	IdlePorts   int
	IdleSeconds float64
	IdleCPUPct  *float64
	IdleLeak    string `json:",omitempty"`
	IdleError   string `json:",omitempty"`
}

// runAFXDP measures every configuration o.Runs times interleaved, then
// the idle switch; it fills rep.AFXDP as it goes.
func runAFXDP(ctx context.Context, o Options, gen generator, rep *Report) error {
	if o.SoftnetBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("the softnet binary to run as the switch: %w", err)
		}
		o.SoftnetBinary = exe
	}
	ar := &AFXDPResult{}
	rep.AFXDP = ar
	configs := AFXDPConfigs
	if tools, err := dpdk.FindOVS(); err != nil {
		msg := fmt.Sprintf("%s skipped: %v", AFXDPOVS, err)
		ar.Skipped = append(ar.Skipped, msg)
		o.Progress(msg)
		configs = configs[:len(configs)-1]
	} else {
		ar.OVSVersion = tools.Version
	}
	runID := newRunID()
	var errs []error
	runs := make([][]VariantResult, len(configs))
	index, step, steps := 0, 0, o.Runs*len(configs)
rounds:
	for round := range o.Runs {
		for _, i := range rotation(len(configs), round) {
			if ctx.Err() != nil {
				break rounds
			}
			c := configs[i]
			step++
			label := fmt.Sprintf("[afxdp %d/%d] %s", step, steps, c)
			o.Progress(label)
			var vr *VariantResult
			var err error
			pprof.Do(ctx, pprof.Labels("afxdp", c), func(ctx context.Context) {
				vr, err = runAFXDPConfig(ctx, o, gen, runID, index, c, rep)
			})
			index++
			if vr != nil {
				runs[i] = append(runs[i], *vr)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", c, err))
				o.Progress(fmt.Sprintf("%s failed: %v", label, err))
			}
		}
	}
	for i := range configs {
		if len(runs[i]) > 0 {
			ar.Configs = append(ar.Configs, aggregateVariant(runs[i], o.Modes))
		}
	}
	ar.setRatios(o.Modes)
	if ctx.Err() == nil {
		o.Progress(fmt.Sprintf("[afxdp] idle: a switch with %d afxdp ports", AFXDPIdlePorts))
		if err := runAFXDPIdle(ctx, o, runID, index, ar, rep); err != nil {
			ar.IdleError = err.Error()
			errs = append(errs, fmt.Errorf("idle: %w", err))
		}
	}
	return errors.Join(errs...)
}

// runAFXDPConfig builds configuration c on namespaces of its own, runs
// every mode across it and takes it down again.
func runAFXDPConfig(ctx context.Context, o Options, gen generator, runID string, index int, c string, rep *Report) (vr *VariantResult, err error) {
	u := &undoStack{}
	defer func() {
		if uerr := u.unwind(); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	vr = &VariantResult{Variant: Variant{Name: c}}
	pair, err := newGuestPair(runID, index, u)
	if err != nil {
		return vr, err
	}
	host := nsName(runID, index, 'h')
	rep.Namespaces = append(rep.Namespaces, pair.a.ns, pair.b.ns, host)
	var path switchedPath
	var sw *switchProc
	stopSwitch := func() error {
		if sw == nil {
			return nil
		}
		err := sw.stop()
		vr.Leak = sw.leak
		if err == nil && sw.leak != "ok" {
			err = fmt.Errorf("leak check: %s", sw.leak)
		}
		sw = nil
		return err
	}
	switch c {
	case AFXDPOVS:
		ovs, err := dpdk.StartOVS(ctx, dpdk.OVSConfig{NoDPDK: true, Timeout: afxdpPathWait})
		if err != nil {
			return vr, err
		}
		u.push("open vswitch", func() error { return ovs.Stop(vhostStop) })
		// ovs-vswitchd runs in a namespace of its own: the veths' host
		// ends go there, through a name the lab gives it.
		if err := ip("netns", "attach", host, strconv.Itoa(ovs.Pid())); err != nil {
			return vr, err
		}
		u.push("namespace name "+host, func() error { return deleteNamespace(host) })
		if err := afxdpVeths(pair, host, o.AFXDPMTU); err != nil {
			return vr, err
		}
		args := []string{"--", "add-br", afxdpOVSBridge, "--", "set", "Bridge", afxdpOVSBridge, "datapath_type=netdev"}
		for _, p := range []string{"lab-ha", "lab-hb"} {
			args = append(args, "--", "add-port", afxdpOVSBridge, p, "--", "set", "Interface", p, "type=afxdp", "options:xdp-mode=native")
			if o.AFXDPMTU != 0 {
				args = append(args, fmt.Sprintf("mtu_request=%d", o.AFXDPMTU))
			}
		}
		// Open vSwitch's afxdp ports do not finish the checksums a veth
		// peer leaves partial, and its documentation has the peer turn
		// its transmit offload off; softnet finishes them itself.
		for _, g := range pair.guests() {
			if err := ip("netns", "exec", g.ns, "ethtool", "-K", g.dev, "tx", "off"); err != nil {
				return vr, err
			}
		}
		if _, err := ovs.Vsctl(ctx, args...); err != nil {
			return vr, fmt.Errorf("open vswitch: %w\n%s", err, ovs.Log())
		}
		if err := checkNormal(ctx, ovs); err != nil {
			return vr, err
		}
		path.pids = []int{ovs.Pid()}
		vr.Variant.Desc = "guests' tx offload off"
	default:
		if err := addNamespace(host); err != nil {
			return vr, err
		}
		u.push("namespace "+host, func() error { return deleteNamespace(host) })
		var ports []string
		switch c {
		case AFXDPSoftnet:
			if err := afxdpVeths(pair, host, o.AFXDPMTU); err != nil {
				return vr, err
			}
			ports = []string{"--port", "afxdp:lab-ha", "--port", "afxdp:lab-hb"}
			path.count = afxdpCounts
		case AFXDPTAP:
			ports = []string{"--port", fmt.Sprintf("tap:%s,netns=%s", pair.a.dev, pair.a.ns), "--port", fmt.Sprintf("tap:%s,netns=%s", pair.b.dev, pair.b.ns)}
		case AFXDPBridge:
			if err := afxdpVeths(pair, host, o.AFXDPMTU); err != nil {
				return vr, err
			}
			if err := ipBatch(host, []string{"link add lab-br type bridge", "link set lab-ha master lab-br", "link set lab-hb master lab-br", "link set lab-br up"}); err != nil {
				return vr, err
			}
		default:
			return vr, fmt.Errorf("unknown configuration %q", c)
		}
		if ports != nil {
			if sw, err = startSwitchProc(ctx, o.SoftnetBinary, host, ports); err != nil {
				return vr, err
			}
			u.push("switch in "+host, stopSwitch)
			path.sws = []*switchProc{sw}
		}
		if c == AFXDPTAP && o.AFXDPMTU != 0 {
			// The switch made the TAP devices; the veths had theirs
			// from the start.
			for _, g := range pair.guests() {
				if err := ip("-n", g.ns, "link", "set", g.dev, "mtu", strconv.Itoa(o.AFXDPMTU)); err != nil {
					return vr, err
				}
			}
		}
	}
	if err := pair.configure(); err != nil {
		return vr, err
	}
	if err := waitGuestPath(ctx, pair, o.IPv6); err != nil {
		return vr, err
	}
	gc, err := openGuestCounters(pair)
	if err != nil {
		return vr, err
	}
	u.push("netlink sockets", func() error { gc.close(); return nil })
	for _, m := range o.Modes {
		payload := 0
		if m == UDP64 {
			payload = SmallUDP
		}
		res, err := runOverlayMode(ctx, o, gen, pair, path, gc, c, m, payload)
		if err != nil {
			return vr, fmt.Errorf("%s: %w", m, err)
		}
		vr.Results = append(vr.Results, res)
	}
	// Now rather than at unwind: the leak check belongs to the result.
	return vr, stopSwitch()
}

// afxdpVeths makes the guests' veths, their host ends lab-ha and lab-hb
// in the namespace host, up; both ends with MTU mtu unless it is 0. The
// MTU comes first: a veth whose peer has an XDP program takes no MTU
// larger than that program allows (a page, less headroom, unless it
// handles frames in pieces).
func afxdpVeths(pair *guestPair, host string, mtu int) error {
	var cmds []string
	m := ""
	if mtu != 0 {
		m = fmt.Sprintf(" mtu %d", mtu)
	}
	for i, g := range pair.guests() {
		end := fmt.Sprintf("lab-h%c", 'a'+i)
		cmds = append(cmds, fmt.Sprintf("link add %s%s type veth peer name %s netns %s%s", end, m, g.dev, g.ns, m), fmt.Sprintf("link set %s up", end))
	}
	return ipBatch(host, cmds)
}

// waitGuestPath pings b from a until it answers, for up to
// afxdpPathWait.
func waitGuestPath(ctx context.Context, pair *guestPair, ipv6 bool) error {
	dst := pair.b.addr(ipv6).String()
	deadline := time.Now().Add(afxdpPathWait)
	for {
		err := ip("netns", "exec", pair.a.ns, "ping", "-c", "1", "-W", "1", dst)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no path from %s to %s: %w", pair.a.ns, pair.b.ns, err)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// runAFXDPIdle starts a switch with AFXDPIdlePorts afxdp ports on the
// host ends of as many veths, whose other ends are up in one namespace
// and send nothing, and measures its CPU time.
func runAFXDPIdle(ctx context.Context, o Options, runID string, index int, ar *AFXDPResult, rep *Report) (err error) {
	u := &undoStack{}
	defer func() {
		if uerr := u.unwind(); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	host, peers := nsName(runID, index, 'h'), nsName(runID, index, 'p')
	for _, ns := range []string{host, peers} {
		if err := addNamespace(ns); err != nil {
			return err
		}
		u.push("namespace "+ns, func() error { return deleteNamespace(ns) })
	}
	rep.Namespaces = append(rep.Namespaces, host, peers)
	var cmds, up []string
	args := make([]string, 0, 2*AFXDPIdlePorts)
	for i := range AFXDPIdlePorts {
		cmds = append(cmds, fmt.Sprintf("link add lab-i%d type veth peer name lab-p%d netns %s", i, i, peers), fmt.Sprintf("link set lab-i%d up", i))
		up = append(up, fmt.Sprintf("link set lab-p%d up", i))
		args = append(args, "--port", fmt.Sprintf("afxdp:lab-i%d", i))
	}
	if err := ipBatch(host, cmds); err != nil {
		return err
	}
	if err := ipBatch(peers, up); err != nil {
		return err
	}
	sw, err := startSwitchProc(ctx, o.SoftnetBinary, host, args)
	if err != nil {
		return err
	}
	stopped := false
	u.push("switch in "+host, func() error {
		if stopped {
			return nil
		}
		return sw.stop()
	})
	if !sleepCtx(ctx, afxdpIdleSettle) {
		return ctx.Err()
	}
	c0, err := sw.cpu()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if !sleepCtx(ctx, afxdpIdleWindow) {
		return ctx.Err()
	}
	c1, err := sw.cpu()
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	ar.IdlePorts, ar.IdleSeconds = AFXDPIdlePorts, secs
	ar.IdleCPUPct = ptr((c1 - c0).Seconds() / secs * 100)
	o.Progress(fmt.Sprintf("      idle: %d afxdp ports, switch CPU %.2f%% over %.1f s", AFXDPIdlePorts, *ar.IdleCPUPct, secs))
	stopped = true
	err = sw.stop()
	ar.IdleLeak = sw.leak
	if err == nil && !strings.EqualFold(sw.leak, "ok") {
		err = fmt.Errorf("leak check: %s", sw.leak)
	}
	return err
}
