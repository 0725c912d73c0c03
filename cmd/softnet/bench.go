package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"softnet.dev/internal/bench"
)

func newBenchCmd() *cobra.Command {
	var (
		duration time.Duration
		reps     int
		asJSON   bool
		check    bool
		quiet    bool
	)
	var names []string
	for _, e := range bench.Experiments() {
		names = append(names, fmt.Sprintf("  %-12s %s", e.Name, e.Desc))
	}
	cmd := &cobra.Command{
		Use:   "bench [experiment...]",
		Short: "Measure softnet's mechanisms side by side with today's Go idioms",
		Long: `bench runs experiments in memory, without privileges, and prints per
experiment a table of variants with each one's ratio to the first, and its
goals. Every variant is measured in the same run, interleaved over
repetitions, and the median is reported. Every goal bounds the ratio of a
variant to a peer of the same run (the figures themselves are information:
they measure the machine as much as the code). A goal is met when the ratio
of every repetition meets it, not met when none does, and inconclusive when
the repetitions fall on both sides of it: the machine was too noisy to tell.

Experiments (all by default):
` + strings.Join(names, "\n"),
		Example: `  softnet bench
  softnet bench --duration 3s alloc remote-free
  softnet bench --json flush > flush.jsonl`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if duration <= 0 || reps < 1 {
				return usageError{fmt.Errorf("--duration must be positive and --reps at least 1")}
			}
			exps, err := bench.Lookup(args)
			if err != nil {
				return usageError{err}
			}
			opt := bench.Options{Duration: duration, Reps: reps}
			stderr := cmd.ErrOrStderr()
			if !quiet {
				if bar := newProgress(stderr, bench.Steps(exps, opt)); bar != nil {
					opt.Progress = func(step, _ int, what string) {
						bar.Describe(fmt.Sprintf("%-32s", what))
						_ = bar.Set(step)
					}
					defer func() { _ = bar.Finish(); fmt.Fprintln(stderr) }()
				}
			}
			reports, err := bench.Run(cmd.Context(), exps, opt)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				err = bench.WriteJSON(out, reports)
			} else {
				fmt.Fprintf(out, "softnet bench: %s, %v per variant in %d repetitions\n\n", bench.Machine(), duration, reps)
				err = bench.WriteTable(out, reports)
			}
			if err != nil {
				return err
			}
			if missed := bench.Missed(reports); check && len(missed) > 0 {
				return &exitError{code: exitGoalMissed, err: fmt.Errorf("goals not met:\n  %s", strings.Join(missed, "\n  "))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&duration, "duration", time.Second, "measured time per variant")
	f.IntVar(&reps, "reps", 5, "repetitions per variant, interleaved across variants")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per line instead of tables")
	f.BoolVar(&check, "check", false, "exit with status 3 if a goal is not met (an inconclusive one is not)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bar on stderr")
	return cmd
}

// newProgress returns a progress bar on w when w is a terminal, nil
// otherwise: a log file gets no carriage-return noise.
func newProgress(w io.Writer, steps int) *progressbar.ProgressBar {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return progressbar.NewOptions(steps,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionClearOnFinish(),
	)
}
