package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Experiment is a set of variants measured with one metric. Several
// experiments may share a Name (one ladder per packet size, say): they are
// run and looked up together, and each has its own first variant that
// ratios refer to.
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

// Label names the variant uniquely within its experiment: its name and
// its extra fields, e.g. "napi-cache+bulk workers=2".
func (v *Variant) Label() string {
	keys := slices.Sorted(maps.Keys(v.Extra))
	parts := []string{v.Name}
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, v.Extra[k]))
	}
	return strings.Join(parts, " ")
}

// Goal is a bound on the ratio of one variant's figure to a peer's in the
// same run, never on a figure alone: a figure measures the machine as
// much as the code. Variants are named by Label.
type Goal struct {
	Variant, Against string
	// Bound limits Variant/Against in the metric's own terms: at most
	// Bound for a lower-is-better metric, at least Bound for a
	// higher-is-better one.
	Bound float64
}

// String renders the goal as in the issue text, e.g.
// "cache <= 1.00x syncpool".
func (g Goal) String(e *Experiment) string {
	op := "<="
	if e.Higher {
		op = ">="
	}
	return fmt.Sprintf("%s %s %.2fx %s", g.Variant, op, g.Bound, g.Against)
}

// Experiments returns every experiment, in run order.
func Experiments() []*Experiment {
	exps := append([]*Experiment{allocExperiment, remoteFreeExperiment, flushExperiment}, forwardExperiments...)
	return append(exps, zerocopyExperiments...)
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
		found := false
		for _, e := range all {
			if e.Name == n {
				out = append(out, e)
				found = true
			}
		}
		if !found {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		var known []string
		for _, e := range all {
			if !slices.Contains(known, e.Name) {
				known = append(known, e.Name)
			}
		}
		return nil, fmt.Errorf("unknown experiment %s (known: %s)", strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return out, nil
}
