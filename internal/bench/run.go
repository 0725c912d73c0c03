package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"
)

// Options control a run.
type Options struct {
	// Duration is the measured time per variant, split over Reps
	// repetitions that are interleaved across variants so that drift of a
	// shared machine hits every variant alike.
	Duration time.Duration
	Reps     int
	// Progress, if set, is called before each step (calibration or
	// repetition of one variant).
	Progress func(step, steps int, what string)
}

// Result is one variant's figure: the median over repetitions.
type Result struct {
	Experiment string         `json:"experiment"`
	Variant    string         `json:"variant"`
	Metric     string         `json:"metric"`
	Value      float64        `json:"value"`
	Unit       string         `json:"unit"`
	Ratio      float64        `json:"ratio"` // to the experiment's first variant
	Ops        int            `json:"ops"`   // operations per repetition
	Reps       []float64      `json:"reps"`
	Extra      map[string]any `json:"-"`
}

// Verdict is what one run says of a goal.
type Verdict string

const (
	Met          Verdict = "met"
	NotMet       Verdict = "not met"
	Inconclusive Verdict = "inconclusive" // the repetitions disagree
)

// GoalResult is a goal's outcome in this run. The figures of the two
// variants are information only: the verdict is on their ratio, which a
// faster or slower machine changes much less than either figure.
type GoalResult struct {
	Experiment string  `json:"experiment"`
	Goal       string  `json:"goal"`
	Bound      float64 `json:"bound"`
	Ratio      float64 `json:"ratio"` // of the two variants' medians
	// Ratios holds one ratio per repetition, of the two variants'
	// figures in the same round of the interleaved repetitions.
	Ratios       []float64 `json:"ratios"`
	Verdict      Verdict   `json:"verdict"`
	Met          bool      `json:"met"` // Verdict == Met
	Value        float64   `json:"variant_value"`
	AgainstValue float64   `json:"against_value"`
	Unit         string    `json:"unit"`
}

// decide gives the verdict on a goal from the ratios of its repetitions:
// met when every repetition meets the bound, not met when none does, and
// inconclusive when the bound lies within their range, or when there is
// one repetition, which shows no spread. If repetitions are independent,
// the range of n of them holds the median ratio with probability
// 1-2^(1-n) (94% for the default 5), so a verdict other than inconclusive
// is one that this run's noise is unlikely to have made.
func decide(ratios []float64, bound float64, higher bool) Verdict {
	meets := 0
	for _, r := range ratios {
		if r >= bound && higher || r <= bound && !higher {
			meets++
		}
	}
	switch {
	case len(ratios) < 2 || meets > 0 && meets < len(ratios):
		return Inconclusive
	case meets == len(ratios):
		return Met
	default:
		return NotMet
	}
}

// Span is the range of the repetitions' ratios, e.g. "0.21-0.27x".
func (g GoalResult) Span() string {
	if len(g.Ratios) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f-%.2fx", slices.Min(g.Ratios), slices.Max(g.Ratios))
}

// Report is the outcome of one experiment.
type Report struct {
	Experiment *Experiment
	Results    []Result
	Goals      []GoalResult
}

const calibrateFor = 20 * time.Millisecond

// Steps returns the number of progress steps Run will report.
func Steps(exps []*Experiment, opt Options) int {
	n := 0
	for _, e := range exps {
		n += len(e.Variants) * (opt.Reps + 1)
	}
	return n
}

// Run measures the experiments one after another. It stops early, with
// ctx's error, when ctx is cancelled; an error from a variant's cleanup
// (a leak check) fails the run after all its variants finished.
func Run(ctx context.Context, exps []*Experiment, opt Options) ([]Report, error) {
	if opt.Reps < 1 {
		opt.Reps = 1
	}
	if opt.Duration <= 0 {
		return nil, fmt.Errorf("bench: duration %v must be positive", opt.Duration)
	}
	step, steps := 0, Steps(exps, opt)
	progress := func(what string) {
		if opt.Progress != nil {
			opt.Progress(step, steps, what)
		}
		step++
	}
	var reports []Report
	for _, e := range exps {
		r, err := runExperiment(ctx, e, opt, progress)
		if err != nil {
			return reports, err
		}
		reports = append(reports, r)
	}
	return reports, nil
}

