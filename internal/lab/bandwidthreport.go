package lab

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"softnet.dev/internal/bench"
)

// writeBandwidthTable prints a --bandwidth run: each limit, protocol and
// direction through both datapaths, as received over the set rate.
func writeBandwidthTable(w io.Writer, r *Report) error {
	b, o := r.Bandwidth, r.Options
	fmt.Fprintf(w, "softnet lab --bandwidth: %s\n", bench.Machine())
	fmt.Fprintf(w, "%v per transfer, %s; %s is a veth pair shaped by %s; %s is two TUN ports, the pod's limited both ways; UDP offered at %.1fx the rate\n",
		o.Duration, r.Traffic, BandwidthTC, b.Plugin, BandwidthSoftnet, udpOverRate)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  rate\tburst\tproto\tdirection\t%s Mbit/s\t/rate\t%s Mbit/s\t/rate\tvs tc\tloss or retr (tc, softnet)\tpolicer drops\n", BandwidthTC, BandwidthSoftnet)
	for _, row := range b.Rows {
		loss := fmt.Sprintf("%.2f%%, %.2f%%", row.TCLoss, row.SoftnetLoss)
		if row.Proto == "tcp" {
			loss = fmt.Sprintf("%d, %d", row.TCRetransmits, row.SoftnetRetransmits)
		}
		vs := "-"
		if row.TC > 0 {
			vs = fmt.Sprintf("%.2fx", row.Softnet/row.TC)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%.2f\t%.3f\t%.2f\t%.3f\t%s\t%s\t%d\n", bitsString(row.Rate), bitsString(row.Burst), row.Proto, row.Dir,
			row.TC/1e6, row.Ratio(row.TC), row.Softnet/1e6, row.Ratio(row.Softnet), vs, loss, row.Police)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%s: the pod sends (CNI egressRate: tc on an IFB device; softnet's ingress-rate); %s: it receives (ingressRate: tc on the\n", PodEgress, PodIngress)
	fmt.Fprintln(w, "veth's host end; softnet's egress-rate). Mbit/s: iperf3's receiver, payload only (1472 of each 1500-byte UDP packet).")
	fmt.Fprintln(w, "tc queues what exceeds the rate (TBF, 25 ms of it); softnet drops it (a policer), so TCP sees losses where tc delays.")
	for _, row := range b.Rows {
		if row.TC > 0 && row.Ratio(row.TC) < 1-2*goalBandwidthUDP {
			fmt.Fprintf(w, "note: %s %s at %s/s: %s reached %.2fx the rate: the traffic, not the limit, held the rate there\n",
				row.Proto, row.Dir, bitsString(row.Rate), BandwidthTC, row.Ratio(row.TC))
		}
	}
	writeGoals(w, r.Goals())
	return nil
}

// bandwidthReports are the run's JSON lines: an experiment per protocol
// and direction, a variant per datapath and rate.
func bandwidthReports(r *Report) []bench.Report {
	b := r.Bandwidth
	goals := r.Goals()
	var reports []bench.Report
	for _, proto := range []string{"tcp", "udp"} {
		for _, dir := range []string{PodEgress, PodIngress} {
			e := &bench.Experiment{Name: fmt.Sprintf("lab-bandwidth-%s-%s", proto, dir), Metric: "ratio_to_rate", Unit: "x", Higher: true,
				Desc: fmt.Sprintf("%s %s through a rate limit: received over the set rate", proto, dir)}
			br := bench.Report{Experiment: e}
			for _, row := range b.Rows {
				if row.Proto != proto || row.Dir != dir {
					continue
				}
				for _, v := range []struct {
					name string
					bps  float64
				}{{BandwidthTC, row.TC}, {BandwidthSoftnet, row.Softnet}} {
					ratio := 1.0
					if row.TC > 0 {
						ratio = v.bps / row.TC
					}
					x := map[string]any{"rate_bit_per_s": row.Rate, "burst_bits": row.Burst, "bit_per_s": v.bps, "plugin": b.Plugin,
						"ratio_to": BandwidthTC}
					if v.name == BandwidthSoftnet {
						x["police_drops"] = row.Police
					}
					br.Results = append(br.Results, bench.Result{Experiment: e.Name, Variant: fmt.Sprintf("%s-%s", v.name, bitsString(row.Rate)),
						Metric: e.Metric, Value: row.Ratio(v.bps), Unit: e.Unit, Ratio: ratio, Reps: []float64{row.Ratio(v.bps)}, Extra: x})
				}
			}
			for _, g := range goals {
				if (g.Mode == TCP) == (proto == "tcp") && strings.Contains(g.Goal, dir) {
					br.Goals = append(br.Goals, bench.GoalResult{Experiment: e.Name, Goal: g.Goal, Ratio: g.Value, Met: g.Met})
				}
			}
			reports = append(reports, br)
		}
	}
	return reports
}
