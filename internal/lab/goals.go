package lab

import "fmt"

// Goals for softnet in its default configuration (the reference
// variant), against the peers of the same run.
const (
	goalUDPVsVeth      = 0.6   // UDP received ≥ 0.6× kernel-veth
	goalUDPLossPct     = 5.0   // with loss below 5 %
	goalTCPVsVeth      = 0.8   // TCP ≥ 0.8× kernel-veth
	goalUDPVsWireguard = 3.0   // UDP ≥ 3× a forwarder on wireguard-go's tun package
	goalTCPVsWireguard = 1.5   // TCP ≥ 1.5× it
	goalAllocs         = 0.001 // allocations per packet: none in steady state, bookkeeping aside
	goalRSSOverPool    = 32 << 20
)

// Goal is one goal's verdict in a run.
type Goal struct {
	Mode   Mode
	Goal   string  // e.g. "offload-on >= 0.60x kernel-veth"
	Value  float64 // the ratio, or the figure for an absolute goal
	Figure string  // Value as printed, e.g. "0.93x" or "0.4%"
	Met    bool
}

// Goals evaluates the goals that this run's variants make measurable.
func (r *Report) Goals() []Goal {
	ref := reference(r.Options)
	var out []Goal
	for _, m := range r.Options.Modes {
		sn := r.result(ref, m)
		if sn == nil {
			continue
		}
		versus := func(peer string, bound float64) {
			if p := r.result(peer, m); p != nil && p.Gbps > 0 {
				v := sn.Gbps / p.Gbps
				out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s >= %.2fx %s", ref, bound, peer), Value: v, Figure: fmt.Sprintf("%.2fx", v), Met: v >= bound})
			}
		}
		if m == UDP {
			versus(KernelVeth, goalUDPVsVeth)
			versus(WireguardGo, goalUDPVsWireguard)
			if sn.LossPct != nil {
				out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s loss < %g%%", ref, goalUDPLossPct), Value: *sn.LossPct, Figure: fmt.Sprintf("%.2f%%", *sn.LossPct), Met: *sn.LossPct < goalUDPLossPct})
			}
		} else {
			versus(KernelVeth, goalTCPVsVeth)
			versus(WireguardGo, goalTCPVsWireguard)
		}
		if a := sn.AllocsPerPacket; a != nil {
			out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s allocs/packet < %g", ref, goalAllocs), Value: *a, Figure: fmt.Sprintf("%.2g", *a), Met: *a < goalAllocs})
		}
		if sn.PeakRSS != nil && sn.PoolBytes != nil {
			// The value is how far the peak is above the pool, in MiB.
			over := float64(*sn.PeakRSS-*sn.PoolBytes) / (1 << 20)
			out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s peak RSS <= pool + %d MiB", ref, goalRSSOverPool>>20), Value: over,
				Figure: fmt.Sprintf("%.0f MiB, pool %.0f MiB", float64(*sn.PeakRSS)/(1<<20), float64(*sn.PoolBytes)/(1<<20)),
				Met:    *sn.PeakRSS <= *sn.PoolBytes+goalRSSOverPool})
		}
	}
	return out
}

// Missed returns the goals not met, as lines for an error message.
func Missed(goals []Goal) []string {
	var out []string
	for _, g := range goals {
		if !g.Met {
			out = append(out, fmt.Sprintf("%s: %s (got %s)", g.Mode, g.Goal, g.Figure))
		}
	}
	return out
}
