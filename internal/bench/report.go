package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteTable prints each report as a table of variants with the ratio to
// the first variant, then its goals.
func WriteTable(w io.Writer, reports []Report) error {
	for i, r := range reports {
		e := r.Experiment
		better := "lower is better"
		if e.Higher {
			better = "higher is better"
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s: %s\n", e.Name, e.Desc)
		var keys []string
		for _, v := range e.Variants {
			for k := range v.Extra {
				if !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
		}
		slices.Sort(keys)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  variant\t")
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t", k)
		}
		fmt.Fprintf(tw, "%s %s\tratio\tspread\n", e.Metric, e.Unit)
		for i, res := range r.Results {
			fmt.Fprintf(tw, "  %s\t", res.Variant)
			for _, k := range keys {
				fmt.Fprintf(tw, "%v\t", e.Variants[i].Extra[k])
			}
			fmt.Fprintf(tw, "%s\t%.2fx\t%s\n", formatValue(res.Value), res.Ratio, spread(res.Reps))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "  (%s; ratio to %s)\n", better, r.Results[0].Variant)
		for _, g := range r.Goals {
			fmt.Fprintf(w, "  goal %s: %.2fx (repetitions %s; %s against %s %s), %s\n",
				g.Goal, g.Ratio, g.Span(), formatValue(g.Value), formatValue(g.AgainstValue), g.Unit, g.verdict())
		}
	}
	return writeSummary(w, reports)
}

// verdict is the verdict as printed: a goal not met stands out, and an
// inconclusive one says why.
func (g GoalResult) verdict() string {
	switch g.Verdict {
	case NotMet:
		return "NOT MET"
	case Inconclusive:
		if len(g.Ratios) < 2 {
			return "inconclusive: one repetition shows no spread"
		}
		return "inconclusive: the bound lies within the repetitions' ratios"
	}
	return string(g.Verdict)
}

// writeSummary closes the tables with every goal of the run on one line
// each, so that a long run ends with its verdict in view.
func writeSummary(w io.Writer, reports []Report) error {
	count := map[Verdict]int{}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nsummary\n  experiment\tgoal\tthis run\trepetitions\tverdict\n")
	for _, r := range reports {
		for _, g := range r.Goals {
			count[g.Verdict]++
			verdict := string(g.Verdict)
			if g.Verdict == NotMet {
				verdict = "NOT MET"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%.2fx\t%s\t%s\n", g.Experiment, g.Goal, g.Ratio, g.Span(), verdict)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "  %d met, %d inconclusive, %d not met\n", count[Met], count[Inconclusive], count[NotMet])
	if count[Inconclusive] > 0 {
		fmt.Fprintln(w, "  (inconclusive: some repetitions met the goal and some did not; more or longer ones may decide it)")
	}
	return nil
}

func formatValue(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// spread is the range of the repetitions relative to their median, a quick
// sign of how noisy the machine was.
func spread(reps []float64) string {
	if len(reps) < 2 {
		return "-"
	}
	lo, hi := reps[0], reps[0]
	for _, v := range reps {
		lo, hi = min(lo, v), max(hi, v)
	}
	return fmt.Sprintf("±%.0f%%", 50*(hi-lo)/median(reps))
}

// WriteJSON writes one JSON object per line: one per result, with the
// variant's extra fields merged in, then one per goal.
func WriteJSON(w io.Writer, reports []Report) error {
	enc := json.NewEncoder(w)
	for _, r := range reports {
		for _, res := range r.Results {
			obj := map[string]any{}
			maps.Copy(obj, res.Extra)
			obj["experiment"] = res.Experiment
			obj["variant"] = res.Variant
			obj["metric"] = res.Metric
			obj["value"] = res.Value
			obj["unit"] = res.Unit
			obj["ratio"] = res.Ratio
			obj["reps"] = res.Reps
			obj["ops"] = res.Ops
			obj["gomaxprocs"] = runtime.GOMAXPROCS(0)
			if err := enc.Encode(obj); err != nil {
				return err
			}
		}
		for _, g := range r.Goals {
			if err := enc.Encode(g); err != nil {
				return err
			}
		}
	}
	return nil
}

// Missed returns the goals that were not met; an inconclusive goal was
// neither met nor missed.
func Missed(reports []Report) []string {
	var out []string
	for _, r := range reports {
		for _, g := range r.Goals {
			if g.Verdict == NotMet {
				out = append(out, fmt.Sprintf("%s: %s (got %.2fx, repetitions %s)", g.Experiment, g.Goal, g.Ratio, g.Span()))
			}
		}
	}
	return out
}

// Machine describes where the figures were measured.
func Machine() string {
	return strings.Join([]string{runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH,
		fmt.Sprintf("%d CPUs", runtime.NumCPU()), fmt.Sprintf("GOMAXPROCS=%d", runtime.GOMAXPROCS(0))}, ", ")
}
