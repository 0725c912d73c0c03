package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"softnet.dev/drop"
	"softnet.dev/internal/vswitch"
	"softnet.dev/program"
)

// The bandwidth measurement (Options.Bandwidth): how closely softnet's
// rate limits (its ports' ingress-rate and egress-rate, which softnet-cni
// sets from the CNI bandwidth capability) hold a pod to its rate, beside
// the reference CNI bandwidth plugin's, which shapes the host end of a
// pod's veth pair with tc (a TBF qdisc for what the pod receives, one on
// an IFB device for what it sends).
//
// For each rate, each datapath gets two fresh namespaces: a, the pod,
// and b, the host side. kernel-veth+tc is a veth pair with the plugin run
// in b, as a runtime chains it after the plugin that made the pair;
// softnet is a TUN port in each, the pod's port limited both ways at the
// same rate and burst. iperf3 then sends TCP and UDP both ways: the pod
// sending (its egress: the IFB's TBF; softnet's ingress-rate) and
// receiving (its ingress: the host end's TBF; softnet's egress-rate). UDP
// is offered at 1.5× the rate, with 4 MiB socket buffers (iperf3 -w).
// The first second of each transfer, in which the bucket's burst goes
// through, is left out of the figures (iperf3 -O 1).

// The reference plugin, built at run time from the Go module proxy.
const (
	BandwidthPluginModule  = "github.com/containernetworking/plugins/plugins/meta/bandwidth"
	BandwidthPluginVersion = "v1.10.0"
)

// DefaultBandwidthRates are the rates measured, in bits per second.
var DefaultBandwidthRates = []uint64{10e6, 100e6, 1e9}

// Goals of the bandwidth measurement.
const (
	goalBandwidthUDP = 0.05 // UDP received within 5 % of the rate
	goalBandwidthTCP = 0.9  // TCP goodput ≥ 0.9× tc's at the same limit
	udpOverRate      = 1.5  // UDP offered, over the rate
	bandwidthOmit    = 1    // seconds left out at the start of each transfer
	bandwidthRcvBuf  = 4 << 20
)

// Datapaths of the bandwidth measurement.
const (
	BandwidthTC      = "kernel-veth+tc"
	BandwidthSoftnet = "softnet"
)

// Directions, the pod's, as the CNI capability names them.
const (
	PodEgress  = "pod-egress"  // the pod sends: CNI egressRate, softnet's ingress-rate
	PodIngress = "pod-ingress" // the pod receives: CNI ingressRate, softnet's egress-rate
)

// BandwidthResult is a --bandwidth run.
type BandwidthResult struct {
	Plugin string // the reference plugin, module@version
	Rows   []BandwidthRow
}

// BandwidthRow is one limit, protocol and direction, through both
// datapaths.
type BandwidthRow struct {
	Rate, Burst uint64 // bits per second, bits
	Proto       string // tcp or udp
	Dir         string // PodEgress or PodIngress
	// TC and Softnet are the receiver's payload bits per second (iperf3's
	// figure), 0 if the transfer failed.
	TC, Softnet float64
	// TCLoss and SoftnetLoss are UDP's datagrams lost, in percent;
	// retransmits TCP's.
	TCLoss, SoftnetLoss               float64
	TCRetransmits, SoftnetRetransmits int64
	// Police is softnet's drops by its policer during the transfer.
	Police uint64
}

// Ratio returns a datapath's bits per second over the set rate.
func (r BandwidthRow) Ratio(v float64) float64 { return v / float64(r.Rate) }

// buildBandwidthPlugin builds the reference plugin into dir with the Go
// toolchain, from the module proxy, and returns its path.
func buildBandwidthPlugin(ctx context.Context, dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the reference bandwidth plugin is built at run time: no go toolchain (or give --bandwidth-plugin PATH): %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "install", BandwidthPluginModule+"@"+BandwidthPluginVersion)
	// Outside any module: go install takes the version given.
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w: %s", BandwidthPluginModule, BandwidthPluginVersion, err, bytes.TrimSpace(out))
	}
	return filepath.Join(dir, "bandwidth"), nil
}

