package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"softnet.dev/drop"
	"softnet.dev/engine"
	"softnet.dev/internal/buildinfo"
	"softnet.dev/internal/control"
	"softnet.dev/internal/vswitch"
)

// ctl's exit codes beyond exitOK, exitFailure (the switch refused the
// request, or it failed) and exitUsage; docs/api.md lists them all.
const (
	exitNoSwitch = 3 // no switch answers on the socket
	exitDenied   = 4 // the socket's permissions keep the caller out
)

func newCtlCmd() *cobra.Command {
	var socket string
	cmd := &cobra.Command{
		Use:   "ctl",
		Short: "Inspect and reconfigure a running switch through its control socket",
		Long: `ctl is a client of the API that softnet switch serves on its control socket
(--control, default ` + control.DefaultSocket + `). Anyone who can write the
socket controls the switch; it is created with mode 0660.

Exit codes: 0 ok; 1 the switch refused the request, or it failed (the
message is printed); 2 usage: an unknown command, a missing or extra
argument, a bad flag, or a spec, route or prefix that does not parse;
3 no switch is running on the socket; 4 the socket's permissions keep
the caller out (a switch started with --control-group GROUP lets GROUP's
members in).`,
		Example: `  softnet ctl stats --watch
  softnet ctl port add tun:sn3,netns=guest3
  softnet ctl route add 198.18.3.0/24=sn3
  softnet ctl --socket /tmp/sw.sock port list --json`,
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
				if err != nil || !cmd.Flags().Changed("watch") {
					return usageError{fmt.Errorf("stats: unexpected argument %q (want --watch INTERVAL, e.g. 2s)", args[0])}
				}
				watch = d
			}
			// An interval of 0 would print once, as without --watch: the
			// caller meant something else.
			if cmd.Flags().Changed("watch") && watch <= 0 {
				return usageError{fmt.Errorf("--watch %v: want an interval above 0, e.g. 1s (or no --watch for one print)", watch)}
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

	var versionJSON bool
	version := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the running switch's version, as softnet version prints this binary's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var in buildinfo.Info
			if err := client().Get(cmd.Context(), "/v1/version", &in); err != nil {
				return ctlError(err)
			}
			return writeVersion(cmd.OutOrStdout(), in, versionJSON)
		},
	}
	version.Flags().BoolVar(&versionJSON, "json", false, "print JSON")

	cmd.AddCommand(stats, config, version, newPortCmd(client), newRouteCmd(client), newFDBCmd(client), newDropsCmd(client), newCaptureCmd(client))
	cmd.AddCommand(newShutdownCmd(client), newCtlAgentCmd())
	return cmd
}

