package lab

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"softnet.dev/internal/bench"
)

// Goals of the vhost-user measurement, from the issues that asked for it.
const (
	goalVhostVsDPDK = 0.5  // softnet's 64 B rate over DPDK's own back-end's (moonshot 0.8)
	goalVhostVsOVS  = 1.3  // over Open vSwitch with DPDK's (moonshot 2)
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
	for _, peer := range []struct {
		backend string
		goal    float64
	}{{VhostDPDK, goalVhostVsDPDK}, {VhostOVS, goalVhostVsOVS}} {
		if x := v.ratio(sn, peer.backend); x > 0 {
			out = append(out, Goal{Mode: vhostMode, Goal: fmt.Sprintf("%s >= %.2fx %s at 64 B", VhostSoftnet, peer.goal, peer.backend),
				Value: x, Figure: fmt.Sprintf("%.2fx", x), Met: x >= peer.goal})
		}
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

// ratio is r's rate over backend's at r's frame size; 0 without both, or
// for backend's own.
func (v *VhostResult) ratio(r *VhostRun, backend string) float64 {
	d := v.run(backend, r.Frame)
	if d == nil || d.PPS == 0 || r.Backend == backend {
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
	if v.OVSVersion != "" {
		fmt.Fprintf(w, "%s: %s\n", VhostOVS, v.OVSVersion)
	}
	for _, s := range v.Skipped {
		fmt.Fprintf(w, "skipped: %s\n", s)
	}
	if r.Note != "" {
		fmt.Fprintf(w, "note: %s\n", r.Note)
	}
	for _, frame := range vhostFrames {
		fmt.Fprintf(w, "\n%d-byte frames\n", frame)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  back-end\tMpps\tGbit/s\tvs %s\tvs %s\tCPU\tns/packet\tthread ns/packet\tallocs/packet\tfront-end lost\n", VhostDPDK, VhostOVS)
		for i := range v.Runs {
			run := &v.Runs[i]
			if run.Frame != frame {
				continue
			}
			fmt.Fprintf(tw, "  %s\t%.3f\t%.2f\t%s\t%s\t%.0f%%\t%.0f\t%s\t%s\t%d\n", run.Backend, run.PPS/1e6, run.Gbps,
				fmtRatio(v.ratio(run, VhostDPDK)), fmtRatio(v.ratio(run, VhostOVS)), run.BackendCPUPct, run.CPUPerPacketNS,
				fmtOpt(run.WorkerCPUPerPacketNS, "%.0f"), fmtAllocs(run.AllocsPerPacket), run.FrontendMissed+run.FrontendTxErrors)
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
	fmt.Fprintln(w, "CPU: the back-end process's CPU time over the window, all its threads (softnet: the lab's process, in which the switch")
	fmt.Fprintln(w, "runs; the others: /proc/PID/stat), in % of one CPU; ns/packet: that CPU time over the frames received; thread ns/packet:")
	fmt.Fprintln(w, "the forwarding thread's alone (softnet's worker, testpmd's forwarding lcore, Open vSwitch's PMD: /proc/PID/task/TID/stat).")
	fmt.Fprintln(w, "A forwarding thread that polls runs all the time, so its ns/packet is the time per packet at the rate the loop reached.")
	if v.hasPMD() {
		fmt.Fprintln(w, "Open vSwitch's PMD counts its own cycles (pmd-stats-show): TSC cycles of elapsed time, time preempted included.")
	}
	var leaks []string
	for i := range v.Runs {
		run := &v.Runs[i]
		if p := run.PMD; p != nil {
			fmt.Fprintf(w, "Open vSwitch's PMD at %d B over the window: %d packets, %s EMC hits, %s megaflow hits, %d upcalls; %s processing cycles per packet, busy %s of its cycles\n",
				run.Frame, p.Packets, fmtShare(p.EMCHits, p.Packets), fmtShare(p.MegaflowHits, p.Packets), p.Upcalls+p.FailedUpcalls,
				fmtPerRound(p.ProcessingCycles, p.Packets), fmtShare(p.ProcessingCycles, p.ProcessingCycles+p.IdleCycles))
		}
		if p := run.Placement; p != nil {
			fmt.Fprintf(w, "%s at %d B, where the forwarding threads ran: %s\n", run.Backend, run.Frame, fmtPlacement(p))
		}
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
	switch {
	case len(leaks) > 0:
		fmt.Fprintf(w, "leak check FAILED: %s\n", strings.Join(leaks, "; "))
	case v.hasSoftnet():
		fmt.Fprintln(w, "leak check: ok (every softnet switch of the run)")
	}
	writeGoals(w, r.Goals())
	return nil
}

// hasPMD reports whether Open vSwitch's PMD counted a window.
func (v *VhostResult) hasPMD() bool {
	for i := range v.Runs {
		if v.Runs[i].PMD != nil {
			return true
		}
	}
	return false
}

// hasSoftnet reports whether a softnet switch ran.
func (v *VhostResult) hasSoftnet() bool {
	for i := range v.Runs {
		if v.Runs[i].Backend == VhostSoftnet {
			return true
		}
	}
	return v.TUNLeak != ""
}

// vhostReports are a --vhost run as softnet bench's reports: lab-vhost-64
// in Mpps and lab-vhost-1500 in Gbit/s, one result per back-end, softnet
// first, each with its ratio to DPDK's; the goals with the 64-byte
// experiment.
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
		for _, backend := range VhostBackends {
			run := v.run(backend, frame)
			if run == nil {
				continue
			}
			value := run.PPS / 1e6
			if frame > 64 {
				value = run.Gbps
			}
			ratio := 1.0
			if backend != VhostDPDK {
				ratio = v.ratio(run, VhostDPDK)
			}
			x := map[string]any{
				"frame_bytes": frame, "pps": run.PPS, "gbit_per_s": run.Gbps, "packets": run.Packets, "seconds": run.Seconds,
				"backend_cpu_pct": run.BackendCPUPct, "cpu_ns_per_packet": run.CPUPerPacketNS,
				"worker_cpu_ns_per_packet": run.WorkerCPUPerPacketNS, "allocs_per_packet": run.AllocsPerPacket,
				"frontend_rx_missed": run.FrontendMissed, "frontend_tx_errors": run.FrontendTxErrors,
				"drops": run.Drops, "bad_chains": run.BadChains, "features": run.Features, "leak_check": nil,
				"worker": run.Worker, "ovs_pmd": run.PMD, "placement": run.Placement, "ratio_to_" + VhostOVS: nilIfZero(v.ratio(run, VhostOVS)),
				"tun64_pps": v.TUN64PPS, "ratio_to": VhostDPDK,
			}
			if backend == VhostOVS {
				x["ovs_version"] = v.OVSVersion
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

// fmtPerRound is packets per busy round (or cycles per packet), "-"
// without one.
func fmtPerRound(packets, rounds uint64) string {
	if rounds == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(packets)/float64(rounds))
}

// fmtShare is part of whole in percent, "-" without a whole.
func fmtShare(part, whole uint64) string {
	if whole == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(part)/float64(whole))
}

// nilIfZero is x, or nil (JSON null) for no figure.
func nilIfZero(x float64) *float64 {
	if x == 0 {
		return nil
	}
	return &x
}
