package lab

import (
	"fmt"
	"slices"
	"strings"
)

// median returns the median of vs (the mean of the middle two for an even
// count), 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// spread returns half the range of vs relative to their median, as softnet
// bench reports it: 0 for fewer than two values or a zero median.
func spread(vs []float64) float64 {
	m := median(vs)
	if len(vs) < 2 || m == 0 {
		return 0
	}
	return (slices.Max(vs) - slices.Min(vs)) / 2 / m
}

// rotation returns the order in which round r of a run measures n
// variants: each round starts one variant later, so that no variant is
// always measured first or right after the same neighbour.
func rotation(n, r int) []int {
	order := make([]int, n)
	for j := range order {
		order[j] = (j + r) % n
	}
	return order
}

// medianRun returns the index of the run whose main figure is the median
// (the lower middle one for an even count).
func medianRun(rs []Result) int {
	idx := make([]int, len(rs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch x, y := rs[a].main(), rs[b].main(); {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	return idx[(len(idx)-1)/2]
}

// medianOf returns the median of a figure over the runs that have it, nil
// if none has.
func medianOf(rs []Result, get func(*Result) *float64) *float64 {
	var vs []float64
	for i := range rs {
		if v := get(&rs[i]); v != nil {
			vs = append(vs, *v)
		}
	}
	if len(vs) == 0 {
		return nil
	}
	return ptr(median(vs))
}

// aggregate folds the runs of one mode of one variant into one result:
// every figure that is a rate, a cost or a latency is the median over the
// runs; the counts (drops, forwarded packets, the search's trials) are
// those of the run whose main figure is the median. Samples holds each
// run's main figure, Spread their spread.
func aggregate(rs []Result) Result {
	if len(rs) == 0 {
		return Result{}
	}
	out := rs[medianRun(rs)]
	var mains, gbps, pps []float64
	for i := range rs {
		mains = append(mains, rs[i].main())
		gbps = append(gbps, rs[i].Gbps)
		pps = append(pps, rs[i].PPS)
	}
	out.Gbps, out.PPS = median(gbps), median(pps)
	for _, f := range []func(*Result) **float64{
		func(r *Result) **float64 { return &r.LossPct },
		func(r *Result) **float64 { return &r.SenderDevPct },
		func(r *Result) **float64 { return &r.ReceiverSocketPct },
		func(r *Result) **float64 { return &r.CPUPerGbit },
		func(r *Result) **float64 { return &r.WorkerCPUPerGbit },
		func(r *Result) **float64 { return &r.AllocsPerPacket },
		func(r *Result) **float64 { return &r.SyscallsPerPacket },
		func(r *Result) **float64 { return &r.ForwardedPPS },
		func(r *Result) **float64 { return &r.CPUPerPacketUS },
		func(r *Result) **float64 { return &r.LatencyP50US },
		func(r *Result) **float64 { return &r.LatencyP99US },
		func(r *Result) **float64 { return &r.LatencyAvgUS },
	} {
		*f(&out) = medianOf(rs, func(r *Result) *float64 { return *f(r) })
	}
	if out.PeakRSS != nil {
		for i := range rs {
			if rs[i].PeakRSS != nil {
				out.PeakRSS = ptr(max(*out.PeakRSS, *rs[i].PeakRSS)) // the peak of them all
			}
			out.RSSReset = out.RSSReset && rs[i].RSSReset
		}
	}
	if out.PDR != nil {
		p := *out.PDR
		var offered []float64
		for i := range rs {
			if rs[i].PDR != nil {
				offered = append(offered, rs[i].PDR.OfferedGbps)
			}
		}
		p.OfferedGbps = median(offered)
		out.PDR = &p
	}
	out.Runs, out.Samples, out.Spread = len(rs), mains, spread(mains)
	return out
}

// aggregateVariant folds the runs of one variant into one VariantResult
// with a result per mode that any run measured, in modes' order. The
// leak check is "ok" only if every run's was.
func aggregateVariant(runs []VariantResult, modes []Mode) VariantResult {
	out := VariantResult{Variant: runs[0].Variant}
	for _, m := range modes {
		var rs []Result
		for i := range runs {
			if res := runs[i].result(m); res != nil {
				rs = append(rs, *res)
			}
			if why, ok := runs[i].Skipped[m]; ok {
				if out.Skipped == nil {
					out.Skipped = map[Mode]string{}
				}
				out.Skipped[m] = why
			}
		}
		if len(rs) > 0 {
			out.Results = append(out.Results, aggregate(rs))
		}
	}
	var bad []string
	for i, vr := range runs {
		switch {
		case vr.Leak == "" || vr.Leak == "ok":
		case len(runs) == 1:
			bad = append(bad, vr.Leak)
		default:
			bad = append(bad, fmt.Sprintf("run %d: %s", i+1, vr.Leak))
		}
		if out.Leak == "" {
			out.Leak = vr.Leak
		}
	}
	if len(bad) > 0 {
		out.Leak = strings.Join(bad, "; ")
	}
	return out
}