// bandwidthConf is the reference plugin's configuration as a runtime
// chains it: the bandwidth capability's arguments and the result of the
// plugin that made the veth pair (the host end first, without sandbox).
func bandwidthConf(p *guestPair, rate, burst uint64) ([]byte, error) {
	bw := map[string]uint64{"ingressRate": rate, "ingressBurst": burst, "egressRate": rate, "egressBurst": burst}
	return json.Marshal(map[string]any{
		"cniVersion":    "1.0.0",
		"name":          "softnet-lab-bandwidth",
		"type":          "bandwidth",
		"runtimeConfig": map[string]any{"bandwidth": bw},
		"prevResult": map[string]any{
			"cniVersion": "1.0.0",
			"interfaces": []any{map[string]any{"name": p.b.dev}, map[string]any{"name": p.a.dev, "sandbox": nsPath(p.a.ns)}},
		},
	})
}

func nsPath(ns string) string { return "/var/run/netns/" + ns }

// runBandwidthPlugin runs the plugin's command (ADD or DEL) in b, the
// host side, for the pod a.
func runBandwidthPlugin(plugin, command string, p *guestPair, conf []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", p.b.ns, plugin)
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+p.a.ns, "CNI_NETNS="+nsPath(p.a.ns),
		"CNI_IFNAME="+p.a.dev, "CNI_PATH="+filepath.Dir(plugin))
	cmd.Stdin = bytes.NewReader(conf)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bandwidth plugin %s: %w: %s", command, err, bytes.TrimSpace(out))
	}
	return nil
}

// runBandwidth measures every rate through both datapaths.
func runBandwidth(ctx context.Context, o Options, rep *Report) error {
	ip3, err := findIperf3()
	if err != nil {
		return fmt.Errorf("--bandwidth needs iperf3: %w", err)
	}
	plugin := o.BandwidthPlugin
	res := &BandwidthResult{Plugin: BandwidthPluginModule + "@" + BandwidthPluginVersion}
	if plugin == "" {
		dir, err := os.MkdirTemp("", "softnet-lab-bandwidth-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.Progress("building " + res.Plugin + " (go install, from the module proxy)")
		if plugin, err = buildBandwidthPlugin(ctx, dir); err != nil {
			return err
		}
	} else {
		res.Plugin = plugin
	}
	rep.Bandwidth = res
	runID := newRunID()
	var errs []error
	index := 0
	for _, rate := range o.BandwidthRates {
		burst := o.bandwidthBurst(rate)
		rows := make([]BandwidthRow, 0, 4)
		for _, proto := range []string{"tcp", "udp"} {
			for _, dir := range []string{PodEgress, PodIngress} {
				rows = append(rows, BandwidthRow{Rate: rate, Burst: burst, Proto: proto, Dir: dir})
			}
		}
		for _, path := range []string{BandwidthTC, BandwidthSoftnet} {
			if ctx.Err() != nil {
				break
			}
			o.Progress(fmt.Sprintf("%s at %s/s, burst %s", path, bitsString(rate), bitsString(burst)))
			if err := bandwidthPath(ctx, o, ip3, plugin, runID, index, path, rows); err != nil {
				errs = append(errs, fmt.Errorf("%s at %s/s: %w", path, bitsString(rate), err))
			}
			index++
		}
		res.Rows = append(res.Rows, rows...)
	}
	return errors.Join(errs...)
}

// bandwidthPath sets up one datapath at rows' limit in namespaces of its
// own, runs every row's transfer through it and takes it down.
func bandwidthPath(ctx context.Context, o Options, ip3 *iperf3Gen, plugin, runID string, index int, path string, rows []BandwidthRow) (err error) {
	u := &undoStack{}
	defer func() { err = errors.Join(err, u.unwind()) }()
	p, err := newGuestPair(runID, index, u)
	if err != nil {
		return err
	}
	rate, burst := rows[0].Rate, rows[0].Burst
	var sw *softnetPath
	switch path {
	case BandwidthTC:
		if _, err := openVeth(p); err != nil {
			return err
		}
		if err := p.configure(); err != nil {
			return err
		}
		conf, err := bandwidthConf(p, rate, burst)
		if err != nil {
			return err
		}
		if err := runBandwidthPlugin(plugin, "ADD", p, conf); err != nil {
			return err
		}
		// DEL removes the IFB device; the namespaces take the rest.
		u.push("bandwidth plugin DEL", func() error { return runBandwidthPlugin(plugin, "DEL", p, conf) })
	case BandwidthSoftnet:
		cfg := switchConfig(p, softnetConfig{Workers: 1, Offload: true, GRO: true}, false)
		limit := program.Limit{Rate: rate, Burst: burst}
		cfg.Ports[0].Ingress, cfg.Ports[0].Egress = limit, limit
		if sw, err = openSoftnet(cfg, vswitch.Tuning{}, o.Log); err != nil {
			return err
		}
		u.push("softnet switch", func() error { _, err := sw.close(); return err })
		if err := p.configure(); err != nil {
			return err
		}
	}
	if err := p.checkPath(ctx, false); err != nil {
		return err
	}
	var errs []error
	for i := range rows {
		r := &rows[i]
		// The first second, in which the full bucket empties, is left out:
		// the figures are the rate held.
		t := transfer{mode: UDP, d: o.Duration, payload: UDPPayload, rate: udpOverRate * float64(rate), rcvbuf: bandwidthRcvBuf,
			reverse: r.Dir == PodIngress, omit: bandwidthOmit}
		if r.Proto == "tcp" {
			t = transfer{mode: TCP, d: o.Duration, streams: 1, reverse: r.Dir == PodIngress, omit: bandwidthOmit}
		}
		police := func() uint64 { return 0 }
		if sw != nil {
			police = func() uint64 {
				d := sw.sw.Engine().Stats().Ports[0].Drops
				return d[drop.PoliceIngress] + d[drop.PoliceEgress]
			}
		}
		before := police()
		f, err := ip3.start(ctx, p, t)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", r.Proto, r.Dir, err))
			continue
		}
		fr, err := f.wait(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", r.Proto, r.Dir, err))
			continue
		}
		if !sleepCtx(ctx, publishWait) {
			return ctx.Err()
		}
		switch path {
		case BandwidthTC:
			r.TC, r.TCLoss, r.TCRetransmits = fr.bitsPerSecond, fr.lossPct, fr.retransmits
		case BandwidthSoftnet:
			r.Softnet, r.SoftnetLoss, r.SoftnetRetransmits = fr.bitsPerSecond, fr.lossPct, fr.retransmits
			r.Police = police() - before
		}
	}
	return errors.Join(errs...)
}

