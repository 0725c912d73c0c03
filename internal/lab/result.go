package lab

import (
	"softnet.dev/drop"
)

// Result is one variant's figures for one mode. Fields that do not apply
// to the variant (allocations of the kernel's path, loss of a TCP stream)
// are nil and print as "-" or JSON null.
type Result struct {
	Mode    Mode
	Variant string
	// Gbps is the payload rate the receiving guest got, in Gbit/s.
	Gbps float64
	// Ratio is the mode's main figure (Gbps; for latency the median)
	// relative to RatioTo's in the same mode and run: kernel-veth's, or
	// without the peers the first variant's. RatioWG is the same against
	// wireguard-go, 0 without it.
	Ratio   float64
	RatioTo string
	RatioWG float64
	// PPS is packets per second received: UDP datagrams for UDP, packets
	// the receiving guest's device counted for TCP (a GSO packet counts
	// once).
	PPS         float64
	LossPct     *float64 // UDP: datagrams lost, in percent of those sent
	Retransmits *int64   // TCP: the sender's retransmitted segments
	// Where packets were lost, as the guests' kernels counted: packets
	// the sending guest's device dropped because the datapath did not
	// take them in time (its queue was full), and datagrams the receiving
	// guest dropped because the socket's buffer was full (the receiver
	// did not keep up).
	SenderDevDrops      *uint64
	ReceiverSocketDrops *uint64
	// The same two in percent of the datagrams sent (UDP), computed per
	// run, so that over several runs their medians stay beside the
	// median loss rather than mixing one run's counts with another's.
	SenderDevPct, ReceiverSocketPct *float64
	// CPUPerGbit is the datapath's CPU time per Gbit forwarded, in
	// seconds (so also cores per Gbit/s): the process's CPU time over the
	// measuring window, less the lab's idle rate and the built-in
	// generator's threads. WorkerCPUPerGbit counts softnet's worker
	// threads alone (not its TX goroutines nor the Go runtime).
	CPUPerGbit       *float64
	WorkerCPUPerGbit *float64
	// UDP modes: ForwardedPPS is the datagrams per second that reached
	// the receiving guest's UDP layer over the window (delivered to the
	// socket or dropped there for want of room), whichever the datapath;
	// CPUPerPacketUS is the in-process datapath's CPU time (as for
	// CPUPerGbit) per such datagram, in µs.
	ForwardedPPS   *float64
	CPUPerPacketUS *float64
	// Latency modes: one-way latency (half the round trip) in µs.
	LatencyP50US, LatencyP99US, LatencyAvgUS *float64
	// PDR modes: the search's outcome. Gbps, PPS and LossPct are then the
	// figures of the highest passing trial.
	PDR *PDRResult
	// AllocsPerPacket is heap allocations (runtime.MemStats.Mallocs) over
	// the window per packet the datapath forwarded in it.
	AllocsPerPacket *float64
	// SyscallsPerPacket is, over the overlay, the vxlan ports' system
	// calls per datagram they received or sent in the window.
	SyscallsPerPacket *float64
	Forwarded         *uint64 // packets the in-process datapath forwarded, whole transfer
	// RxBytesPerPacket is the mean size of the packets softnet received,
	// whole transfer: about 64 KiB when the guest's device hands it GSO
	// packets.
	RxBytesPerPacket *float64
	// PeakRSS is the process's VmHWM after the transfer of an in-process
	// datapath; with RSSReset it was reset before, so the peak is this
	// transfer's.
	PeakRSS   *int64
	RSSReset  bool
	PoolBytes *int64 // softnet's packet-buffer pool
	// Softnet only, over the whole transfer: packets dropped, by reason
	// (every buffer freed as a drop); receive bursts cut short for want
	// of a buffer (the packets stay in the kernel's queue, so these are
	// stalls, not losses); the buffer caches' hit rate; remote frees.
	Drops       *drop.Counts
	NoMemStalls *uint64
	HitRate     *float64
	RemoteFrees *uint64
	// Duration is the transfer's length as the receiver measured it.
	Duration float64
	// Runs is how many runs the figures are the median of; Samples the
	// main figure of each, in the order measured; Spread half their range
	// relative to the median (0 for one run).
	Runs    int
	Samples []float64
	Spread  float64
}

