package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"softnet.dev/internal/control"
	"softnet.dev/internal/vswitch"
)

// exitNoSwitch is ctl's exit code when no switch answers on the socket.
const exitNoSwitch = 3

func newCtlCmd() *cobra.Command {
	var socket string
	cmd := &cobra.Command{
		Use:   "ctl",
		Short: "Inspect a running switch through its control socket",
		Long: `ctl is a client of the API that softnet switch serves on its control socket
(--control, default ` + control.DefaultSocket + `). Anyone who can write the
socket controls the switch; it is created with mode 0660.

Exit codes: 0 ok, 1 the switch refused the request (its message is printed),
2 usage, 3 no switch is running on the socket.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return usageError{errors.New("ctl needs a command")} },
	}
	cmd.PersistentFlags().StringVar(&socket, "socket", control.DefaultSocket, "the switch's control socket")
	client := func() *control.Client { return control.NewClient(socket) }

	var asJSON bool
	var watch time.Duration
	var count int
	stats := &cobra.Command{
		Use:   "stats [--json] [--watch [INTERVAL]]",
		Short: "Print per-port counters and drops by reason; with --watch, rates, refreshed",
		Example: `  softnet ctl stats
  softnet ctl stats --watch        # every second, until Ctrl-C
  softnet ctl stats --watch 5s -n 3`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				// --watch INTERVAL, which the flag parser leaves as an
				// argument since the interval is optional.
				d, err := time.ParseDuration(args[0])
				if err != nil || !cmd.Flags().Changed("watch") || d <= 0 {
					return usageError{fmt.Errorf("stats: unexpected argument %q (want --watch INTERVAL, e.g. 2s)", args[0])}
				}
				watch = d
			}
			ctx := cmd.Context()
			var prev *vswitch.Report
			var prevAt time.Time
			tty := isTerminal(cmd.OutOrStdout())
			for i := 0; ; i++ {
				var rep vswitch.Report
				if err := client().Get(ctx, "/v1/stats", &rep); err != nil {
					return ctlError(err)
				}
				now := time.Now()
				switch {
				case asJSON:
					if err := json.NewEncoder(cmd.OutOrStdout()).Encode(&rep); err != nil {
						return err
					}
				case watch == 0:
					return rep.WriteText(cmd.OutOrStdout())
				default:
					if tty {
						fmt.Fprint(cmd.OutOrStdout(), "\x1b[H\x1b[2J") // home, clear
					}
					writeRates(cmd.OutOrStdout(), prev, &rep, now.Sub(prevAt))
				}
				if watch == 0 || (count > 0 && i+1 >= count) {
					return nil
				}
				prev, prevAt = &rep, now
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(watch):
				}
			}
		},
	}
	stats.Flags().BoolVar(&asJSON, "json", false, "print the statistics as JSON (one object per line with --watch)")
	stats.Flags().DurationVar(&watch, "watch", 0, "print every INTERVAL until interrupted (default 1s when given alone)")
	stats.Flags().Lookup("watch").NoOptDefVal = "1s"
	stats.Flags().IntVarP(&count, "count", "n", 0, "with --watch, stop after N prints")

	config := &cobra.Command{
		Use:   "config",
		Short: "Print the running configuration in --config file syntax",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var c control.Config
			if err := client().Get(cmd.Context(), "/v1/config", &c); err != nil {
				return ctlError(err)
			}
			_, err := io.WriteString(cmd.OutOrStdout(), c.Text)
			return err
		},
	}

	portList := &cobra.Command{
		Use:   "list",
		Short: "List the ports",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ports []control.Port
			if err := client().Get(cmd.Context(), "/v1/ports", &ports); err != nil {
				return ctlError(err)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(ports)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "name\tstate\tspec\tdevice")
			for _, p := range ports {
				state := "up"
				if p.Down {
					state = "down: " + p.Error
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, state, p.Spec, p.Info)
			}
			return tw.Flush()
		},
	}
	portList.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	portCmd := &cobra.Command{Use: "port", Short: "Ports of the switch", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return usageError{errors.New("port needs a command: list")} }}
	portCmd.AddCommand(portList)

	routeList := &cobra.Command{
		Use:   "list",
		Short: "List the static routes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var routes []control.Route
			if err := client().Get(cmd.Context(), "/v1/routes", &routes); err != nil {
				return ctlError(err)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(routes)
			}
			for _, r := range routes {
				fmt.Fprintf(cmd.OutOrStdout(), "%s=%s\n", r.Prefix, r.Port)
			}
			return nil
		},
	}
	routeList.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	routeCmd := &cobra.Command{Use: "route", Short: "Static routes of the switch", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return usageError{errors.New("route needs a command: list")} }}
	routeCmd.AddCommand(routeList)

	cmd.AddCommand(stats, config, portCmd, routeCmd)
	return cmd
}

// ctlError gives an API error its exit code.
func ctlError(err error) error {
	var refused *control.RefusedError
	switch {
	case errors.Is(err, control.ErrNoSwitch):
		return &exitError{code: exitNoSwitch, err: err}
	case errors.As(err, &refused), errors.Is(err, context.DeadlineExceeded):
		return &exitError{code: exitFailure, err: err}
	}
	return err
}

// writeRates prints per-port packet and bit rates between two samples,
// and the drops in between by reason; the first sample has no rates yet.
func writeRates(w io.Writer, prev, cur *vswitch.Report, dt time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "port\trx pkt/s\trx Mbit/s\ttx pkt/s\ttx Mbit/s\tdropped/s\t")
	secs := dt.Seconds()
	for i, p := range cur.Ports {
		if prev == nil || i >= len(prev.Ports) || secs <= 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t\n", p.Name)
			continue
		}
		q := prev.Ports[i]
		rate := func(a, b uint64) float64 { return float64(a-b) / secs }
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%.0f\t%.1f\t%.0f\t\n", p.Name,
			rate(p.RxPackets, q.RxPackets), 8*rate(p.RxBytes, q.RxBytes)/1e6,
			rate(p.TxPackets, q.TxPackets), 8*rate(p.TxBytes, q.TxBytes)/1e6,
			rate(p.Drops.Total()+p.TxDropped, q.Drops.Total()+q.TxDropped))
	}
	tw.Flush()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
