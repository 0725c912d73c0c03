package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Experiment is a set of variants measured with one metric.
type Experiment struct {
	Name     string
	Desc     string
	Metric   string // e.g. "ns_per_buf"
	Unit     string // e.g. "ns"
	Higher   bool   // higher values are better
	Variants []Variant
	Goals    []Goal
}

// Variant is one way of doing the experiment's work. Run does n
// operations (buffers, flushes, packets) and returns the number done,
// which is n unless ctx was cancelled. Setup happens outside the timed
// region: Prepare returns the runner and a cleanup that reports misuse
// (a leak check that did not balance).
type Variant struct {
	Name    string
	Extra   map[string]any // extra JSON fields, such as size or workers
	Prepare func() (run func(ctx context.Context, n int) int, done func() error, err error)
}

// Goal is a ratio one variant must reach against another.
type Goal struct {
	Variant, Against string
	// Ratio bounds Variant/Against in the metric's own terms: for a
	// lower-is-better metric the ratio must be at most Ratio, for a
	// higher-is-better one at least Ratio.
	Ratio float64
}

// String renders the goal as in the issue text, e.g.
// "cache <= 1.00x syncpool".
func (g Goal) String(higher bool) string {
	op := "<="
	if higher {
		op = ">="
	}
	return fmt.Sprintf("%s %s %.2fx %s", g.Variant, op, g.Ratio, g.Against)
}

// Experiments returns every experiment, in run order.
func Experiments() []*Experiment {
	return []*Experiment{allocExperiment, remoteFreeExperiment, flushExperiment}
}

// Lookup returns the named experiments, or an error naming the unknown
// ones and listing the known ones.
func Lookup(names []string) ([]*Experiment, error) {
	all := Experiments()
	if len(names) == 0 {
		return all, nil
	}
	var out []*Experiment
	var unknown []string
	for _, n := range names {
		i := slices.IndexFunc(all, func(e *Experiment) bool { return e.Name == n })
		if i < 0 {
			unknown = append(unknown, n)
			continue
		}
		out = append(out, all[i])
	}
	if len(unknown) > 0 {
		var known []string
		for _, e := range all {
			known = append(known, e.Name)
		}
		return nil, fmt.Errorf("unknown experiment %s (known: %s)", strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return out, nil
}