type variantRun struct {
	run  func(ctx context.Context, n int) int
	done func() error
	n    int
	reps []float64
}

func runExperiment(ctx context.Context, e *Experiment, opt Options, progress func(string)) (rep Report, err error) {
	runs := make([]*variantRun, len(e.Variants))
	defer func() {
		for i, vr := range runs {
			if vr != nil && vr.done != nil {
				if derr := vr.done(); derr != nil {
					err = errors.Join(err, fmt.Errorf("%s/%s: %w", e.Name, e.Variants[i].Name, derr))
				}
			}
		}
	}()
	perRep := opt.Duration / time.Duration(opt.Reps)
	for i, v := range e.Variants {
		progress(e.Name + "/" + v.Name + " calibrate")
		run, done, err := v.Prepare()
		if err != nil {
			return rep, fmt.Errorf("%s/%s: %w", e.Name, v.Name, err)
		}
		vr := &variantRun{run: run, done: done}
		runs[i] = vr
		if vr.n, err = calibrate(ctx, run, perRep); err != nil {
			return rep, err
		}
	}
	for range opt.Reps {
		for i, v := range e.Variants {
			progress(e.Name + "/" + v.Name)
			vr := runs[i]
			// Start every repetition with a clean heap, so that no variant
			// pays for another's garbage (a GC cycle takes a core from a
			// two-goroutine variant on a two-core machine).
			runtime.GC()
			start := time.Now()
			ops := vr.run(ctx, vr.n)
			elapsed := time.Since(start)
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			vr.reps = append(vr.reps, e.value(ops, elapsed))
		}
	}
	rep.Experiment = e
	for i, v := range e.Variants {
		vr := runs[i]
		rep.Results = append(rep.Results, Result{
			Experiment: e.Name, Variant: v.Name, Metric: e.Metric, Unit: e.Unit,
			Value: median(vr.reps), Ops: vr.n, Reps: vr.reps, Extra: v.Extra,
		})
	}
	for i := range rep.Results {
		rep.Results[i].Ratio = rep.Results[i].Value / rep.Results[0].Value
	}
	for _, g := range e.Goals {
		gr, err := rep.evaluate(g)
		if err != nil {
			return rep, err
		}
		rep.Goals = append(rep.Goals, gr)
	}
	return rep, nil
}

// evaluate judges a goal from the report's results.
func (r *Report) evaluate(g Goal) (GoalResult, error) {
	e := r.Experiment
	a, b := r.find(g.Variant), r.find(g.Against)
	if a == nil || b == nil {
		return GoalResult{}, fmt.Errorf("%s: goal %s names a missing variant", e.Name, g.String(e))
	}
	ratios := make([]float64, len(a.Reps))
	for k := range a.Reps {
		ratios[k] = a.Reps[k] / b.Reps[k]
	}
	v := decide(ratios, g.Bound, e.Higher)
	return GoalResult{
		Experiment: e.Name, Goal: g.String(e), Bound: g.Bound, Ratio: a.Value / b.Value, Ratios: ratios, Verdict: v, Met: v == Met,
		Value: a.Value, AgainstValue: b.Value, Unit: e.Unit,
	}, nil
}

func (r *Report) find(label string) *Result {
	for i := range r.Experiment.Variants {
		if r.Experiment.Variants[i].Label() == label {
			return &r.Results[i]
		}
	}
	return nil
}

// calibrate finds an operation count that takes about target.
func calibrate(ctx context.Context, run func(context.Context, int) int, target time.Duration) (int, error) {
	n := 64
	for {
		start := time.Now()
		run(ctx, n)
		elapsed := time.Since(start)
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if elapsed >= calibrateFor || n >= 1<<30 {
			scaled := float64(n) * float64(target) / float64(max(elapsed, 1))
			return max(1, int(min(scaled, 1<<34))), nil
		}
		n *= 4
	}
}

// value turns a count of operations in a time into the metric: a rate in
// millions per second when higher is better, else nanoseconds per
// operation.
func (e *Experiment) value(ops int, d time.Duration) float64 {
	if e.Higher {
		return float64(ops) / d.Seconds() / 1e6
	}
	return float64(d.Nanoseconds()) / float64(max(ops, 1))
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
