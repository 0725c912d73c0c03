package bench

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestExperimentsRun runs every experiment briefly: every variant must
// produce a positive figure, every goal must be evaluated and every leak
// check must balance (Run fails otherwise).
func TestExperimentsRun(t *testing.T) {
	reports, err := Run(context.Background(), Experiments(), Options{Duration: 20 * time.Millisecond, Reps: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != len(Experiments()) {
		t.Fatalf("%d reports for %d experiments", len(reports), len(Experiments()))
	}
	for _, r := range reports {
		if len(r.Results) != len(r.Experiment.Variants) || len(r.Goals) != len(r.Experiment.Goals) {
			t.Fatalf("%s: %d results, %d goals", r.Experiment.Name, len(r.Results), len(r.Goals))
		}
		for _, res := range r.Results {
			if !(res.Value > 0) || res.Ops <= 0 || len(res.Reps) != 2 {
				t.Errorf("%s/%s: value %v ops %d reps %v", res.Experiment, res.Variant, res.Value, res.Ops, res.Reps)
			}
		}
		if r.Results[0].Ratio != 1 {
			t.Errorf("%s: first ratio %v", r.Experiment.Name, r.Results[0].Ratio)
		}
		for _, g := range r.Goals {
			// The ratio of the medians lies within the repetitions'
			// ratios, on which the verdict is.
			if len(g.Ratios) != 2 || g.Ratio < slices.Min(g.Ratios) || g.Ratio > slices.Max(g.Ratios) || g.Verdict != decide(g.Ratios, g.Bound, r.Experiment.Higher) {
				t.Errorf("%s: goal %+v", r.Experiment.Name, g)
			}
		}
	}
}

func TestRunStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Experiments(), Options{Duration: time.Hour, Reps: 1}); err != context.Canceled {
		t.Fatalf("Run with a cancelled context = %v", err)
	}
}

func TestLookup(t *testing.T) {
	exps, err := Lookup([]string{"flush", "alloc"})
	if err != nil || len(exps) != 2 || exps[0].Name != "flush" {
		t.Fatalf("Lookup = %v, %v", exps, err)
	}
	if _, err := Lookup([]string{"alloc", "nope"}); err == nil {
		t.Fatal("Lookup accepted an unknown experiment")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v", c.in, got)
		}
	}
}

