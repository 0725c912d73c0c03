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
	goalFwdVsVeth      = 1.0   // datagrams reaching the receiving guest's UDP layer ≥ kernel-veth's
	goalCPUPerSmallUS  = 0.6   // switch CPU per forwarded UDP 64 B datagram, µs
	goalTCPCPUPerGbit  = 0.035 // switch CPU per TCP Gbit, s
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
	if r.Ports != nil {
		return r.Ports.goals()
	}
	if len(r.Overlay) > 0 {
		return r.overlayGoals()
	}
	if r.Vhost != nil {
		return r.Vhost.goals()
	}
	if r.Bandwidth != nil {
		return r.Bandwidth.goals()
	}
	if r.AFXDP != nil {
		return r.AFXDP.goals(r.Options.Modes)
	}
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
		lower := func(name string, v *float64, bound float64, unit string) {
			if v != nil {
				out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s %s <= %g%s", ref, name, bound, unit), Value: *v, Figure: fmt.Sprintf("%.3g%s", *v, unit), Met: *v <= bound})
			}
		}
		switch m {
		case UDP, UDP64:
			versus(KernelVeth, goalUDPVsVeth)
			versus(WireguardGo, goalUDPVsWireguard)
			if p := r.result(KernelVeth, m); p != nil && p.ForwardedPPS != nil && sn.ForwardedPPS != nil && *p.ForwardedPPS > 0 {
				v := *sn.ForwardedPPS / *p.ForwardedPPS
				out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s forwarded (reaching the guest's UDP) >= %.2fx %s", ref, goalFwdVsVeth, KernelVeth), Value: v, Figure: fmt.Sprintf("%.2fx", v), Met: v >= goalFwdVsVeth})
			}
			if m == UDP && sn.LossPct != nil {
				out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s loss < %g%%", ref, goalUDPLossPct), Value: *sn.LossPct, Figure: fmt.Sprintf("%.2f%%", *sn.LossPct), Met: *sn.LossPct < goalUDPLossPct})
			}
			if m == UDP64 {
				lower("CPU per forwarded datagram", sn.CPUPerPacketUS, goalCPUPerSmallUS, " µs")
			}
		case UDPGSO:
			versus(WireguardGo, goalUDPVsWireguard)
		case TCP, TCP4:
			versus(KernelVeth, goalTCPVsVeth)
			versus(WireguardGo, goalTCPVsWireguard)
			lower("CPU per Gbit", sn.CPUPerGbit, goalTCPCPUPerGbit, " s")
		case LatencyUDP, LatencyTCP:
			if p := r.result(KernelVeth, m); p != nil && p.LatencyP50US != nil && sn.LatencyP50US != nil {
				out = append(out, Goal{Mode: m, Goal: fmt.Sprintf("%s p50 one way <= %s's", ref, KernelVeth), Value: *sn.LatencyP50US,
					Figure: fmt.Sprintf("%.1f µs against %.1f", *sn.LatencyP50US, *p.LatencyP50US), Met: *sn.LatencyP50US <= *p.LatencyP50US})
			}
			continue // allocations and memory are the throughput modes' goals
		case PDR, PDR64:
			continue // reported, with what limits it; no goal
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