// bitsString writes n bits as 10M, 1G.
func bitsString(n uint64) string {
	for _, s := range []struct {
		suffix string
		mult   uint64
	}{{"G", 1e9}, {"M", 1e6}, {"k", 1e3}} {
		if n >= s.mult && n%s.mult == 0 {
			return fmt.Sprintf("%d%sbit", n/s.mult, s.suffix)
		}
	}
	return fmt.Sprintf("%dbit", n)
}

// goals are, for every rate, softnet's UDP within 5 % of the rate and its
// TCP goodput at least 0.9× tc's.
func (r *BandwidthResult) goals() []Goal {
	var out []Goal
	for _, row := range r.Rows {
		name := fmt.Sprintf("%s %s %s/s %s", BandwidthSoftnet, row.Proto, bitsString(row.Rate), row.Dir)
		switch {
		case row.Proto == "udp" && row.Softnet > 0:
			v := row.Ratio(row.Softnet)
			out = append(out, Goal{Mode: UDP, Goal: fmt.Sprintf("%s within %g%% of the rate", name, goalBandwidthUDP*100), Value: v,
				Figure: fmt.Sprintf("%.3fx", v), Met: v >= 1-goalBandwidthUDP && v <= 1+goalBandwidthUDP})
		case row.Proto == "tcp" && row.Softnet > 0 && row.TC > 0:
			v := row.Softnet / row.TC
			out = append(out, Goal{Mode: TCP, Goal: fmt.Sprintf("%s >= %.1fx %s", name, goalBandwidthTCP, BandwidthTC), Value: v,
				Figure: fmt.Sprintf("%.2fx", v), Met: v >= goalBandwidthTCP})
		}
	}
	return out
}
