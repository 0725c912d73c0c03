package lab

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"softnet.dev/internal/bench"
)

// Goals of the vhost-user measurement, from the issue that asked for it.
const (
	goalVhostVsDPDK = 0.5  // softnet's 64 B rate over DPDK's own back-end's (moonshot 0.8)
	goalVhostVsTUN  = 10.0 // over softnet's TUN path's at 64 B
)

// vhostMode heads the measurement's goals.
const vhostMode Mode = "vhost64"

// goals evaluates the measurement's goals at 64 bytes.
func (v *VhostResult) goals() []Goal {
	var out []Goal
	sn := v.run(VhostSoftnet, 64)
	if sn == nil || sn.PPS == 0 {
		return nil
	}
	if d := v.run(VhostDPDK, 64); d != nil && d.PPS > 0 {
		x := sn.PPS / d.PPS
		out = append(out, Goal{Mode: vhostMode, Goal: fmt.Sprintf("%s >= %.2fx %s at 64 B", VhostSoftnet, goalVhostVsDPDK, VhostDPDK),
			Value: x, Figure: fmt.Sprintf("%.2fx", x), Met: x >= goalVhostVsDPDK})
	}
	if v.TUN64PPS > 0 {
		x := sn.PPS / v.TUN64PPS
		out = append(out, Goal{Mode: vhostMode, Goal: fmt.Sprintf("%s vhost-user >= %gx its TUN path at 64 B", VhostSoftnet, goalVhostVsTUN),
			Value: x, Figure: fmt.Sprintf("%.1fx", x), Met: x >= goalVhostVsTUN})
	}
	if a := sn.AllocsPerPacket; a != nil {
		out = append(out, Goal{Mode: vhostMode, Goal: fmt.Sprintf("%s allocations per packet <= %g", VhostSoftnet, goalAllocs),
			Value: *a, Figure: fmt.Sprintf("%.3g", *a), Met: *a <= goalAllocs})
	}
	return out
}

// ratio is softnet's figure over DPDK's back-end's at r's frame size, 0
// without both.
func (v *VhostResult) ratio(r *VhostRun) float64 {
	d := v.run(VhostDPDK, r.Frame)
	if d == nil || d.PPS == 0 {
		return 0
	}
	return r.PPS / d.PPS
}