// PDRResult is a zero-loss throughput search's outcome.
type PDRResult struct {
	OfferedGbps float64 // the highest offered rate with loss ≤ PDRLossPct (the sender's own top rate if that passed)
	BoundGbps   float64 // the lowest offered rate that failed, 0 if none did
	Trials      int
	// Limit says what limits the rate: where the datagrams of the
	// lowest failing trial were lost, or the sender if none failed.
	Limit string
}

// main returns the mode's main figure: the median latency for the
// latency modes (lower is better), else Gbps.
func (r *Result) main() float64 {
	if r.Mode.kind() == kindLatency {
		if r.LatencyP50US == nil {
			return 0
		}
		return *r.LatencyP50US
	}
	return r.Gbps
}

// VariantResult is one variant of a run: its figures per mode and, for
// softnet, its pool's leak check.
type VariantResult struct {
	Variant Variant
	Results []Result // in the run's mode order
	Leak    string   // softnet: "ok" or the leak check's failure
	// Skipped says why a mode was not measured on this variant.
	Skipped map[Mode]string
}

// Report is a run's outcome.
type Report struct {
	Options    Options
	Traffic    string // what generated the traffic, e.g. "iperf3 3.12"
	Builtin    bool   // the traffic came from the built-in generator
	Note       string // why the traffic is not what was asked, if it is not
	Latency    string // what measured latency, e.g. "sockperf 3.7", "" if nothing did
	CPUs       [2]int // the CPUs the latency client and server were pinned to
	Variants   []VariantResult
	Ports      *PortsResult     // the many-ports measurement (Options.Ports), instead of variants
	Overlay    []*OverlayResult // the overlay measurement (Options.Overlay), instead of variants
	Vhost      *VhostResult     // the vhost-user measurement (Options.Vhost), instead of variants
	Bandwidth  *BandwidthResult // the bandwidth measurement (Options.Bandwidth), instead of variants
	AFXDP      *AFXDPResult     // the AF_XDP measurement (Options.AFXDP), instead of variants
	Namespaces []string         // every namespace the run created (all removed)
}

// result returns the figures of variant name in mode, or nil.
func (r *Report) result(name string, mode Mode) *Result {
	return resultOf(r.Variants, name, mode)
}

// resultOf returns the figures of the variant of vs named name in mode,
// or nil.
func resultOf(vs []VariantResult, name string, mode Mode) *Result {
	for i := range vs {
		if vs[i].Variant.Name == name {
			return vs[i].result(mode)
		}
	}
	return nil
}

// relateTo relates every figure of vs to that of the variant named ref
// in the same mode (the --overlay and --afxdp runs' ratios).
func relateTo(vs []VariantResult, ref string, modes []Mode) {
	for _, m := range modes {
		r := resultOf(vs, ref, m)
		if r == nil || r.main() <= 0 {
			continue
		}
		for i := range vs {
			if res := vs[i].result(m); res != nil {
				res.Ratio, res.RatioTo = res.main()/r.main(), ref
			}
		}
	}
}

// setRatios relates every figure to kernel-veth's in the same mode or,
// without it, to the first variant's, and to wireguard-go's.
func (r *Report) setRatios() {
	for _, m := range r.Options.Modes {
		var ref *Result
		if ref = r.result(KernelVeth, m); ref == nil {
			for i := range r.Variants {
				if ref = r.Variants[i].result(m); ref != nil {
					break
				}
			}
		}
		wg := r.result(WireguardGo, m)
		for i := range r.Variants {
			res := r.Variants[i].result(m)
			if res == nil {
				continue
			}
			if ref != nil && ref.main() > 0 {
				res.Ratio, res.RatioTo = res.main()/ref.main(), ref.Variant
			}
			if wg != nil && wg.main() > 0 {
				res.RatioWG = res.main() / wg.main()
			}
		}
	}
}

// hasMode reports whether any variant has a result for m.
func (r *Report) hasMode(m Mode) bool {
	for i := range r.Variants {
		if r.Variants[i].result(m) != nil {
			return true
		}
	}
	return false
}

func (v *VariantResult) result(m Mode) *Result {
	for i := range v.Results {
		if v.Results[i].Mode == m {
			return &v.Results[i]
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