func newPortCmd(client func() *control.Client) *cobra.Command {
	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--json]",
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
			return writePorts(cmd.OutOrStdout(), ports)
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	var addJSON bool
	add := &cobra.Command{
		Use:   "add SPEC",
		Short: "Add a port to the running switch, with the syntax of --port",
		Long: `add opens the device of SPEC (kind:NAME[,netns=NS][,queues=N]..., as
softnet switch --port takes it; see softnet switch --help) and adds it to
the running switch. Traffic between the other ports goes on. A TUN port
sends from the prefixes routed to it (softnet ctl route add) unless allow=
says otherwise. The new port is printed as port list prints it.

netns= takes a name (ip netns add NS) or a path, as container runtimes
hand namespaces over: /var/run/netns/NAME, /proc/PID/ns/net; dev= names
the device there when it is not the port's name (every container's eth0).`,
		Example: `  softnet ctl port add tun:sn3,netns=guest3
  softnet ctl port add tun:sn4,netns=/proc/4242/ns/net,allow=198.18.4.0/24
  softnet ctl port add tun:pod7,netns=/proc/4242/ns/net,dev=eth0
  softnet ctl route add 198.18.3.0/24=sn3`,
		Args: exactArgs(1, "port add needs SPEC, e.g. tun:sn3,netns=guest3"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := vswitch.ParsePort(args[0]); err != nil {
				return usageError{err}
			}
			var p control.Port
			if err := client().Post(cmd.Context(), "/v1/ports", control.PortRequest{Spec: args[0]}, &p); err != nil {
				return ctlError(err)
			}
			if addJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(p)
			}
			return writePorts(cmd.OutOrStdout(), []control.Port{p})
		},
	}
	add.Flags().BoolVar(&addJSON, "json", false, "print the new port as JSON")
	del := &cobra.Command{
		Use:     "del NAME",
		Aliases: []string{"delete", "rm"},
		Short:   "Remove a port from the running switch",
		Long: `del removes the port NAME while the switch runs: its routes go with it,
and its device is closed (removed, if the switch created it). Traffic
between the other ports goes on. Nothing is printed on success.`,
		Example: `  softnet ctl port del sn3`,
		Args:    exactArgs(1, "port del needs the port's NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := client().Delete(cmd.Context(), "/v1/ports/"+url.PathEscape(args[0])); err != nil {
				return ctlError(err)
			}
			return nil
		},
	}
	var showJSON bool
	show := &cobra.Command{
		Use:   "show [NAME] [--json]",
		Short: "Show a port, or every port: kind, origin, options, state, queues, device, namespace",
		Long: `show prints what the switch holds of the port NAME, one line per field:
its kind, who made it (origin: config or api), the kind's own options, its state (a vhost-user port's
front-end: "no front-end connected" while it waits for its VM, else the
queue pairs enabled and the features negotiated), its queues, its device
and namespace, and its port security. Without NAME, a table of every port.`,
		Example: `  softnet ctl port show
  softnet ctl port show vm1
  softnet ctl port show vm1 --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				var ports []control.Port
				if err := client().Get(cmd.Context(), "/v1/ports", &ports); err != nil {
					return ctlError(err)
				}
				if showJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(ports)
				}
				return writePortTable(cmd.OutOrStdout(), ports)
			}
			var p control.Port
			if err := client().Get(cmd.Context(), "/v1/ports/"+url.PathEscape(args[0]), &p); err != nil {
				return ctlError(err)
			}
			if showJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(p)
			}
			return writePort(cmd.OutOrStdout(), p)
		},
	}
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON")
	var setJSON bool
	set := &cobra.Command{
		Use:   "set NAME OPTION=VALUE...",
		Short: "Change a running port's rate limits (or its kind's live options)",
		Long: `set changes options of the port NAME while it runs, without reopening it:
its rate limits (ingress-rate, ingress-burst, egress-rate, egress-burst;
see softnet switch --help), and the options its kind changes live (a
vxlan port's remote= and fdb=). Each OPTION=VALUE replaces the port's
options of that name; OPTION= with no value removes them, back to the
default. Any other change is refused (exit 1): remove the port and add it
again. The port is printed as port list prints it.`,
		Example: `  softnet ctl port set sn3 ingress-rate=100M egress-rate=1G egress-burst=10M
  softnet ctl port set sn3 ingress-rate= ingress-burst=`,
		Args: minArgs(2, "port set needs the port's NAME and OPTION=VALUE, e.g. port set sn3 ingress-rate=100M"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := control.PortChange{Options: map[string]string{}}
			for _, a := range args[1:] {
				k, v, ok := strings.Cut(a, "=")
				if !ok || k == "" {
					return usageError{fmt.Errorf("port set: %q: want OPTION=VALUE (OPTION= to remove it)", a)}
				}
				req.Options[k] = v
			}
			var p control.Port
			if err := client().Patch(cmd.Context(), "/v1/ports/"+url.PathEscape(args[0]), req, &p); err != nil {
				return ctlError(err)
			}
			if setJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(p)
			}
			return writePorts(cmd.OutOrStdout(), []control.Port{p})
		},
	}
	set.Flags().BoolVar(&setJSON, "json", false, "print the port as JSON")
	cmd := &cobra.Command{Use: "port", Short: "List, show, add, change and remove the switch's ports", Args: cobra.NoArgs,
		Example: `  softnet ctl port list
  softnet ctl port show sn3
  softnet ctl port add tun:sn3,netns=guest3
  softnet ctl port set sn3 ingress-rate=100M
  softnet ctl port del sn3`,
		RunE: func(*cobra.Command, []string) error {
			return usageError{errors.New("port needs a command: list, show, add, set or del")}
		}}
	cmd.AddCommand(list, show, add, set, del)
	return cmd
}

func writePorts(w io.Writer, ports []control.Port) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tstate\tspec\tdevice\tpod")
	for _, p := range ports {
		pod := "-"
		if p.Pod != nil {
			pod = p.Pod.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, portState(p), p.Spec, p.Info, pod)
	}
	return tw.Flush()
}

// portState is "up" or "down: why", and what the port's kind says of
// its state: "up: no front-end connected".
func portState(p control.Port) string {
	state := "up"
	if p.Down {
		state = "down: " + p.Error
	}
	if p.State != "" {
		state += "; " + p.State
	}
	return state
}

// orNone is s, or "-" for nothing, as a table cell.
func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writePortTable is port show's table of every port.
func writePortTable(w io.Writer, ports []control.Port) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tkind\torigin\tstate\tqueues\tdevice\tnamespace\toptions")
	for _, p := range ports {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", p.Name, p.Kind, orNone(p.Origin), portState(p), p.Queues, orNone(p.Device),
			orNone(p.Netns), orNone(p.Options.String()))
	}
	return tw.Flush()
}

// writePort is port show NAME: a field a line, as ip -d link show.
func writePort(w io.Writer, p control.Port) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("name", p.Name)
	row("kind", p.Kind)
	row("origin", orNone(p.Origin))
	row("spec", p.Spec)
	row("options", orNone(p.Options.String()))
	row("state", portState(p))
	for _, f := range p.StateDetail {
		row("  "+f.Key, f.Value)
	}
	row("queues", strconv.Itoa(p.Queues))
	row("device", orNone(p.Device))
	row("namespace", orNone(p.Netns))
	row("info", p.Info)
	created := "no"
	if p.Created {
		created = "yes: the switch removes it when it stops"
	}
	row("created", created)
	row("allow", orNone(p.Allow))
	row("mac", orNone(p.MACs))
	row("dhcp-server", onOff(p.DHCPServer))
	row("router", onOff(p.Router))
	return tw.Flush()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func newRouteCmd(client func() *control.Client) *cobra.Command {
	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the static routes: prefix, port, via (a routed vxlan port's remote) and origin (config or api)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var routes []control.Route
			if err := client().Get(cmd.Context(), "/v1/routes", &routes); err != nil {
				return ctlError(err)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(routes)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "prefix\tport\tvia\torigin")
			for _, r := range routes {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Prefix, r.Port, orNone(r.Via), orNone(r.Origin))
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	add := &cobra.Command{
		Use:   "add PREFIX=PORT",
		Short: "Route a prefix to a TUN port of the running switch",
		Long: `add routes PREFIX to the TUN port PORT, as --route does at start. A port
without allow= may then also send from the prefix. Nothing is printed on
success.`,
		Example: `  softnet ctl route add 198.18.3.0/24=sn3
  softnet ctl route add 2001:db8:3::/64=sn3`,
		Args: exactArgs(1, "route add needs PREFIX=PORT, e.g. 198.18.3.0/24=sn3"),
		RunE: func(cmd *cobra.Command, args []string) error {
			rt, err := vswitch.ParseRoute(args[0])
			if err != nil {
				return usageError{err}
			}
			if err := client().Post(cmd.Context(), "/v1/routes", routeBody(rt), nil); err != nil {
				return ctlError(err)
			}
			return nil
		},
	}
	del := &cobra.Command{
		Use:     "del PREFIX",
		Aliases: []string{"delete", "rm"},
		Short:   "Remove the route to a prefix from the running switch",
		Long:    `del removes the static route to PREFIX. Nothing is printed on success.`,
		Example: `  softnet ctl route del 198.18.3.0/24`,
		Args:    exactArgs(1, "route del needs a PREFIX, e.g. 198.18.3.0/24"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := vswitch.ParsePrefix(args[0])
			if err != nil {
				return usageError{fmt.Errorf("route del: %w", err)}
			}
			if err := client().Delete(cmd.Context(), "/v1/routes/"+p.String()); err != nil {
				return ctlError(err)
			}
			return nil
		},
	}
	cmd := &cobra.Command{Use: "route", Short: "List, add and remove the switch's static routes", Args: cobra.NoArgs,
		Example: `  softnet ctl route list
  softnet ctl route add 198.18.3.0/24=sn3
  softnet ctl route del 198.18.3.0/24`,
		RunE: func(*cobra.Command, []string) error {
			return usageError{errors.New("route needs a command: list, add or del")}
		}}
	cmd.AddCommand(list, add, del)
	return cmd
}

func newFDBCmd(client func() *control.Client) *cobra.Command {
	var asJSON bool
	show := &cobra.Command{
		Use:   "show [--json]",
		Short: "List the stations the switch knows: MAC, port, age, learned or static",
		Long: `show lists the switch's forwarding table, as bridge fdb show and
ovs-appctl fdb/show do: each station's MAC, the port it is on, how long
since it was last seen (to within a second), and whether it was learned
or configured (static). The bridge's stations (bridged ports) come first;
then each port's own table: a vxlan port's stations, with the remote
each is behind (dst). A switch of routed ports has no bridge.`,
		Example: `  softnet ctl fdb show
  softnet ctl fdb show --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var stations []control.Station
			if err := client().Get(cmd.Context(), "/v1/fdb", &stations); err != nil {
				return ctlError(err)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(stations)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "mac\tport\tdst\tage\ttype")
			for _, e := range stations {
				age, kind := strconv.FormatFloat(e.AgeSeconds, 'f', 0, 64)+"s", "learned"
				if e.Static {
					age, kind = "-", "static"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.MAC, e.Port, orNone(e.Dst), age, kind)
			}
			return tw.Flush()
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd := &cobra.Command{Use: "fdb", Short: "Show the stations the switch has learned", Args: cobra.NoArgs,
		Example: "  softnet ctl fdb show",
		RunE: func(*cobra.Command, []string) error {
			return usageError{errors.New("fdb needs a command: show")}
		}}
	cmd.AddCommand(show)
	return cmd
}

// exactArgs is cobra.ExactArgs with a usage error that says what is
// missing.
func exactArgs(n int, msg string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{errors.New(msg)}
		}
		return nil
	}
}

