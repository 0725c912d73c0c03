package lab

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"softnet.dev/internal/bench"
)

// Goals of the many-ports measurement, from the issue that asked for it:
// a node's worth of guests on one switch.
const (
	goalPortsRSS      = 128 << 20 // the process's peak, bytes
	goalPortsIdleCPU  = 1.0       // percent of one CPU
	goalPortsAddP99MS = 50.0
	goalPortsRatio    = 0.95 // crowded over alone
)

// portsMode heads the goals of the measurement that are not a transfer's.
const portsMode Mode = "ports"

// transport names the ports' kind for a report.
func (p *PortsResult) transport() string {
	if p.TAP {
		return "tap"
	}
	return "tun"
}

// goals evaluates the measurement's goals on what it measured.
func (p *PortsResult) goals() []Goal {
	var out []Goal
	if p.Reach4+p.Reach6+len(p.Unreachable) > 0 {
		all := p.Reach4 == p.Ports && p.Reach6 == p.Ports
		out = append(out, Goal{Mode: portsMode, Goal: "every port reaches its neighbour (v4 and v6)",
			Value: float64(min(p.Reach4, p.Reach6)), Figure: fmt.Sprintf("%d and %d of %d", p.Reach4, p.Reach6, p.Ports), Met: all})
	}
	if p.PeakRSS > 0 {
		out = append(out, Goal{Mode: portsMode, Goal: fmt.Sprintf("peak RSS <= %d MiB", goalPortsRSS>>20),
			Value: mib(p.PeakRSS), Figure: fmt.Sprintf("%.0f MiB", mib(p.PeakRSS)), Met: p.PeakRSS <= goalPortsRSS})
	}
	if p.IdleSeconds > 0 {
		out = append(out, Goal{Mode: portsMode, Goal: fmt.Sprintf("idle CPU <= %g%% of one CPU", goalPortsIdleCPU),
			Value: p.IdleCPUPct, Figure: fmt.Sprintf("%.2f%%", p.IdleCPUPct), Met: p.IdleCPUPct <= goalPortsIdleCPU})
	}
	if p.Churn > 0 {
		out = append(out, Goal{Mode: portsMode, Goal: fmt.Sprintf("port add p99 <= %g ms with %d ports", goalPortsAddP99MS, p.Ports),
			Value: p.AddP99MS, Figure: fmt.Sprintf("%.2f ms", p.AddP99MS), Met: p.AddP99MS <= goalPortsAddP99MS})
	}
	if p.PingSent > 0 {
		out = append(out, Goal{Mode: portsMode, Goal: "a ping between two other guests loses nothing while a port comes and goes",
			Value: p.PingLossPct, Figure: fmt.Sprintf("%d of %d answered", p.PingReceived, p.PingSent), Met: p.PingReceived == p.PingSent})
	}
	for _, t := range p.Throughput {
		if t.Ratio > 0 {
			out = append(out, Goal{Mode: t.Mode, Goal: fmt.Sprintf("with %d idle ports >= %.2fx alone", p.Ports-2, goalPortsRatio),
				Value: t.Ratio, Figure: fmt.Sprintf("%.2fx", t.Ratio), Met: t.Ratio >= goalPortsRatio})
		}
	}
	return out
}

