package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"softnet.dev/internal/control"
	"softnet.dev/internal/unixsock"
	"softnet.dev/internal/vswitch"
	"softnet.dev/program"
)

func newSwitchCmd() *cobra.Command {
	var (
		ports, routes []string
		services      []string
		filters       []string
		workers       int
		busyPoll      time.Duration
		cpus          string
		configFile    string
		statsJSON     string
		controlPath   string
		controlGroup  string
		metricsAddr   string
		logFormat     string
		logLevel      string
		statePath     string
		stateReset    bool
	)
	cmd := &cobra.Command{
		Use:   "switch --port SPEC --port SPEC [--route PREFIX=PORT]... [--workers N]",
		Short: "Run a userspace virtual switch: " + strings.Join(vswitch.Kinds(), ", ") + " ports",
		Long: `switch connects network namespaces, containers, VMs and other hosts
through ports of the kinds below: routed ones, which carry IP packets
(tun; vxlan with mode=l3), or bridged ones, which carry Ethernet frames
(tap, vhost-user, vxlan). Routed ports go through the L3 forwarder
(static routes first, then source addresses learned per port where no
route covers them; TTL is decremented); bridged ports through a learning
bridge by MAC address. A routed guest cannot impersonate another: it may
send only from the prefixes routed to it, and learning never overrides a
route. A bridged port, like a port of the kernel's bridge, takes any source address and MAC (allow=any, no MAC
lock) until mac= and allow= lock it, as in
tap:vm1,mac=02:00:00:00:00:07,allow=198.18.7.1+2001:db8:7::1. No guest
may advertise itself as an IPv6 router or answer DHCP unless router=on or
dhcp-server=on. Addresses inside the guests are the operator's business:
configure them with ip(8) once the switch has created the devices.

` + vswitch.PortHelp() + `
A service is a built-in application the switch runs on a zero-copy
endpoint (package endpoint), answering guests at ADDR:PORT, which is
routed to it: udp-echo:ADDR:PORT sends every datagram back to its source
(payloads up to 2020 bytes), udp-sink:ADDR:PORT counts them.

A filter rule is "allow" or "deny" followed by any of src=PREFIX,
dst=PREFIX, proto=tcp|udp|icmp|icmpv6|NUMBER, sport=PORT[-PORT] and
dport=PORT[-PORT] (ports need proto=tcp or udp). Rules are tried in order
and the first that matches an IP packet decides; a packet no rule matches
passes, so end with a bare "deny" for a default-deny policy. Denied
packets are dropped and counted as FILTER. ARP passes untouched.

The configuration file (--config) has one directive per line, '#' starts
a comment, and flags add to what it says:
` + vswitch.Directives + `
  FLAG VALUE         any other flag of softnet switch but --config and
                     --state-reset, as busy-poll 50us, cpus 2,3,
                     metrics 127.0.0.1:9477, control-group softnet,
                     log-level debug ("" is an empty value: control "")
A flag given on the command line wins over the file's setting; --port,
--route, --service and --filter add to the file's. So a service's
command line is softnet switch --config FILE (contrib/softnet.service).
Every bad line is reported with its file and line.

On SIGHUP the switch reads --config FILE again and makes its own ports
and routes what the file and the command line's flags say, as at start:
those that are gone are removed, new ones added (those added with softnet
ctl are never touched: where the file names one, the one softnet ctl made
is kept and the conflict logged), a port whose spec changed is
changed in place where its kind takes the change live (see the kinds
above), else removed and added again; traffic between the ports that
stay goes on.
Each change is logged ("config reloaded"). A file with an error, or one
that changes workers, services, filters or a flag's setting (these need
a restart), changes nothing and the error is logged with its file and
line. Without
--config, SIGHUP is logged and ignored.

On SIGINT or SIGTERM the switch stops within 2 s, closes every port,
prints per-port statistics, drops by reason and the buffer leak check, and
exits non-zero if buffers leaked. Needs root (CAP_NET_ADMIN).`,
		Example: `  ip netns add guest1; ip netns add guest2
  softnet switch --port tun:sn0,netns=guest1 --port tun:sn1,netns=guest2 \
      --route 198.18.1.0/24=sn0 --route 198.18.2.0/24=sn1 \
      --filter "deny proto=udp dport=53"`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				// Most often the rest of a filter rule given unquoted.
				return usageError{fmt.Errorf("unexpected argument %q: each flag takes one value; quote a rule with spaces: --filter \"deny proto=udp dport=53\"", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if workers < 1 || workers > vswitch.MaxWorkers {
				return usageError{fmt.Errorf("--workers %d: want 1 to %d", workers, vswitch.MaxWorkers)}
			}
			// SIGHUP's default ends the process: caught from the start,
			// it is handled once the switch runs.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			flags := switchFlags{ports: ports, routes: routes, services: services, filters: filters}
			if cmd.Flags().Changed("workers") {
				flags.workers = workers
			}
			// The file's settings (its flags) are set at start; a reload
			// that changes one is refused: they take a restart.
			settings := newFileSettings(cmd.Flags())
			load := func() (vswitch.Config, error) {
				cfg, err := loadConfig(configFile, flags, settings.settings())
				if err == nil {
					err = settings.removed(configFile)
				}
				if err == nil && cfg.Workers == 0 {
					cfg.Workers = workers
				}
				return cfg, err
			}
			cfg, err := load()
			if err != nil {
				return usageError{err}
			}
			settings.started = true
			// The flags, the file's settings among them, before the ports:
			// what they say is wrong whatever the ports.
			addr, err := metricsListenAddr(metricsAddr)
			if err != nil {
				return usageError{err}
			}
			if busyPoll < 0 || busyPoll > vswitch.MaxBusyPoll {
				return usageError{fmt.Errorf("--busy-poll %v: want 0 to %v", busyPoll, vswitch.MaxBusyPoll)}
			}
			cpuList, err := vswitch.ParseCPUs(cpus)
			if err == nil {
				err = vswitch.CheckCPUs(cpuList)
			}
			if err != nil {
				return usageError{fmt.Errorf("--cpus %s: %w", cpus, err)}
			}
			if controlGroup != "" && controlPath == "" {
				return usageError{errors.New(`--control-group: there is no control socket (--control "")`)}
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			if len(cfg.Ports) < 2 && controlPath == "" {
				return usageError{fmt.Errorf("%d ports: a switch needs at least two, or --control to receive them while it runs", len(cfg.Ports))}
			}
			// Found out now, not after a day of forwarding.
			var statsFile *os.File
			if statsJSON != "" {
				f, err := os.OpenFile(statsJSON, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
				if err != nil {
					return usageError{fmt.Errorf("--stats-json: %w", err)}
				}
				defer f.Close()
				statsFile = f
			}
			log, err := newLogger(cmd.ErrOrStderr(), logFormat, logLevel)
			if err != nil {
				return usageError{err}
			}
			// The listeners first: they fail fast, before any device exists.
			var lns []net.Listener
			defer func() {
				for _, ln := range lns {
					ln.Close()
				}
			}()
			var apiLn, metricsLn net.Listener
			if controlPath != "" {
				gid := -1
				if controlGroup != "" {
					if gid, err = unixsock.LookupGroup(controlGroup); err != nil {
						return usageError{fmt.Errorf("--control-group: %w", err)}
					}
				}
				if apiLn, err = control.Listen(controlPath, gid); err != nil {
					return err
				}
				lns = append(lns, apiLn)
			}
			if metricsAddr != "" {
				if metricsLn, err = net.Listen("tcp", addr); err != nil {
					return fmt.Errorf("--metrics: %w", err)
				}
				lns = append(lns, metricsLn)
			}
			// The state last: a switch that cannot take its state file
			// (another switch holds it, it is bad) starts nothing.
			if !cmd.Flags().Changed("state") && !settings.gave("state") && controlPath == control.DefaultSocket {
				statePath = DefaultState
			}
			var st *switchState
			if statePath != "" {
				if st, err = openState(statePath, stateReset, log); err != nil {
					return err
				}
				defer st.file.Close()
			} else if stateReset {
				return usageError{errors.New("--state-reset: there is no state file (--state \"\")")}
			}
			t := vswitch.Tuning{BusyPoll: busyPoll, CPUs: cpus, Persist: st != nil}
			if busyPoll == 0 {
				t.BusyPoll = -1 // off, where Tuning's zero is the default
			}
			if st != nil {
				if cfg, err = st.merge(cfg, log); err != nil {
					return err
				}
				t.Restore = true
			}
			sw, err := vswitch.Open(cfg, t, log)
			if err != nil {
				return err
			}
			if err := sw.Start(); err != nil {
				_, cerr := sw.Close()
				return errors.Join(err, cerr)
			}
			if st != nil {
				if err := st.restored(sw, log); err != nil {
					_, cerr := sw.Close()
					return errors.Join(err, cerr)
				}
			}
			stopReq := make(chan bool, 1) // POST /v1/shutdown: keep guests?
			stop := func(keep bool) error {
				if keep && st == nil {
					return errors.New("--keep-guests needs a switch with a state file (--state): the next switch finds the devices to adopt there")
				}
				select {
				case stopReq <- keep:
				default: // asked already
				}
				return nil
			}
			servers := serve(sw, apiLn, metricsLn, stop, log)
			keep := false
			for running := true; running; {
				select {
				case <-cmd.Context().Done():
					running = false
				case keep = <-stopReq:
					running = false
				case <-hup:
					reload(sw, configFile, load, log)
				}
			}
			// The servers read the switch's counters: they stop first.
			shutdown(servers)
			if st != nil {
				st.stopping(sw, keep, log)
			}
			rep, err := sw.Close()
			if rep == nil {
				return err
			}
			errs := []error{err, rep.WriteText(cmd.OutOrStdout())}
			if statsFile != nil {
				errs = append(errs, writeJSON(statsFile, rep))
			}
			if rep.Leaked > 0 {
				errs = append(errs, fmt.Errorf("%d buffers leaked", rep.Leaked))
			}
			if err := errors.Join(errs...); err != nil {
				return &exitError{code: exitFailure, err: err}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&ports, "port", nil, "a port: "+vswitch.PortUsage())
	f.StringArrayVar(&routes, "route", nil, vswitch.RouteUsage())
	f.StringArrayVar(&services, "service", nil, "a built-in service: udp-echo:ADDR:PORT or udp-sink:ADDR:PORT (tun ports)")
	f.StringArrayVar(&filters, "filter", nil, `a filter rule, e.g. "deny proto=udp dport=53" (see above)`)
	f.IntVar(&workers, "workers", 1, "worker goroutines (each polls one queue of every port)")
	f.StringVar(&cpus, "cpus", "", "pin the workers to these CPUs, worker i to the i-th (e.g. 0 or 2,3 or 2-5); for vhost-user ports, CPUs the VMs do not use")
	f.StringVar(&configFile, "config", "", "read the configuration from FILE: ports, routes, services, filters, workers and any other flag (flags given here win)")
	f.StringVar(&statsJSON, "stats-json", "", "also write the final statistics as JSON to FILE")
	f.DurationVar(&busyPoll, "busy-poll", vswitch.DefaultBusyPoll, "after finding work, a worker keeps polling this long before it sleeps (0: sleep after a few empty rounds)")
	f.StringVar(&controlPath, "control", control.DefaultSocket, `serve the control API (softnet ctl) on this Unix socket, mode 0660; "" for none`)
	f.StringVar(&controlGroup, "control-group", "", "give the control socket this group (name or ID), whose members may then use softnet ctl without root")
	f.StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics at http://ADDR/metrics: HOST:PORT (e.g. 127.0.0.1:9477), or PORT alone for every address (:PORT)")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&statePath, "state", "", `keep the ports and routes added with softnet ctl in FILE, durably, and restore them at start (default `+DefaultState+` with the default --control; "" for none)`)
	f.BoolVar(&stateReset, "state-reset", false, "start without the state file's ports and routes, moving the file aside to FILE.bad-TIME")
	return cmd
}

// metricsListenAddr is the address --metrics listens on: HOST:PORT as
// given, a bare PORT as :PORT (every address, as node_exporter's
// :9100), which net.Listen would refuse with "missing port in address".
func metricsListenAddr(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if n, err := strconv.ParseUint(s, 10, 16); err == nil {
		if n == 0 {
			return "", fmt.Errorf("--metrics %s: want a port from 1 to 65535", s)
		}
		return ":" + s, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("--metrics %q: want HOST:PORT, [IPv6]:PORT or PORT, e.g. 127.0.0.1:9477", s)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return "", fmt.Errorf("--metrics %q: port %q: want 1 to 65535", s, port)
	}
	return net.JoinHostPort(host, port), nil
}

// switchFlags are the command line's additions to the configuration
// file.
type switchFlags struct {
	ports, routes, services, filters []string
	workers                          int // 0: not given
}

// parseEach appends to list each of a flag's values, parsed.
func parseEach[T any](list []T, flag string, vals []string, parse func(string) (T, error)) ([]T, error) {
	for _, s := range vals {
		v, err := parse(s)
		if err != nil {
			return list, fmt.Errorf("%s: %w", flag, err)
		}
		list = append(list, v)
	}
	return list, nil
}

// fileSettings are the flags of softnet switch that a configuration
// file gives as directives of their own name ("busy-poll 50us"): every
// flag but --config and those that are the switch's own directives
// (port, route, service, filter, workers). A flag the command line gave
// wins over the file's.
type fileSettings struct {
	flags *pflag.FlagSet
	// started: the switch runs with the values set at start; a reload
	// only checks that the file still says them.
	started bool
	values  map[string]string // as the file gave them at start
	seen    map[string]string // as the last reading gave them
}

func newFileSettings(fs *pflag.FlagSet) *fileSettings {
	return &fileSettings{flags: fs, values: map[string]string{}}
}

// names are the flags a file may give, by name.
func (s *fileSettings) names() []string {
	var out []string
	s.flags.VisitAll(func(f *pflag.Flag) {
		switch f.Name {
		case "config", "help", "port", "route", "service", "filter", "workers":
		case "state-reset":
			// An action, once, not a setting: in the file it would throw
			// the state away at every start.
		default:
			out = append(out, f.Name)
		}
	})
	return out
}

// settings are the file's settings for vswitch.ParseConfigWith. A
// value is one field; "" is the empty value (control "", no socket).
func (s *fileSettings) settings() *vswitch.Settings {
	s.seen = map[string]string{}
	seen := s.seen
	return &vswitch.Settings{Names: s.names(), Set: func(name string, vals []string) error {
		f := s.flags.Lookup(name)
		if len(vals) != 1 {
			return fmt.Errorf("want one value after %q (as --%s takes it), got %d", name, name, len(vals))
		}
		v := vals[0]
		if v == `""` {
			v = ""
		}
		if _, twice := seen[name]; twice {
			return fmt.Errorf("%s given twice", name)
		}
		seen[name] = v
		switch {
		case s.started:
			if old, ok := s.values[name]; !ok || old != v {
				return fmt.Errorf("%s %q: the switch runs with %q; a setting changes with a restart, not a reload", name, v, s.flagValue(name))
			}
		case f.Changed:
			s.values[name] = v // the command line's value wins
		default:
			if err := f.Value.Set(v); err != nil {
				return fmt.Errorf("%s %q: %w", name, v, err)
			}
			s.values[name] = v
		}
		return nil
	}}
}

// removed reports a setting the file gave at start and the last reading
// did not: it too would take a restart.
func (s *fileSettings) removed(file string) error {
	if !s.started {
		return nil
	}
	for _, name := range s.names() {
		if _, was := s.values[name]; was {
			if _, is := s.seen[name]; !is {
				return fmt.Errorf("%s: %s is gone from the file: the switch runs with %q; a setting changes with a restart, not a reload", file, name, s.flagValue(name))
			}
		}
	}
	return nil
}

// gave reports whether the file gave the setting name at start.
func (s *fileSettings) gave(name string) bool {
	_, ok := s.values[name]
	return ok
}

// flagValue is the value the switch runs with.
func (s *fileSettings) flagValue(name string) string { return s.flags.Lookup(name).Value.String() }

// loadConfig reads file (none if "") and adds the flags to it; the
// configuration is not validated yet. Errors name the file's line or
// the flag. settings (nil: none) take the file's settings.
func loadConfig(file string, fl switchFlags, settings *vswitch.Settings) (vswitch.Config, error) {
	var cfg vswitch.Config
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return cfg, err
		}
		cfg, err = vswitch.ParseConfigWith(file, f, settings)
		f.Close()
		if err != nil {
			return cfg, err
		}
	}
	var errs [4]error
	cfg.Ports, errs[0] = parseEach(cfg.Ports, "--port", fl.ports, vswitch.ParsePort)
	cfg.Routes, errs[1] = parseEach(cfg.Routes, "--route", fl.routes, vswitch.ParseRoute)
	cfg.Services, errs[2] = parseEach(cfg.Services, "--service", fl.services, vswitch.ParseService)
	cfg.Filters, errs[3] = parseEach(cfg.Filters, "--filter", fl.filters, program.ParseRule)
	for _, err := range errs {
		if err != nil {
			return cfg, err
		}
	}
	if fl.workers != 0 {
		cfg.Workers = fl.workers
	}
	return cfg, nil
}

// reload is SIGHUP: the configuration load gives (file and flags)
// applied to the running switch, each change logged; on an error,
// nothing changes (but for what Apply says it changed before one).
func reload(sw *vswitch.Switch, file string, load func() (vswitch.Config, error), log *slog.Logger) {
	if file == "" {
		log.Info("SIGHUP: nothing to reload: the switch was started without --config")
		return
	}
	cfg, err := load()
	if err != nil {
		log.Error("config reload failed; nothing was changed", "file", file, "err", err)
		return
	}
	by := vswitch.BySignal("SIGHUP")
	changes, err := sw.Apply(cfg, by)
	for _, c := range changes {
		log.Info("config reloaded", "file", file, "change", c, by)
	}
	if err != nil {
		log.Error("config reload failed", "file", file, "err", err)
		return
	}
	if len(changes) == 0 {
		log.Info("config reloaded: nothing changed", "file", file)
	}
}

// serve starts the API and metrics servers on the listeners given.
func serve(sw *vswitch.Switch, apiLn, metricsLn net.Listener, stop func(keepGuests bool) error, log *slog.Logger) (servers []interface{ Shutdown(context.Context) error }) {
	if apiLn != nil {
		api := control.NewServer(sw, log)
		api.OnShutdown(stop)
		go func() {
			if err := api.Serve(apiLn); err != nil {
				log.Error("control API", "err", err)
			}
		}()
		servers = append(servers, api)
		log.Info("control API", "socket", apiLn.Addr().String())
	}
	if metricsLn != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", control.MetricsHandler(sw))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
		go func() {
			if err := srv.Serve(metricsLn); !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics", "err", err)
			}
		}()
		servers = append(servers, srv)
		log.Info("metrics", "url", "http://"+metricsLn.Addr().String()+"/metrics")
	}
	return servers
}

func shutdown(servers []interface{ Shutdown(context.Context) error }) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(ctx) // past the deadline the listeners are closed anyway
	}
}

// newLogger returns the structured logger --log-format and --log-level
// ask for.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func writeJSON(f *os.File, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("--stats-json: %w", err)
	}
	return nil
}
