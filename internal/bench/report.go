package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"runtime"
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
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  variant\t%s %s\tratio\tspread\n", e.Metric, e.Unit)
		for _, res := range r.Results {
			fmt.Fprintf(tw, "  %s\t%s\t%.2fx\t%s\n", res.Variant, formatValue(res.Value), res.Ratio, spread(res.Reps))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "  (%s; ratio to %s)\n", better, r.Results[0].Variant)
		for _, g := range r.Goals {
			verdict := "met"
			if !g.Met {
				verdict = "NOT MET"
			}
			fmt.Fprintf(w, "  goal %s: %.2fx, %s\n", g.Goal, g.Ratio, verdict)
		}
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

// Missed returns the goals that were not met.
func Missed(reports []Report) []string {
	var out []string
	for _, r := range reports {
		for _, g := range r.Goals {
			if !g.Met {
				out = append(out, fmt.Sprintf("%s: %s (got %.2fx)", g.Experiment, g.Goal, g.Ratio))
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