// writeVhostTable prints a --vhost run: per frame size a line per
// back-end, the TUN path, what the columns mean, drops, leak checks and
// goals.
func writeVhostTable(w io.Writer, r *Report) error {
	v, o := r.Vhost, r.Options
	fmt.Fprintf(w, "softnet lab --vhost: %s\n", bench.Machine())
	fmt.Fprintf(w, "dpdk-testpmd with two virtio-user ports, mac forwarding in a loop through the back-end (%d first bursts per port), %v per configuration\n", vhostBursts, o.Duration)
	if r.Note != "" {
		fmt.Fprintf(w, "note: %s\n", r.Note)
	}
	for _, frame := range vhostFrames {
		fmt.Fprintf(w, "\n%d-byte frames\n", frame)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  back-end\tMpps\tGbit/s\tvs %s\tCPU\tns/packet\tworker ns/packet\tallocs/packet\tfront-end lost\n", VhostDPDK)
		for i := range v.Runs {
			run := &v.Runs[i]
			if run.Frame != frame {
				continue
			}
			fmt.Fprintf(tw, "  %s\t%.3f\t%.2f\t%s\t%.0f%%\t%.0f\t%s\t%s\t%d\n", run.Backend, run.PPS/1e6, run.Gbps,
				fmtRatio(v.ratio(run)), run.BackendCPUPct, run.CPUPerPacketNS, fmtOpt(run.WorkerCPUPerPacketNS, "%.0f"),
				fmtAllocs(run.AllocsPerPacket), run.FrontendMissed+run.FrontendTxErrors)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	switch {
	case v.TUN64PPS > 0:
		fmt.Fprintf(w, "softnet's TUN path, udp64 through its default variant (%s): %.3f Mpps received\n", r.Traffic, v.TUN64PPS/1e6)
	case v.TUNError != "":
		fmt.Fprintf(w, "softnet's TUN path: no figure: %s\n", v.TUNError)
	}
	fmt.Fprintln(w, "Mpps and Gbit/s: frames the front-end received, both ports (each went through the back-end once);")
	fmt.Fprintln(w, "CPU: the back-end process's, in % of one CPU (softnet: the lab's process, in which the switch runs), and per packet.")
	var leaks []string
	for i := range v.Runs {
		run := &v.Runs[i]
		if run.Drops == nil {
			continue
		}
		fmt.Fprintf(w, "softnet's vhost-user ports at %d B: drops %s, bad chains %d, features %#x\n", run.Frame, fmtDrops(run.Drops, nil), run.BadChains, run.Features)
		if a := run.Worker; a != nil {
			fmt.Fprintf(w, "softnet's worker at %d B over the window: %d rounds, %d with packets (%s packets each), %d sleeps, %d calls to the guests\n",
				run.Frame, a.Rounds, a.BusyRounds, fmtPerRound(run.Packets, a.BusyRounds), a.Sleeps, a.Calls)
		}
		if run.Leak != "ok" {
			leaks = append(leaks, fmt.Sprintf("%d B: %s", run.Frame, run.Leak))
		}
	}
	if v.TUNLeak != "" && v.TUNLeak != "ok" {
		leaks = append(leaks, "TUN: "+v.TUNLeak)
	}
	if len(leaks) == 0 {
		fmt.Fprintln(w, "leak check: ok (every softnet switch of the run)")
	} else {
		fmt.Fprintf(w, "leak check FAILED: %s\n", strings.Join(leaks, "; "))
	}
	writeGoals(w, r.Goals())
	return nil
}

// vhostReports are a --vhost run as softnet bench's reports: lab-vhost-64
// in Mpps and lab-vhost-1500 in Gbit/s, one result per back-end, softnet
// first and its ratio to DPDK's; the goals with the 64-byte experiment.
func vhostReports(r *Report) []bench.Report {
	v := r.Vhost
	var reports []bench.Report
	for _, frame := range vhostFrames {
		e := &bench.Experiment{Name: fmt.Sprintf("lab-vhost-%d", frame), Higher: true,
			Desc: fmt.Sprintf("%d-byte frames from testpmd's virtio-user ports through the back-end and back, both ports", frame)}
		e.Metric, e.Unit = "mpps", "Mpps"
		if frame > 64 {
			e.Metric, e.Unit = "gbit_per_s", "Gbit/s"
		}
		br := bench.Report{Experiment: e}
		for _, backend := range []string{VhostSoftnet, VhostDPDK} {
			run := v.run(backend, frame)
			if run == nil {
				continue
			}
			value := run.PPS / 1e6
			if frame > 64 {
				value = run.Gbps
			}
			ratio := 1.0
			if backend == VhostSoftnet {
				ratio = v.ratio(run)
			}
			x := map[string]any{
				"frame_bytes": frame, "pps": run.PPS, "gbit_per_s": run.Gbps, "packets": run.Packets, "seconds": run.Seconds,
				"backend_cpu_pct": run.BackendCPUPct, "cpu_ns_per_packet": run.CPUPerPacketNS,
				"worker_cpu_ns_per_packet": run.WorkerCPUPerPacketNS, "allocs_per_packet": run.AllocsPerPacket,
				"frontend_rx_missed": run.FrontendMissed, "frontend_tx_errors": run.FrontendTxErrors,
				"drops": run.Drops, "bad_chains": run.BadChains, "features": run.Features, "leak_check": nil,
				"worker":    run.Worker,
				"tun64_pps": v.TUN64PPS, "ratio_to": VhostDPDK,
			}
			if run.Drops != nil {
				x["leak_check"] = run.Leak
			}
			br.Results = append(br.Results, bench.Result{Experiment: e.Name, Variant: backend, Metric: e.Metric, Value: value,
				Unit: e.Unit, Ratio: ratio, Ops: int(run.Packets), Reps: []float64{value}, Extra: x})
		}
		if frame == 64 {
			for _, g := range v.goals() {
				br.Goals = append(br.Goals, bench.GoalResult{Experiment: e.Name, Goal: g.Goal, Ratio: g.Value, Met: g.Met})
			}
		}
		reports = append(reports, br)
	}
	return reports
}

// fmtPerRound is packets per busy round, "-" without one.
func fmtPerRound(packets, rounds uint64) string {
	if rounds == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(packets)/float64(rounds))
}
