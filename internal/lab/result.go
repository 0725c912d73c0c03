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
	// Ratio is Gbps relative to RatioTo's in the same mode and run:
	// kernel-veth's, or without the peers the first variant's.
	Ratio   float64
	RatioTo string
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
	// CPUPerGbit is the datapath's CPU time per Gbit forwarded, in
	// seconds (so also cores per Gbit/s): the process's CPU time over the
	// measuring window, less the lab's idle rate and the built-in
	// generator's threads. WorkerCPUPerGbit counts softnet's worker
	// threads alone (not its TX goroutines nor the Go runtime).
	CPUPerGbit       *float64
	WorkerCPUPerGbit *float64
	// AllocsPerPacket is heap allocations (runtime.MemStats.Mallocs) over
	// the window per packet the datapath forwarded in it.
	AllocsPerPacket *float64
	Forwarded       *uint64 // packets the in-process datapath forwarded, whole transfer
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
}

// VariantResult is one variant of a run: its figures per mode and, for
// softnet, its pool's leak check.
type VariantResult struct {
	Variant Variant
	Results []Result // in the run's mode order
	Leak    string   // softnet: "ok" or the leak check's failure
}

// Report is a run's outcome.
type Report struct {
	Options    Options
	Traffic    string // what generated the traffic, e.g. "iperf3 3.12"
	Builtin    bool   // the traffic came from the built-in generator
	Note       string // why the traffic is not what was asked, if it is not
	Variants   []VariantResult
	Namespaces []string // every namespace the run created (all removed)
}

// result returns the figures of variant name in mode, or nil.
func (r *Report) result(name string, mode Mode) *Result {
	for i := range r.Variants {
		if r.Variants[i].Variant.Name == name {
			return r.Variants[i].result(mode)
		}
	}
	return nil
}

// setRatios relates every figure to kernel-veth's in the same mode or,
// without it, to the first variant's.
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
		if ref == nil || ref.Gbps <= 0 {
			continue
		}
		for i := range r.Variants {
			if res := r.Variants[i].result(m); res != nil {
				res.Ratio, res.RatioTo = res.Gbps/ref.Gbps, ref.Variant
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