// writePortsTable prints a --ports run: a heading, one line per figure,
// the pair's transfers, the leak checks and the goals.
func writePortsTable(w io.Writer, r *Report) error {
	p, o := r.Ports, r.Options
	kind := "TUN ports, L3 forwarder"
	if p.TAP {
		kind = "TAP ports, bridge"
	}
	fmt.Fprintf(w, "softnet lab --ports %d: %s\n", p.Ports, bench.Machine())
	fmt.Fprintf(w, "%d guests on one switch: %s, %d worker(s), io=%s; %d ports at start, %d added live in %.2f s\n",
		p.Ports, kind, p.Workers, p.IO, p.AtStart, p.Live, p.LiveAddSeconds)
	if r.Note != "" {
		fmt.Fprintf(w, "note: %s\n", r.Note)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if p.Reach4+p.Reach6+len(p.Unreachable) > 0 {
		fmt.Fprintf(tw, "  reachable\t%d of %d reachable (v4), %d of %d (v6)\tevery guest pinged %s's (which pinged the next)\n",
			p.Reach4, p.Ports, p.Reach6, p.Ports, p.Neighbour)
	}
	if p.RSS > 0 {
		peak := "VmHWM since the switch opened"
		if !p.RSSReset {
			peak = "VmHWM of the whole process: it could not be reset"
		}
		fmt.Fprintf(tw, "  RSS\t%.0f MiB after the pings, peak %.0f MiB\tthe lab's process, in which the switch runs (VmRSS; %s)\n", mib(p.RSS), mib(p.PeakRSS), peak)
	}
	if p.PoolBytes > 0 {
		fmt.Fprintf(tw, "  pool\t%.0f MiB mapped\tsized by the workers, whatever the number of ports\n", mib(p.PoolBytes))
	}
	if p.IdleSeconds > 0 {
		fmt.Fprintf(tw, "  idle CPU\t%.2f%% of one CPU (workers %.2f%%)\tthe process's CPU time over %.0f s the lab sent nothing; the guests' own packets: %d\n",
			p.IdleCPUPct, p.IdleWorkerCPUPct, p.IdleSeconds, p.IdlePackets)
	}
	if p.Churn > 0 {
		fmt.Fprintf(tw, "  port add\tp50 %.2f ms, p99 %.2f ms, max %.2f ms\t%s added and removed %d times with %d ports present\n",
			p.AddP50MS, p.AddP99MS, p.AddMax, p.ChurnPort, p.Churn, p.Ports)
	}
	if p.PingSent > 0 {
		fmt.Fprintf(tw, "  ping meanwhile\t%d of %d answered, %.1f%% lost\t%s to %s, every %v\n",
			p.PingReceived, p.PingSent, p.PingLossPct, p.PingFrom, p.PingTo, churnPingGap)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(p.Unreachable) > 0 {
		fmt.Fprintf(w, "  unreachable: %s\n", strings.Join(p.Unreachable, ", "))
	}
	if len(p.Throughput) > 0 && len(p.Throughput[0].Alone) > 0 {
		fmt.Fprintf(w, "\n%s to %s, alone (a switch of their two ports) and crowded (with %d other ports), interleaved, %v per transfer (%s)\n",
			p.Pair[0], p.Pair[1], p.Ports-2, o.Duration, r.Traffic)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  mode\talone Gbit/s\tcrowded Gbit/s\tcrowded/alone\trounds\n")
		for _, t := range p.Throughput {
			fmt.Fprintf(tw, "  %s\t%.2f\t%.2f\t%s\t%s\n", t.Mode, median(t.Alone), median(t.Crowded), fmtRatio(t.Ratio), fmtRounds(t))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if o.Runs > 1 {
			fmt.Fprintln(w, "  (medians over the rounds; rounds: alone/crowded Gbit/s of each)")
		}
	}
	switch {
	case p.Leak == "":
	case p.Leak == "ok" && len(p.AloneLeaks) == 0:
		fmt.Fprintln(w, "leak check: ok (the crowded switch and the pair's)")
	default:
		fmt.Fprintf(w, "leak check FAILED: %s\n", strings.Join(append([]string{p.Leak}, p.AloneLeaks...), "; "))
	}
	writeGoals(w, r.Goals())
	return nil
}

// fmtRounds lists each round's alone/crowded rates.
func fmtRounds(t PortsThroughput) string {
	var parts []string
	for i := range t.Alone {
		s := fmt.Sprintf("%.2f", t.Alone[i])
		if i < len(t.Crowded) {
			s += fmt.Sprintf("/%.2f", t.Crowded[i])
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// portsReports are a --ports run as softnet bench's reports, one
// experiment per figure, each with its goals: the JSON lines WriteJSON
// writes.
func portsReports(r *Report) []bench.Report {
	p := r.Ports
	common := func() map[string]any {
		return map[string]any{
			"ports": p.Ports, "workers": p.Workers, "transport": p.transport(), "io": p.IO,
			"at_start": p.AtStart, "live": p.Live, "live_add_s": p.LiveAddSeconds,
			"pool_bytes": p.PoolBytes, "leak_check": p.Leak, "traffic": r.Traffic,
		}
	}
	goals := p.goals()
	var reports []bench.Report
	add := func(name, desc, metric, unit string, higher bool, value float64, reps []float64, goalMode Mode, goalPrefix string, extra map[string]any) {
		e := &bench.Experiment{Name: "lab-ports-" + name, Desc: desc, Metric: metric, Unit: unit, Higher: higher}
		x := common()
		for k, v := range extra {
			x[k] = v
		}
		if reps == nil {
			reps = []float64{value}
		}
		br := bench.Report{Experiment: e, Results: []bench.Result{{
			Experiment: e.Name, Variant: Softnet, Metric: metric, Value: value, Unit: unit, Ratio: 1, Reps: reps, Extra: x,
		}}}
		for _, g := range goals {
			if g.Mode == goalMode && strings.HasPrefix(g.Goal, goalPrefix) {
				br.Goals = append(br.Goals, bench.GoalResult{Experiment: e.Name, Goal: g.Goal, Ratio: g.Value, Met: g.Met})
			}
		}
		reports = append(reports, br)
	}
	if p.Reach4+p.Reach6+len(p.Unreachable) > 0 {
		add("reach", "ports whose guest reached its neighbour over IPv4 and IPv6", "reachable_ports", "ports", true,
			float64(min(p.Reach4, p.Reach6)), nil, portsMode, "every port",
			map[string]any{"reachable_v4": p.Reach4, "reachable_v6": p.Reach6, "unreachable": p.Unreachable, "neighbour": p.Neighbour})
	}
	if p.RSS > 0 {
		add("rss", "the process's peak resident set (VmHWM) with every port", "peak_rss_mib", "MiB", false,
			mib(p.PeakRSS), nil, portsMode, "peak RSS",
			map[string]any{"rss_bytes": p.RSS, "peak_rss_bytes": p.PeakRSS, "rss_reset": p.RSSReset})
	}
	if p.IdleSeconds > 0 {
		add("idle-cpu", "the process's CPU time without traffic, in percent of one CPU", "idle_cpu_pct", "%", false,
			p.IdleCPUPct, nil, portsMode, "idle CPU", map[string]any{"idle_s": p.IdleSeconds, "idle_worker_cpu_pct": p.IdleWorkerCPUPct, "idle_packets": p.IdlePackets})
	}
	if p.Churn > 0 {
		add("add", "time to add one port with every other present, p99", "add_p99_ms", "ms", false,
			p.AddP99MS, nil, portsMode, "port add",
			map[string]any{"add_p50_ms": p.AddP50MS, "add_max_ms": p.AddMax, "adds": p.Churn,
				"ping_sent": p.PingSent, "ping_received": p.PingReceived, "ping_loss_pct": p.PingLossPct})
		// The ping's goal is the add experiment's too.
		last := &reports[len(reports)-1]
		for _, g := range goals {
			if g.Mode == portsMode && strings.HasPrefix(g.Goal, "a ping") {
				last.Goals = append(last.Goals, bench.GoalResult{Experiment: last.Experiment.Name, Goal: g.Goal, Ratio: g.Value, Met: g.Met})
			}
		}
	}
	for _, t := range p.Throughput {
		if len(t.Alone) == 0 {
			continue
		}
		var reps []float64
		for i := range min(len(t.Alone), len(t.Crowded)) {
			if t.Alone[i] > 0 {
				reps = append(reps, t.Crowded[i]/t.Alone[i])
			}
		}
		add(string(t.Mode), fmt.Sprintf("%s between two guests with %d idle ports present, over the same pair alone", t.Mode, p.Ports-2),
			"crowded_over_alone", "x", true, t.Ratio, reps, t.Mode, "",
			map[string]any{"mode": string(t.Mode), "pair": p.Pair[:], "alone_gbit_per_s": t.Alone, "crowded_gbit_per_s": t.Crowded,
				"runs": len(t.Alone), "duration_s": r.Options.Duration.Seconds()})
	}
	return reports
}