// The Go benchmarks run the same variant bodies as `softnet bench`, so
// that `go test -bench` and the CLI cannot disagree about what is
// measured. Compare variants with benchstat.
func BenchmarkExperiments(b *testing.B) {
	for _, e := range Experiments() {
		for _, v := range e.Variants {
			b.Run(e.Name+"/"+v.Name, func(b *testing.B) {
				run, done, err := v.Prepare()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				run(context.Background(), b.N)
				b.StopTimer()
				if err := done(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		ratios []float64
		bound  float64
		higher bool
		want   Verdict
	}{
		{[]float64{1.8, 1.9, 2.0}, 1.7, true, Met},
		{[]float64{1.7, 1.9}, 1.7, true, Met}, // the bound itself meets it
		{[]float64{1.2, 1.5, 1.6}, 1.7, true, NotMet},
		{[]float64{1.5, 1.8, 1.9}, 1.7, true, Inconclusive},
		{[]float64{0.21, 0.24}, 0.25, false, Met},
		{[]float64{0.26, 0.3}, 0.25, false, NotMet},
		{[]float64{0.21, 0.27, 0.24}, 0.25, false, Inconclusive},
		{[]float64{2.5}, 1.7, true, Inconclusive}, // one repetition shows no spread
		{nil, 1, false, Inconclusive},
	} {
		if got := decide(c.ratios, c.bound, c.higher); got != c.want {
			t.Errorf("decide(%v, %v, higher %v) = %s, want %s", c.ratios, c.bound, c.higher, got, c.want)
		}
	}
}

// verdictReport is an experiment whose three goals this run meets, leaves
// open and misses, from repetitions paired by round.
func verdictReport(t *testing.T) []Report {
	t.Helper()
	e := &Experiment{
		Name: "x", Metric: "mpps", Unit: "Mpps", Higher: true,
		Variants: []Variant{{Name: "peer"}, {Name: "fast"}, {Name: "noisy"}, {Name: "slow"}},
		Goals: []Goal{
			{Variant: "fast", Against: "peer", Bound: 2},
			{Variant: "noisy", Against: "peer", Bound: 2},
			{Variant: "slow", Against: "peer", Bound: 2},
		},
	}
	r := Report{Experiment: e}
	for i, reps := range [][]float64{{10, 5, 8}, {25, 11, 17}, {25, 9, 17}, {15, 6, 10}} {
		r.Results = append(r.Results, Result{Experiment: e.Name, Variant: e.Variants[i].Name, Unit: e.Unit, Value: median(reps), Reps: reps})
	}
	for _, g := range e.Goals {
		gr, err := r.evaluate(g)
		if err != nil {
			t.Fatal(err)
		}
		r.Goals = append(r.Goals, gr)
	}
	return []Report{r}
}

func TestGoalVerdicts(t *testing.T) {
	reports := verdictReport(t)
	want := []struct {
		v      Verdict
		ratio  float64
		ratios []float64
	}{
		{Met, 17.0 / 8, []float64{2.5, 2.2, 17.0 / 8}},
		{Inconclusive, 17.0 / 8, []float64{2.5, 1.8, 17.0 / 8}},
		{NotMet, 10.0 / 8, []float64{1.5, 1.2, 1.25}},
	}
	for i, g := range reports[0].Goals {
		if g.Verdict != want[i].v || g.Met != (want[i].v == Met) || g.Ratio != want[i].ratio || !slices.Equal(g.Ratios, want[i].ratios) {
			t.Errorf("goal %s: %+v, want %s at %v from %v", g.Goal, g, want[i].v, want[i].ratio, want[i].ratios)
		}
	}
	if missed := Missed(reports); len(missed) != 1 || !strings.HasPrefix(missed[0], "x: slow >= 2.00x peer (got 1.25x, repetitions 1.20-1.50x)") {
		t.Errorf("Missed = %q, want the goal not met and not the inconclusive one", missed)
	}
	if _, err := (&Report{Experiment: reports[0].Experiment, Results: reports[0].Results}).evaluate(Goal{Variant: "fast", Against: "nope", Bound: 1}); err == nil {
		t.Error("a goal against a missing variant was evaluated")
	}
}

func TestWriteTableVerdicts(t *testing.T) {
	var b strings.Builder
	if err := WriteTable(&b, verdictReport(t)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"goal fast >= 2.00x peer: 2.12x (repetitions 2.12-2.50x; 17.0 against 8.00 Mpps), met\n",
		"goal noisy >= 2.00x peer: 2.12x (repetitions 1.80-2.50x; 17.0 against 8.00 Mpps), inconclusive: the bound lies within the repetitions' ratios\n",
		"goal slow >= 2.00x peer: 1.25x (repetitions 1.20-1.50x; 10.0 against 8.00 Mpps), NOT MET\n",
		"  1 met, 1 inconclusive, 1 not met\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^  x +noisy >= 2.00x peer +2.12x +1.80-2.50x +inconclusive$`).MatchString(out) {
		t.Errorf("summary lacks the inconclusive goal:\n%s", out)
	}
}

func TestWriteJSONVerdicts(t *testing.T) {
	var b strings.Builder
	if err := WriteJSON(&b, verdictReport(t)); err != nil {
		t.Fatal(err)
	}
	var verdicts []string
	for line := range strings.Lines(b.String()) {
		var obj struct {
			Goal    string    `json:"goal"`
			Verdict string    `json:"verdict"`
			Met     bool      `json:"met"`
			Ratios  []float64 `json:"ratios"`
			Value   float64   `json:"variant_value"`
			Against float64   `json:"against_value"`
		}
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if obj.Goal == "" {
			continue
		}
		verdicts = append(verdicts, obj.Verdict)
		if len(obj.Ratios) != 3 || obj.Against != 8 || obj.Met != (obj.Verdict == "met") {
			t.Errorf("goal line %q", line)
		}
	}
	if !slices.Equal(verdicts, []string{"met", "inconclusive", "not met"}) {
		t.Errorf("verdicts %q", verdicts)
	}
}
