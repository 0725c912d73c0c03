package lab

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"softnet.dev/internal/bench"
)

// Goals of the AF_XDP measurement (issue 31), softnet-afxdp against the
// other configurations of the same run.
const (
	goalAFXDPVsTAP      = 3.0  // UDP 64 B datagrams/s ≥ 3× softnet's TAP path
	goalAFXDPVsOVS      = 1.2  // ≥ 1.2× Open vSwitch's afxdp netdev
	goalAFXDPVsBridge   = 1.0  // ≥ the kernel bridge
	goalAFXDPTCP        = 0.7  // TCP Gbit/s ≥ 0.7× the kernel bridge
	goalAFXDPSyscalls   = 0.05 // system calls per packet at load
	goalAFXDPIdleCPUPct = 1.0  // idle CPU with 100 ports, % of one CPU
)

func (r *AFXDPResult) result(name string, m Mode) *Result {
	return resultOf(r.Configs, name, m)
}

// setRatios relates every figure to kernel-bridge's in the same mode.
func (r *AFXDPResult) setRatios(modes []Mode) { relateTo(r.Configs, AFXDPBridge, modes) }

// goals evaluates softnet-afxdp against the others, and the idle switch.
func (r *AFXDPResult) goals(modes []Mode) []Goal {
	var out []Goal
	for _, m := range modes {
		sn := r.result(AFXDPSoftnet, m)
		if sn == nil {
			continue
		}
		versus := func(peer string, bound float64, udp bool) {
			p := r.result(peer, m)
			if p == nil {
				return
			}
			a, b, what := sn.Gbps, p.Gbps, ""
			if udp {
				a, b, what = sn.PPS, p.PPS, " datagrams/s"
			}
			if b > 0 {
				v := a / b
				out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s%s >= %.2fx %s", AFXDPSoftnet, what, bound, peer), Value: v, Figure: fmt.Sprintf("%.2fx", v), Met: v >= bound})
			}
		}
		switch {
		case m == UDP64:
			versus(AFXDPTAP, goalAFXDPVsTAP, true)
			versus(AFXDPOVS, goalAFXDPVsOVS, true)
			versus(AFXDPBridge, goalAFXDPVsBridge, true)
		case m.kind() == kindTCP:
			versus(AFXDPBridge, goalAFXDPTCP, false)
		}
		if v := sn.SyscallsPerPacket; v != nil {
			out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s system calls/packet <= %g", AFXDPSoftnet, goalAFXDPSyscalls), Value: *v, Figure: fmt.Sprintf("%.3f", *v), Met: *v <= goalAFXDPSyscalls})
		}
		if v := sn.AllocsPerPacket; v != nil {
			out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s allocs/packet < %g", AFXDPSoftnet, goalAllocs), Value: *v, Figure: fmt.Sprintf("%.2g", *v), Met: *v < goalAllocs})
		}
	}
	if v := r.IdleCPUPct; v != nil && len(modes) > 0 {
		out = append(out, Goal{Mode: modes[0], Goal: fmt.Sprintf("%s idle CPU with %d ports <= %g%%", AFXDPSoftnet, r.IdlePorts, goalAFXDPIdleCPUPct), Value: *v, Figure: fmt.Sprintf("%.2f%%", *v), Met: *v <= goalAFXDPIdleCPUPct})
	}
	return out
}

