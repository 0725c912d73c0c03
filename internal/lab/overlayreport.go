package lab

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"softnet.dev/internal/bench"
)

// Goals of the overlay measurement, softnet-softnet against the
// kernel-kernel reference of the same run.
const (
	goalOverlayTCP      = 0.8 // TCP Gbit/s ≥ 0.8× kernel-kernel
	goalOverlayUDPPPS   = 1.0 // UDP datagrams/s received ≥ kernel-kernel's
	goalOverlaySyscalls = 0.1 // overlay system calls per datagram
)

// OverlayResult is one kind of overlay measured by a --overlay run.
type OverlayResult struct {
	Kind         OverlayKind
	UnderlayIPv6 bool
	UnderlayMTU  int
	InnerMTU     int // the guests' MTU
	// Configs are softnet-softnet, softnet-kernel and kernel-kernel, as
	// far as they were measured; each Result's Ratio is to
	// kernel-kernel's in the same mode.
	Configs []VariantResult
}

// underlay names the underlay's family.
func (r *OverlayResult) underlay() string {
	if r.UnderlayIPv6 {
		return "IPv6"
	}
	return "IPv4"
}

func (r *OverlayResult) result(name string, m Mode) *Result {
	return resultOf(r.Configs, name, m)
}

// setRatios relates every figure to kernel-kernel's in the same mode.
func (r *OverlayResult) setRatios(modes []Mode) { relateTo(r.Configs, OverlayKernel, modes) }

// goals evaluates softnet-softnet against kernel-kernel.
func (r *OverlayResult) goals(modes []Mode) []Goal {
	var out []Goal
	for _, m := range modes {
		sn, ref := r.result(OverlaySoftnet, m), r.result(OverlayKernel, m)
		if sn == nil {
			continue
		}
		name := fmt.Sprintf("%s %s", r.Kind, OverlaySoftnet)
		if ref != nil {
			switch m.kind() {
			case kindTCP:
				if ref.Gbps > 0 {
					v := sn.Gbps / ref.Gbps
					out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s >= %.2fx %s", name, goalOverlayTCP, OverlayKernel), Value: v, Figure: fmt.Sprintf("%.2fx", v), Met: v >= goalOverlayTCP})
				}
			case kindUDP:
				if ref.PPS > 0 {
					v := sn.PPS / ref.PPS
					out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s datagrams/s >= %.2fx %s", name, goalOverlayUDPPPS, OverlayKernel), Value: v, Figure: fmt.Sprintf("%.2fx", v), Met: v >= goalOverlayUDPPPS})
				}
			}
		}
		if v := sn.SyscallsPerPacket; v != nil {
			out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s overlay system calls/datagram <= %g", name, goalOverlaySyscalls), Value: *v, Figure: fmt.Sprintf("%.3f", *v), Met: *v <= goalOverlaySyscalls})
		}
		if v := sn.AllocsPerPacket; v != nil {
			out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s allocs/datagram < %g", name, goalAllocs), Value: *v, Figure: fmt.Sprintf("%.2g", *v), Met: *v < goalAllocs})
		}
	}
	return out
}

// overlayGoals are every kind's goals.
func (r *Report) overlayGoals() []Goal {
	var out []Goal
	for _, or := range r.Overlay {
		out = append(out, or.goals(r.Options.Modes)...)
	}
	return out
}

// overlayModeTitle describes a mode's traffic across the overlay.
func overlayModeTitle(m Mode, r *Report) string {
	switch m.kind() {
	case kindUDP:
		return fmt.Sprintf("%s: %d-byte datagrams at no rate limit (%s)", m, overlayPayload(m, r.Options), r.Traffic)
	case kindTCP:
		return modeTitle(m, r)
	}
	return string(m)
}