func minArgs(n int, msg string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < n {
			return usageError{errors.New(msg)}
		}
		return nil
	}
}

func newDropsCmd(client func() *control.Client) *cobra.Command {
	var (
		watch, asJSON bool
		rate, count   int
	)
	cmd := &cobra.Command{
		Use:   "drops [--json] [--watch [--rate N/s] [-n COUNT]]",
		Short: "Print drops by port and reason; with --watch, stream dropped packets as they happen",
		Long: `drops prints the switch's drops by port and reason, a table or, with --json,
a JSON list of {"port", "dir", "reason", "packets"}. With --watch it streams
dropped packets as they happen, one line each: time, port, worker, reason
and the packet's headers decoded. The switch samples at most --rate drops a
second, on its workers, without ever making them wait; on exit (Ctrl-C,
after -n drops, or when the switch stops) ctl prints how many drops the
sampler skipped and lost.`,
		Example: `  softnet ctl drops
  softnet ctl drops --json
  softnet ctl drops --watch --rate 10`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if !watch {
				var rep vswitch.Report
				if err := client().Get(cmd.Context(), "/v1/stats", &rep); err != nil {
					return ctlError(err)
				}
				rows := dropRows(&rep)
				if asJSON {
					return json.NewEncoder(out).Encode(rows)
				}
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "port\treason\tpackets")
				for _, r := range rows {
					name := r.Port
					if r.Dir != "" {
						name += " (" + r.Dir + ")"
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\n", name, r.Reason, r.Packets)
				}
				return tw.Flush()
			}
			resp, err := client().Stream(cmd.Context(), fmt.Sprintf("/v1/drops?rate=%d&count=%d", rate, count))
			if err != nil {
				return ctlError(err)
			}
			defer resp.Body.Close()
			dec := json.NewDecoder(resp.Body)
			var last control.DropEvent
			for {
				var ev control.DropEvent
				if err := dec.Decode(&ev); err != nil {
					break // the switch ended the stream, or Ctrl-C did
				}
				switch {
				case ev.Type == "status":
					last = ev
				case asJSON:
					json.NewEncoder(out).Encode(ev)
				default:
					fmt.Fprintf(out, "%s %-8s w%d %-16s %s\n", ev.Time.Format("15:04:05.000000"), ev.Port, ev.Worker, ev.Reason, ev.Summary)
				}
			}
			why := ""
			if last.End == control.EndStopped {
				why = "; the switch stopped"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d drops shown; the sampler skipped %d (over --rate) and lost %d (not read in time)%s\n", last.Sent, last.SampledOut, last.Lost, why)
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&watch, "watch", false, "stream dropped packets until interrupted")
	f.IntVar(&rate, "rate", control.DefaultDropRate, "with --watch, at most N drops a second")
	f.IntVarP(&count, "count", "n", 0, "with --watch, stop after N drops")
	f.BoolVar(&asJSON, "json", false, "print JSON: the counts as one list, or with --watch each drop as a line")
	return cmd
}

// dropRow is one line of softnet ctl drops: a port's drops of a reason,
// by the programs (Dir "") or by its device receiving or sending.
type dropRow struct {
	Port    string `json:"port"`
	Dir     string `json:"dir,omitempty"` // "rx" or "tx": the device's
	Reason  string `json:"reason"`
	Packets uint64 `json:"packets"`
}

// dropRows are the report's drops, each port's and device's by reason,
// those that happened only.
func dropRows(rep *vswitch.Report) []dropRow {
	rows := []dropRow{}
	add := func(port, dir string, counts []uint64) {
		for reason, n := range counts {
			if n > 0 {
				rows = append(rows, dropRow{Port: port, Dir: dir, Reason: drop.Reason(reason).String(), Packets: n})
			}
		}
	}
	for _, p := range rep.Ports {
		add(p.Name, "", p.Drops[:])
	}
	for _, d := range rep.Devices {
		add(d.Port, "rx", d.RxDrops[:])
		add(d.Port, "tx", d.TxDrops[:])
	}
	return rows
}

func newCaptureCmd(client func() *control.Client) *cobra.Command {
	var (
		dir, file, filter string
		count, snaplen    int
		bufferKiB         int
	)
	cmd := &cobra.Command{
		Use:   "capture PORT [--dir rx|tx|both] [-c COUNT] [--snaplen N] [-B KiB] [--filter EXPR] -w FILE|-",
		Short: "Capture a port's packets into a pcap file that tcpdump and Wireshark read",
		Long: `capture copies the packets a port receives and transmits into a pcap file
(LINKTYPE_RAW for TUN ports, LINKTYPE_ETHERNET for TAP ports), as the device
saw them: a GSO packet is one large packet. The switch copies packets out of
its workers into one buffer of --buffer-size KiB, shared by all workers; a
packet that finds it full because the reader cannot keep up is dropped from
the capture, counted and reported at the end, and still forwarded.

The filter is a conjunction of "host ADDR", "net PREFIX",
"proto tcp|udp|icmp|icmpv6|arp" and "port N", joined by "and".`,
		Example: `  softnet ctl capture sn0 -c 10 -w ping.pcap --filter "proto icmp"
  softnet ctl capture sn0 -w - | tcpdump -n -r -`,
		Args: exactArgs(1, "capture needs a PORT, e.g. capture sn0 -w -"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return usageError{errors.New("capture: -w FILE or -w - is required")}
			}
			q := url.Values{"port": {args[0]}, "dir": {dir}, "filter": {filter}, "buffer": {strconv.Itoa(bufferKiB)}}
			if count > 0 {
				q.Set("count", strconv.Itoa(count))
			}
			if snaplen > 0 {
				q.Set("snaplen", strconv.Itoa(snaplen))
			}
			resp, err := client().Stream(cmd.Context(), "/v1/capture?"+q.Encode())
			if err != nil {
				return ctlError(err)
			}
			defer resp.Body.Close()
			out := cmd.OutOrStdout()
			if file != "-" {
				f, err := os.Create(file)
				if err != nil {
					return err
				}
				defer f.Close()
				out = f
			}
			n, err := copyPcap(out, resp.Body)
			lost := resp.Trailer.Get("Softnet-Lost")
			if lost == "" {
				lost = "an unknown number of" // interrupted before the switch said
			}
			why := ""
			switch resp.Trailer.Get("Softnet-End") {
			case "port-removed":
				why = "; the port was removed from the switch"
			case control.EndStopped:
				why = "; the switch stopped"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d packets captured; %s packets dropped because the capture's buffer was full%s\n", n, lost, why)
			if err != nil && cmd.Context().Err() == nil {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "both", "rx, tx or both")
	f.IntVarP(&count, "count", "c", 0, "stop after COUNT packets")
	f.IntVar(&snaplen, "snaplen", 0, "bytes kept of each packet (default: the port's largest frame)")
	f.IntVarP(&bufferKiB, "buffer-size", "B", control.DefaultCaptureBufferKiB, fmt.Sprintf("the capture's buffer in KiB, %d to %d", control.MinCaptureBufferKiB, control.MaxCaptureBufferKiB))
	f.StringVar(&filter, "filter", "", `capture only what matches, e.g. "host 198.18.1.1 and proto udp"`)
	f.StringVarP(&file, "write", "w", "", "the pcap file to write, - for standard output")
	return cmd
}

// copyPcap copies a pcap stream packet by packet, so that a reader of
// out (tcpdump -r -) sees each packet as it comes, and counts them.
func copyPcap(out io.Writer, in io.Reader) (int, error) {
	r, err := pcapgo.NewReader(in)
	if err != nil {
		return 0, fmt.Errorf("capture: %w", err)
	}
	w := pcapgo.NewWriterNanos(out)
	if err := w.WriteFileHeader(r.Snaplen(), r.LinkType()); err != nil {
		return 0, err
	}
	n := 0
	for {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
		if err := w.WritePacket(ci, data); err != nil {
			return n, err
		}
		n++
	}
}

// ctlError gives an API error its exit code.
func ctlError(err error) error {
	var refused *control.RefusedError
	switch {
	case errors.Is(err, control.ErrNoSwitch):
		return &exitError{code: exitNoSwitch, err: err}
	case errors.Is(err, control.ErrDenied):
		return &exitError{code: exitDenied, err: fmt.Errorf("%w: the socket is for root and its group (mode 0660); run ctl as root, or start the switch with --control-group GROUP and run ctl as a member of GROUP", err)}
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
	for _, p := range cur.Ports {
		// Ports come and go between samples: a port's previous sample is
		// the one with its name and index, counting up from it.
		var q *engine.PortStats
		if prev != nil {
			for i := range prev.Ports {
				if o := &prev.Ports[i]; o.Name == p.Name && o.Index == p.Index && o.RxPackets <= p.RxPackets && o.TxPackets <= p.TxPackets {
					q = o
				}
			}
		}
		if q == nil || secs <= 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t\n", p.Name)
			continue
		}
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

// routeBody is rt as POST /v1/routes takes it.
func routeBody(rt vswitch.RouteSpec) control.Route {
	r := control.Route{Prefix: rt.Prefix.String(), Port: rt.Port}
	if rt.Via.IsValid() {
		r.Via = rt.Via.String()
	}
	return r
}

func newShutdownCmd(client func() *control.Client) *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "shutdown [--keep-guests]",
		Short: "Stop the switch; with --keep-guests, for a restart that keeps guests connected",
		Long: `shutdown stops the switch, as SIGTERM does: it removes the devices it
created. With --keep-guests it leaves the guests' TUN and TAP devices in
place, with their addresses and routes, for the next switch started with
the same --state to adopt (a restart or an upgrade); vhost-user guests
reconnect to it, vxlan ports reopen. It needs a switch with a state file.
ctl returns once the switch was asked to stop, not when it has stopped.`,
		Example: `  softnet ctl shutdown --keep-guests && systemctl restart softnet`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := client().Post(cmd.Context(), "/v1/shutdown", control.ShutdownRequest{KeepGuests: keep}, nil); err != nil {
				return ctlError(err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&keep, "keep-guests", false, "leave the guests' devices in place for the next switch")
	return cmd
}