// writeAFXDPTable prints an --afxdp run: a table per mode, then what the
// configurations and columns are, the idle switch, the leak checks and
// the goals.
func writeAFXDPTable(w io.Writer, r *Report) error {
	o, ar := r.Options, r.AFXDP
	family := "IPv4"
	if o.IPv6 {
		family = "IPv6"
	}
	fmt.Fprintf(w, "softnet lab --afxdp: %s\n", bench.Machine())
	mtu := 1500
	if o.AFXDPMTU != 0 {
		mtu = o.AFXDPMTU
	}
	fmt.Fprintf(w, "%v per transfer, guest to guest over %s, each guest's veth (TAP for softnet-tap) joined in a host namespace, MTU %d\n", o.Duration, family, mtu)
	if o.Runs > 1 {
		fmt.Fprintf(w, "%d runs, interleaved (configuration order rotated each round): medians, and the spread (half the range / median)\n", o.Runs)
	}
	if r.Note != "" {
		fmt.Fprintf(w, "note: %s\n", r.Note)
	}
	for _, s := range ar.Skipped {
		fmt.Fprintf(w, "skipped: %s\n", s)
	}
	for _, m := range o.Modes {
		has := false
		for i := range ar.Configs {
			has = has || ar.Configs[i].result(m) != nil
		}
		if !has {
			continue
		}
		title := modeTitle(m, r)
		if m == UDP64 {
			title = fmt.Sprintf("%s: %d-byte datagrams at no rate limit (%s)", m, SmallUDP, r.Traffic)
		}
		fmt.Fprintf(w, "\n%s\n", title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		udp := m.kind() == kindUDP
		if udp {
			fmt.Fprintf(tw, "  configuration\tGbit/s\tkpps\tx bridge\tspread\tloss\tlost in dev/sock\tfwd kpps\tswitch CPU us/dgram\tcalls/pkt\tallocs/pkt\n")
		} else {
			fmt.Fprintf(tw, "  configuration\tGbit/s\tx bridge\tspread\tkpps\tretrans\tswitch CPU s/Gbit\tcalls/pkt\tallocs/pkt\n")
		}
		for i := range ar.Configs {
			res := ar.Configs[i].result(m)
			if res == nil {
				continue
			}
			costs := fmt.Sprintf("%s\t%s", fmtOpt(res.SyscallsPerPacket, "%.3f"), fmtAllocs(res.AllocsPerPacket))
			if udp {
				loss := "-"
				if res.LossPct != nil {
					loss = fmt.Sprintf("%.1f%%", *res.LossPct)
				}
				fmt.Fprintf(tw, "  %s\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", res.Variant, res.Gbps, res.PPS/1e3, fmtRatio(res.Ratio), fmtSpread(res),
					loss, fmtLostWhere(res), fmtOpt(scale(res.ForwardedPPS, 1e-3), "%.0f"), fmtOpt(res.CPUPerPacketUS, "%.2f"), costs)
				continue
			}
			retrans := "-"
			if res.Retransmits != nil {
				retrans = fmt.Sprint(*res.Retransmits)
			}
			fmt.Fprintf(tw, "  %s\t%.2f\t%s\t%s\t%.0f\t%s\t%s\t%s\n", res.Variant, res.Gbps, fmtRatio(res.Ratio), fmtSpread(res), res.PPS/1e3, retrans, fmtOpt(res.CPUPerGbit, "%.3f"), costs)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	ovs := ar.OVSVersion
	if ovs == "" {
		ovs = "not run"
	}
	fmt.Fprintf(w, `
configurations
  %-14s a softnet switch process (one worker): afxdp ports on the veths' host ends
  %-14s the same switch with TAP devices in the guests instead of veths
  %-14s the kernel's bridge of the veths' host ends: the reference (x bridge)
  %-14s Open vSwitch, userspace datapath (netdev bridge, NORMAL), afxdp ports in native
                 XDP mode, its PMD thread polling; the guests' transmit checksum offload
                 off, as its documentation asks (%s)
kpps: udp datagrams received; tcp packets the receiving device counted. fwd kpps:
  datagrams per second that reached the receiving guest's UDP layer over the middle of
  the transfer. switch CPU: the switch process's (softnet's, ovs-vswitchd's) CPU time
  over that window, per datagram that reached the guest or per Gbit received; none for
  the kernel bridge, whose work is the guests' softirqs.
calls/pkt: the afxdp ports' system calls (fill-ring wakeups, transmit kicks) per packet
  they received or sent. allocs/pkt: the switch process's heap allocations
  (heap_allocs from its control API's /v1/stats, exact; the lab's one request inside
  the window subtracted) per such packet.
`, AFXDPSoftnet, AFXDPTAP, AFXDPBridge, AFXDPOVS, ovs)
	switch {
	case ar.IdleCPUPct != nil:
		fmt.Fprintf(w, "idle: a switch with %d afxdp ports on veths, no traffic: %.2f%% of one CPU over %.1f s (leak check %s)\n", ar.IdlePorts, *ar.IdleCPUPct, ar.IdleSeconds, ar.IdleLeak)
	case ar.IdleError != "":
		fmt.Fprintf(w, "idle: no figure: %s\n", ar.IdleError)
	}
	var bad []string
	n := 0
	for _, c := range ar.Configs {
		if c.Leak == "" {
			continue
		}
		n++
		if c.Leak != "ok" {
			bad = append(bad, fmt.Sprintf("  %s: %s", c.Variant.Name, c.Leak))
		}
	}
	switch {
	case n == 0:
	case len(bad) == 0:
		fmt.Fprintf(w, "leak check: ok for every softnet switch process (%d configurations)\n", n)
	default:
		fmt.Fprintf(w, "leak check FAILED:\n%s\n", strings.Join(bad, "\n"))
	}
	writeGoals(w, r.Goals())
	return nil
}

// afxdpReports are an --afxdp run as softnet bench's reports: an
// experiment per mode (lab-afxdp-udp64), the configurations its
// variants, and lab-afxdp-idle.
func afxdpReports(r *Report) []bench.Report {
	ar := r.AFXDP
	goals := r.Goals()
	var reports []bench.Report
	for _, m := range r.Options.Modes {
		e := &bench.Experiment{Name: "lab-afxdp-" + string(m), Desc: "veth topology, " + modeTitle(m, r), Metric: "gbit_per_s", Unit: "Gbit/s", Higher: true}
		br := bench.Report{Experiment: e}
		for i := range ar.Configs {
			res := ar.Configs[i].result(m)
			if res == nil {
				continue
			}
			var leak, ratioTo any
			if ar.Configs[i].Leak != "" {
				leak = ar.Configs[i].Leak
			}
			if res.RatioTo != "" {
				ratioTo = res.RatioTo
			}
			br.Results = append(br.Results, bench.Result{
				Experiment: e.Name, Variant: res.Variant, Metric: e.Metric, Value: res.main(), Unit: e.Unit, Ratio: res.Ratio,
				Ops: int(res.PPS * res.Duration), Reps: reps(res),
				Extra: map[string]any{
					"mode": string(m), "traffic": r.Traffic, "pps": res.PPS, "loss_pct": res.LossPct, "retransmits": res.Retransmits,
					"sender_dev_drops": res.SenderDevDrops, "receiver_socket_drops": res.ReceiverSocketDrops,
					"forwarded_pps": res.ForwardedPPS, "switch_cpu_s_per_gbit": res.CPUPerGbit, "switch_cpu_us_per_datagram": res.CPUPerPacketUS,
					"syscalls_per_packet": res.SyscallsPerPacket, "allocs_per_packet": res.AllocsPerPacket, "port_packets": res.Forwarded,
					"ratio_to": ratioTo, "duration_s": res.Duration, "runs": max(res.Runs, 1), "spread": res.Spread, "leak_check": leak,
					"ovs_version": ar.OVSVersion,
				},
			})
		}
		for _, g := range goals {
			if g.Mode == m && !strings.Contains(g.Goal, "idle") {
				br.Goals = append(br.Goals, bench.GoalResult{Experiment: e.Name, Goal: g.Goal, Ratio: g.Value, Met: g.Met})
			}
		}
		if len(br.Results) > 0 {
			reports = append(reports, br)
		}
	}
	if ar.IdleCPUPct != nil {
		e := &bench.Experiment{Name: "lab-afxdp-idle", Desc: fmt.Sprintf("a switch with %d afxdp ports on veths, no traffic", ar.IdlePorts), Metric: "cpu_pct", Unit: "%", Higher: false}
		br := bench.Report{Experiment: e, Results: []bench.Result{{Experiment: e.Name, Variant: AFXDPSoftnet, Metric: e.Metric, Value: *ar.IdleCPUPct, Unit: e.Unit,
			Extra: map[string]any{"ports": ar.IdlePorts, "seconds": ar.IdleSeconds, "leak_check": ar.IdleLeak}}}}
		for _, g := range goals {
			if strings.Contains(g.Goal, "idle") {
				br.Goals = append(br.Goals, bench.GoalResult{Experiment: e.Name, Goal: g.Goal, Ratio: g.Value, Met: g.Met})
			}
		}
		reports = append(reports, br)
	}
	return reports
}