// writeOverlayTable prints a --overlay run: per kind a heading and a
// table per mode, then what the configurations and columns are, the
// leak checks and the goals.
func writeOverlayTable(w io.Writer, r *Report) error {
	o := r.Options
	family := "IPv4"
	if o.IPv6 {
		family = "IPv6"
	}
	fmt.Fprintf(w, "softnet lab --overlay: %s\n", bench.Machine())
	fmt.Fprintf(w, "%v per transfer, guest to guest across two hosts (namespaces) over VXLAN (VNI %d, port %d), guests' traffic over %s\n",
		o.Duration, overlayVNI, overlayPort, family)
	if o.Runs > 1 {
		fmt.Fprintf(w, "%d runs, interleaved (configuration order rotated each round): medians, and the spread (half the range / median)\n", o.Runs)
	}
	if r.Note != "" {
		fmt.Fprintf(w, "note: %s\n", r.Note)
	}
	for _, or := range r.Overlay {
		what := "bridged: TAP guests on softnet's bridge; the kernel's vxlan bridged with a veth to the guest"
		if or.Kind == OverlayL3 {
			what = "routed: TUN guests on softnet's L3 forwarder; the kernel's vxlan routed as Flannel configures it"
		}
		fmt.Fprintf(w, "\n%s overlay, %s\n%s underlay (veth, MTU %d), guests' MTU %d\n", or.Kind, what, or.underlay(), or.UnderlayMTU, or.InnerMTU)
		for _, m := range o.Modes {
			if err := writeOverlayMode(w, r, or, m); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(w, `
configurations (host A, where the sending guest is, then host B)
  %-16s a softnet switch process on each host
  %-16s softnet on host A, the kernel's vxlan device on host B
  %-16s the kernel's vxlan device on each host: the reference (x kernel)
Gbit/s: payload received by the guest. kpps: udp datagrams received; tcp packets the
  receiving device counted. fwd kpps: datagrams per second that reached the receiving
  guest's UDP layer over the middle of the transfer.
switch CPU: the switch processes' CPU time (both hosts' when both run softnet) over the
  middle of the transfer, per Gbit received and per datagram that reached the guest.
calls/dgram: the vxlan ports' system calls (recvmmsg, sendmmsg) per datagram they
  received or sent, both hosts, over the same window. allocs/dgram: the switch processes'
  heap allocations (heap_allocs from their control API's /v1/stats, exact; the lab's
  one request inside the window subtracted) per such datagram.
`, OverlaySoftnet, OverlayMixed, OverlayKernel)
	var bad []string
	n := 0
	for _, or := range r.Overlay {
		for _, c := range or.Configs {
			if c.Leak == "" {
				continue
			}
			n++
			if c.Leak != "ok" {
				bad = append(bad, fmt.Sprintf("  %s %s: %s", or.Kind, c.Variant.Name, c.Leak))
			}
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

func writeOverlayMode(w io.Writer, r *Report, or *OverlayResult, m Mode) error {
	has := false
	for i := range or.Configs {
		has = has || or.Configs[i].result(m) != nil
	}
	if !has {
		return nil // an interrupted run may not have got to it
	}
	fmt.Fprintf(w, "\n%s\n", overlayModeTitle(m, r))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	udp := m.kind() == kindUDP
	if udp {
		fmt.Fprintf(tw, "  configuration\tGbit/s\tkpps\tx kernel\tspread\tloss\tlost in dev/sock\tfwd kpps\tswitch CPU s/Gbit\tus/dgram\tcalls/dgram\tallocs/dgram\n")
	} else {
		fmt.Fprintf(tw, "  configuration\tGbit/s\tx kernel\tspread\tkpps\tretrans\tswitch CPU s/Gbit\tcalls/dgram\tallocs/dgram\n")
	}
	for i := range or.Configs {
		res := or.Configs[i].result(m)
		if res == nil {
			continue
		}
		costs := fmt.Sprintf("%s\t%s", fmtOpt(res.SyscallsPerPacket, "%.3f"), fmtAllocs(res.AllocsPerPacket))
		if udp {
			loss := "-"
			if res.LossPct != nil {
				loss = fmt.Sprintf("%.1f%%", *res.LossPct)
			}
			fmt.Fprintf(tw, "  %s\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", res.Variant, res.Gbps, res.PPS/1e3, fmtRatio(res.Ratio), fmtSpread(res),
				loss, fmtLostWhere(res), fmtOpt(scale(res.ForwardedPPS, 1e-3), "%.0f"), fmtOpt(res.CPUPerGbit, "%.3f"), fmtOpt(res.CPUPerPacketUS, "%.2f"), costs)
			continue
		}
		retrans := "-"
		if res.Retransmits != nil {
			retrans = fmt.Sprint(*res.Retransmits)
		}
		fmt.Fprintf(tw, "  %s\t%.2f\t%s\t%s\t%.0f\t%s\t%s\t%s\n", res.Variant, res.Gbps, fmtRatio(res.Ratio), fmtSpread(res), res.PPS/1e3, retrans, fmtOpt(res.CPUPerGbit, "%.3f"), costs)
	}
	return tw.Flush()
}

// overlayReports are a --overlay run as softnet bench's reports: an
// experiment per kind and mode (lab-overlay-l2-udp), the configurations
// its variants, each with its goals.
func overlayReports(r *Report) []bench.Report {
	goals := r.Goals()
	var reports []bench.Report
	for _, or := range r.Overlay {
		for _, m := range r.Options.Modes {
			e := &bench.Experiment{Name: fmt.Sprintf("lab-overlay-%s-%s", or.Kind, m), Desc: fmt.Sprintf("%s overlay, %s", or.Kind, overlayModeTitle(m, r)),
				Metric: "gbit_per_s", Unit: "Gbit/s", Higher: true}
			br := bench.Report{Experiment: e}
			for i := range or.Configs {
				res := or.Configs[i].result(m)
				if res == nil {
					continue
				}
				var leak, ratioTo, payload any
				if or.Configs[i].Leak != "" {
					leak = or.Configs[i].Leak
				}
				if res.RatioTo != "" {
					ratioTo = res.RatioTo
				}
				if m.kind() == kindUDP {
					payload = overlayPayload(m, r.Options)
				}
				br.Results = append(br.Results, bench.Result{
					Experiment: e.Name, Variant: res.Variant, Metric: e.Metric, Value: res.main(), Unit: e.Unit, Ratio: res.Ratio,
					Ops: int(res.PPS * res.Duration), Reps: reps(res),
					Extra: map[string]any{
						"mode": string(m), "overlay": string(or.Kind), "underlay": or.underlay(), "underlay_mtu": or.UnderlayMTU,
						"guest_mtu": or.InnerMTU, "payload_bytes": payload, "traffic": r.Traffic,
						"pps": res.PPS, "loss_pct": res.LossPct, "retransmits": res.Retransmits,
						"sender_dev_drops": res.SenderDevDrops, "receiver_socket_drops": res.ReceiverSocketDrops,
						"forwarded_pps": res.ForwardedPPS, "switch_cpu_s_per_gbit": res.CPUPerGbit, "switch_cpu_us_per_datagram": res.CPUPerPacketUS,
						"syscalls_per_datagram": res.SyscallsPerPacket, "allocs_per_datagram": res.AllocsPerPacket, "overlay_datagrams": res.Forwarded,
						"ratio_to": ratioTo, "duration_s": res.Duration, "runs": max(res.Runs, 1), "spread": res.Spread, "leak_check": leak,
					},
				})
			}
			prefix := string(or.Kind) + " "
			for _, g := range goals {
				if g.Mode == m && strings.HasPrefix(g.Goal, prefix) {
					br.Goals = append(br.Goals, bench.GoalResult{Experiment: e.Name, Goal: g.Goal, Ratio: g.Value, Met: g.Met})
				}
			}
			if len(br.Results) > 0 {
				reports = append(reports, br)
			}
		}
	}
	return reports
}
