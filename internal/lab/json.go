package lab

import (
	"io"

	"softnet.dev/internal/bench"
)

// Experiment returns the name a mode's results have in JSON: lab-udp or
// lab-tcp.
func Experiment(m Mode) string { return "lab-" + string(m) }

// WriteJSON writes the report as softnet bench does: one object per line
// per variant and mode, {"experiment","variant","metric","value","unit",
// "ratio",…} with the lab's figures as extra fields (null where a figure
// does not apply to the variant), then one {"experiment","goal","ratio",
// "met"} line per goal. A --ports run has an experiment per figure
// (lab-ports-reach, -rss, -idle-cpu, -add, -udp, -tcp); an --overlay
// run one per kind and mode (lab-overlay-l2-udp); a --vhost run
// lab-vhost-64 and lab-vhost-1500; a --bandwidth run one per protocol
// and direction (lab-bandwidth-tcp-pod-egress); an --afxdp run one per mode
// (lab-afxdp-udp64) and lab-afxdp-idle.
func WriteJSON(w io.Writer, r *Report) error {
	if r.Ports != nil {
		return bench.WriteJSON(w, portsReports(r))
	}
	if len(r.Overlay) > 0 {
		return bench.WriteJSON(w, overlayReports(r))
	}
	if r.Vhost != nil {
		return bench.WriteJSON(w, vhostReports(r))
	}
	if r.Bandwidth != nil {
		return bench.WriteJSON(w, bandwidthReports(r))
	}
	if r.AFXDP != nil {
		return bench.WriteJSON(w, afxdpReports(r))
	}
	goals := r.Goals()
	var reports []bench.Report
	for _, m := range r.Options.Modes {
		metric, unit, higher := "gbit_per_s", "Gbit/s", true
		if m.kind() == kindLatency {
			metric, unit, higher = "latency_p50_us", "us", false
		}
		br := bench.Report{Experiment: &bench.Experiment{
			Name: Experiment(m), Desc: modeTitle(m, r), Metric: metric, Unit: unit, Higher: higher,
		}}
		for i := range r.Variants {
			res := r.Variants[i].result(m)
			if res == nil {
				continue
			}
			br.Results = append(br.Results, bench.Result{
				Experiment: br.Experiment.Name, Variant: res.Variant, Metric: br.Experiment.Metric,
				Value: res.main(), Unit: br.Experiment.Unit, Ratio: res.Ratio,
				Ops: int(res.PPS * res.Duration), Reps: reps(res),
				Extra: extraFields(r, &r.Variants[i], res),
			})
		}
		for _, g := range goals {
			if g.Mode == m {
				br.Goals = append(br.Goals, bench.GoalResult{Experiment: br.Experiment.Name, Goal: g.Goal, Ratio: g.Value, Met: g.Met})
			}
		}
		reports = append(reports, br)
	}
	return bench.WriteJSON(w, reports)
}

// extraFields are a result's figures beyond the rate, by JSON name.
func extraFields(r *Report, vr *VariantResult, res *Result) map[string]any {
	transport := "tun"
	if r.Options.TAP {
		transport = "tap"
	}
	ppsBasis := "datagrams_received"
	if res.Mode.kind() == kindTCP {
		ppsBasis = "device_rx_packets"
	}
	var cpuBasis, leak any
	if res.CPUPerGbit != nil {
		cpuBasis = "process_minus_idle"
		if r.Builtin {
			cpuBasis = "process_minus_idle_and_generator"
		}
	}
	if vr.Variant.Softnet() {
		leak = vr.Leak
	}
	var ratioTo, ratioWG any
	if res.RatioTo != "" {
		ratioTo = res.RatioTo
	}
	if res.RatioWG > 0 {
		ratioWG = res.RatioWG
	}
	var pdr any
	if p := res.PDR; p != nil {
		pdr = map[string]any{"offered_gbit_per_s": p.OfferedGbps, "first_failing_gbit_per_s": p.BoundGbps, "trials": p.Trials, "limit": p.Limit, "loss_limit_pct": PDRLossPct}
	}
	return map[string]any{
		"mode":                  string(res.Mode),
		"transport":             transport,
		"traffic":               r.Traffic,
		"pps":                   res.PPS,
		"pps_basis":             ppsBasis,
		"loss_pct":              res.LossPct,
		"retransmits":           res.Retransmits,
		"sender_dev_drops":      res.SenderDevDrops,
		"receiver_socket_drops": res.ReceiverSocketDrops,
		"sender_dev_lost_pct":   res.SenderDevPct,
		"socket_lost_pct":       res.ReceiverSocketPct,
		"cpu_s_per_gbit":        res.CPUPerGbit,
		"cpu_basis":             cpuBasis,
		"worker_cpu_s_per_gbit": res.WorkerCPUPerGbit,
		"allocs_per_packet":     res.AllocsPerPacket,
		"forwarded_packets":     res.Forwarded,
		"peak_rss_bytes":        res.PeakRSS,
		"rss_reset":             res.RSSReset,
		"pool_bytes":            res.PoolBytes,
		"drops":                 res.Drops,
		"nomem_stalls":          res.NoMemStalls,
		"hit_rate":              res.HitRate,
		"remote_frees":          res.RemoteFrees,
		"duration_s":            res.Duration,
		"ratio_to":              ratioTo,
		"ratio_wireguard_go":    ratioWG,
		"gbit_per_s":            res.Gbps,
		"forwarded_pps":         res.ForwardedPPS,
		"rx_bytes_per_packet":   res.RxBytesPerPacket,
		"cpu_us_per_packet":     res.CPUPerPacketUS,
		"latency_p50_us":        res.LatencyP50US,
		"latency_p99_us":        res.LatencyP99US,
		"latency_avg_us":        res.LatencyAvgUS,
		"pdr":                   pdr,
		"runs":                  max(res.Runs, 1),
		"spread":                res.Spread,
		"leak_check":            leak,
	}
}

// reps returns each run's main figure, or the one there is.
func reps(res *Result) []float64 {
	if len(res.Samples) > 0 {
		return res.Samples
	}
	return []float64{res.main()}
}
