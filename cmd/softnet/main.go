// Command softnet is softnet's one binary: the userspace virtual switch
// (switch) and its control client (ctl), the in-memory benchmarks of its
// mechanisms (bench) and the guest-to-guest measurement with real TUN
// devices (lab).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"softnet.dev/internal/buildinfo"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailure     = 1 // the run failed (a leak check, an I/O error)
	exitUsage       = 2 // bad flags or arguments
	exitGoalMissed  = 3 // bench --check: a goal was not met
	exitInterrupted = 130
)

// usageError marks errors the user can fix by calling differently.
type usageError struct{ error }

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "softnet",
		Short: "A userspace packet datapath for Linux virtual networking",
		Long: `softnet is a userspace packet datapath for Linux virtual networking, built on
packet-buffer machinery modelled on the kernel's sk_buff life cycle: per-worker
caches with bulk allocation, deferred free to the owning worker, batched
programs and a drop reason for every lost packet.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildinfo.Get().String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{flagError(err)} })
	root.AddCommand(newBenchCmd(), newSwitchCmd(), newCtlCmd(), newAgentCmd(), newLabCmd(), newVersionCmd())
	// Without a command, the help; with an unknown one, a usage error
	// (cobra's own is a plain error, which would exit 1).
	root.Args = cobra.ArbitraryArgs
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
		}
		return cmd.Help()
	}
	usageArgs(root)
	return root
}

// flagError says what a flag's bad value should have been, in place
// of the parser's words (strconv.ParseInt: parsing "x": invalid syntax).
func flagError(err error) error {
	var bad *pflag.InvalidValueError
	if !errors.As(err, &bad) {
		return err
	}
	want := map[string]string{
		"int": "a whole number", "uint": "a whole number, 0 or more", "bool": "true or false",
		"duration": "a duration such as 200µs, 5s or 1m",
	}[bad.GetFlag().Value.Type()]
	if want == "" {
		return err
	}
	return fmt.Errorf("--%s %q: want %s", bad.GetFlag().Name, bad.GetValue(), want)
}

// usageArgs makes the errors of c's and its commands' argument checks
// (cobra.NoArgs: an unknown command; cobra.ExactArgs) usage errors.
func usageArgs(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			err := check(cmd, args)
			var ue usageError
			if err != nil && !errors.As(err, &ue) {
				return usageError{err}
			}
			return err
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newRoot().ExecuteContext(ctx)
	os.Exit(exitCode(err))
}

func exitCode(err error) int { return exitCodeTo(os.Stderr, err) }

// exitCodeTo returns err's exit code, having written what it says to w.
func exitCodeTo(w io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	var ue usageError
	switch {
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintln(w, "softnet:", ee.err)
		}
		return ee.code
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(w, "softnet: interrupted")
		return exitInterrupted
	case errors.As(err, &ue):
		fmt.Fprintln(w, "softnet:", err)
		fmt.Fprintln(w, "Run 'softnet --help' for usage.")
		return exitUsage
	default:
		fmt.Fprintln(w, "softnet:", err)
		return exitFailure
	}
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print softnet's module version and the VCS revision it was built from",
		Long: `version prints the module version and the git revision, commit time and
whether the tree was modified, as the Go toolchain stamped them into the
binary: a build from a checkout is "(devel)" with its revision. The
running switch's is softnet ctl version.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeVersion(cmd.OutOrStdout(), buildinfo.Get(), asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, as the API's /v1/version")
	return cmd
}

func writeVersion(w io.Writer, in buildinfo.Info, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(in)
	}
	_, err := fmt.Fprintln(w, in)
	return err
}
