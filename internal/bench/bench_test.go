package bench

import (
	"context"
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
