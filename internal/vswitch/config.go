package vswitch

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"softnet.dev/internal/iptext"
	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/packet"
	"softnet.dev/program"
	"softnet.dev/tun"
)

// RouteSpec is one --route argument: PREFIX=PORT[,via=REMOTE], PORT a
// port's name, REMOTE the next hop behind it, for a kind whose routes
// name one (portkind.Relay).
type RouteSpec struct {
	Prefix netip.Prefix
	Port   string
	Via    netip.Addr
	// Origin says who made the route; not part of its text.
	Origin Origin

	at string
}

// Origin is who made a port or a route: the configuration (its file and
// the command line's flags), which a reload makes what the file says;
// the control API; or the node agent (softnet agent, through the
// control API, saying so), which keeps its own port, routes and peers
// in step with the cluster. A reload never touches what the API or the
// agent made. Services, filters and the worker count come only from
// the configuration.
type Origin uint8

const (
	FromConfig Origin = iota
	FromAPI
	FromAgent
)

// origins are the origins' names, as the state file and the API write
// them.
var origins = [...]string{FromConfig: "config", FromAPI: "api", FromAgent: "agent"}

func (o Origin) String() string {
	if int(o) < len(origins) {
		return origins[o]
	}
	return "config"
}

// Live says whether what o made is the running switch's own, made while
// it ran (the API's, the agent's), which a reload keeps as it is.
func (o Origin) Live() bool { return o != FromConfig }

// MarshalText writes "config", "api" or "agent".
func (o Origin) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (o *Origin) UnmarshalText(b []byte) error {
	for i, name := range origins {
		if string(b) == name {
			*o = Origin(i)
			return nil
		}
	}
	return fmt.Errorf("origin %q: want config, api or agent", b)
}

// Config is everything `softnet switch` needs.
type Config struct {
	Ports    []PortSpec
	Routes   []RouteSpec
	Services []ServiceSpec
	// Filters are program.Filter rules, first match wins; a packet no
	// rule matches passes. A last rule "deny" makes the default deny.
	Filters []program.Rule
	Workers int // default 1
}

// ParseRoute parses a --route value.
func ParseRoute(s string) (RouteSpec, error) {
	pfx, rest, ok := strings.Cut(s, "=")
	if !ok {
		return RouteSpec{}, fmt.Errorf("route %q: want PREFIX=PORT", s)
	}
	p, err := parsePrefix(pfx)
	if err != nil {
		return RouteSpec{}, fmt.Errorf("route %q: %w", s, err)
	}
	name, via, hasVia := strings.Cut(rest, ",via=")
	if err := (tun.Config{Name: name}).Validate(); err != nil {
		return RouteSpec{}, fmt.Errorf("route %q: port: %w", s, err)
	}
	rt := RouteSpec{Prefix: p, Port: name}
	if hasVia {
		if rt.Via, err = netip.ParseAddr(via); err != nil {
			return RouteSpec{}, fmt.Errorf("route %q: via %q: want the remote VTEP's IP address", s, via)
		}
	}
	return rt, nil
}

// ParsePrefix parses a route's prefix, as route del names it.
func ParsePrefix(s string) (netip.Prefix, error) { return parsePrefix(s) }

// parsePrefix parses a prefix and, as ip-route(8) does, refuses one with
// host bits set: 198.18.1.1/24 is more likely a typo for a host route
// or for 198.18.1.0/24 than either.
func parsePrefix(s string) (netip.Prefix, error) {
	p, err := iptext.ParsePrefix(s)
	if err != nil {
		return p, err
	}
	if m := p.Masked(); m != p {
		return p, fmt.Errorf("%s has host bits set: the prefix is %s", s, m)
	}
	return p, nil
}

// Directives lists the configuration file's directives, as
// ParseConfig takes them.
const Directives = `  port SPEC          a port, as --port
  route PREFIX=PORT  a static route, as --route
  service SPEC       a built-in service, as --service
  filter RULE        a filter rule, as --filter (the rest of the line)
  workers N          worker goroutines, as --workers`

// maxConfigErrors bounds the errors ParseConfig reports: a file that is
// not a configuration at all should not print one line per line.
const maxConfigErrors = 20

// ParseConfig reads a configuration file: one directive per line (see
// Directives); blank lines and everything after '#' are ignored. It
// reports every bad line (up to maxConfigErrors), each with the file and
// line, and Validate's errors about a directive name its line too.
func ParseConfig(name string, r io.Reader) (Config, error) {
	return ParseConfigWith(name, r, nil)
}

// Settings are the directives of a configuration file beyond the
// switch's own (Directives): the settings of the program that runs the
// switch, as `softnet switch` takes each of its flags ("cpus 2,3" for
// --cpus 2,3), so that a service's command line is one --config.
type Settings struct {
	// Names are the settings' directives, in the order an unknown
	// directive's error lists them.
	Names []string
	// Set is given each setting's directive and its values (the rest of
	// the line, in fields); its error is reported with the file and line.
	Set func(name string, values []string) error
}

// ParseConfigWith is ParseConfig for a file that may also hold
// settings (nil: none).
func ParseConfigWith(name string, r io.Reader, settings *Settings) (Config, error) {
	var cfg Config
	var errs []error
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan() && len(errs) < maxConfigErrors; line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		at := fmt.Sprintf("%s:%d", name, line)
		var err error
		if settings != nil && slices.Contains(settings.Names, f[0]) {
			err = settings.Set(f[0], f[1:])
		} else {
			err = cfg.parseDirective(f, at, settings)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", at, err))
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	return cfg, errors.Join(errs...)
}

func (cfg *Config) parseDirective(f []string, at string, settings *Settings) error {
	if f[0] == "filter" {
		r, err := program.ParseRule(strings.Join(f[1:], " "))
		if err != nil {
			return err
		}
		cfg.Filters = append(cfg.Filters, r)
		return nil
	}
	usage, known := directiveUsage(f[0])
	if !known {
		names := "port, route, service, filter, workers"
		if settings != nil {
			names += ", " + strings.Join(settings.Names, ", ")
		}
		return fmt.Errorf("unknown directive %q (%s)", f[0], names)
	}
	if len(f) != 2 {
		return fmt.Errorf("%s: want one value (%s), got %d", f[0], usage, len(f)-1)
	}
	switch f[0] {
	case "port":
		p, err := ParsePort(f[1])
		if err != nil {
			return err
		}
		p.at = at
		cfg.Ports = append(cfg.Ports, p)
	case "route":
		rt, err := ParseRoute(f[1])
		if err != nil {
			return err
		}
		rt.at = at
		cfg.Routes = append(cfg.Routes, rt)
	case "service":
		sv, err := ParseService(f[1])
		if err != nil {
			return err
		}
		sv.at = at
		cfg.Services = append(cfg.Services, sv)
	case "workers":
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 1 || n > MaxWorkers {
			return fmt.Errorf("workers %q: want 1 to %d", f[1], MaxWorkers)
		}
		cfg.Workers = n
	}
	return nil
}

// directiveUsage returns how Directives writes the directive name, as
// "route PREFIX=PORT".
func directiveUsage(name string) (string, bool) {
	for _, line := range strings.Split(Directives, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == name {
			return f[0] + " " + f[1], true
		}
	}
	return "", false
}

// MaxWorkers bounds Config.Workers.
const MaxWorkers = 256

// in prefixes err with the file and line of a configuration file's
// directive, if it came from one.
func in(at string, err error) error {
	if at == "" {
		return err
	}
	return fmt.Errorf("%s: %w", at, err)
}

// Validate checks the configuration as a whole.
func (cfg *Config) Validate() error {
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.Workers < 1 || cfg.Workers > MaxWorkers {
		return fmt.Errorf("workers %d: want 1 to %d", cfg.Workers, MaxWorkers)
	}
	names := map[string]bool{}
	claims := map[string]string{}
	// The first routed and the first bridged port: a configuration has
	// one or the other.
	var routedPort, bridgedPort *PortSpec
	for i, p := range cfg.Ports {
		// Routes and stats name ports by device name, so names are unique
		// even across namespaces.
		if names[p.Name] {
			return in(p.at, fmt.Errorf("port %s: a port named %s is given twice", p, p.Name))
		}
		names[p.Name] = true
		o := p.Options
		if o == nil {
			return in(p.at, fmt.Errorf("port %s: no options of a kind (%s): ParsePort makes a port", p, kindList(func(k *portkind.Kind) string { return k.Name })))
		}
		if c, ok := o.(portkind.Claimer); ok {
			claim := c.Claim(p.Name, p.Common)
			if other, dup := claims[claim]; dup {
				return in(p.at, fmt.Errorf("port %s: port %s %s already", p, other, claim))
			}
			claims[claim] = p.Name
		}
		if o.Layer() == packet.L3 {
			routedPort = cmp.Or(routedPort, &cfg.Ports[i])
		} else {
			bridgedPort = cmp.Or(bridgedPort, &cfg.Ports[i])
		}
		if p.Queues != 0 && p.Queues < cfg.Workers {
			return in(p.at, fmt.Errorf("port %s: %d queues for %d workers: each worker needs a queue of every port", p, p.Queues, cfg.Workers))
		}
		if err := o.Check(p.Name, p.Common, max(p.Queues, cfg.Workers)); err != nil {
			return in(p.at, fmt.Errorf("port %s: %w", p, err))
		}
		if err := p.Pod.Validate(); err != nil {
			return in(p.at, fmt.Errorf("port %s: %w", p, err))
		}
	}
	if routedPort != nil && bridgedPort != nil {
		kinds := routedPort.Kind + " and " + bridgedPort.Kind
		if routedPort.Kind == bridgedPort.Kind {
			kinds = "routed and bridged " + routedPort.Kind
		}
		// The later of the two makes the mix: its line is the one to fix.
		at := bridgedPort.at
		if cfg.portIndex(routedPort.Name) > cfg.portIndex(bridgedPort.Name) {
			at = routedPort.at
		}
		return in(at, fmt.Errorf("mixing %s ports is not supported: port %s carries IP packets and is routed by the L3 forwarder, port %s carries Ethernet frames and is bridged; connecting them would need the switch to add and strip Ethernet headers and answer ARP and neighbour discovery for the routed side",
			kinds, routedPort.Name, bridgedPort.Name))
	}
	routed := map[netip.Prefix]string{}
	for _, rt := range cfg.Routes {
		i := cfg.portIndex(rt.Port)
		if i < 0 {
			return in(rt.at, fmt.Errorf("route %s=%s: no such port", rt.Prefix, rt.Port))
		}
		if bridgedPort != nil {
			return in(rt.at, fmt.Errorf("route %s=%s: routes apply to routed ports; %s port %s is bridged by MAC address", rt.Prefix, rt.Port, cfg.Ports[i].Kind, rt.Port))
		}
		// A route names a next hop (via=) only to a port whose kind is a
		// portkind.Relay, which checks it.
		if r, ok := cfg.Ports[i].Options.(portkind.Relay); ok {
			if err := r.CheckVia(rt.Port, rt.Via); err != nil {
				return in(rt.at, fmt.Errorf("route %s: %w", rt, err))
			}
		} else if rt.Via.IsValid() {
			return in(rt.at, fmt.Errorf("route %s: via= is for routed %s ports", rt, relayKinds()))
		}
		if other, dup := routed[rt.Prefix]; dup {
			return in(rt.at, fmt.Errorf("route %s=%s: %s is already routed to %s", rt.Prefix, rt.Port, rt.Prefix, other))
		}
		routed[rt.Prefix] = rt.Port
	}
	seen := map[netip.AddrPort]bool{}
	for _, sv := range cfg.Services {
		if bridgedPort != nil {
			return in(sv.at, fmt.Errorf("service %s: services answer on tun ports (the L3 forwarder routes to them)", sv))
		}
		if seen[sv.Addr] {
			return in(sv.at, fmt.Errorf("service %s: address given twice", sv))
		}
		seen[sv.Addr] = true
	}
	return nil
}

// clone returns a copy of cfg whose lists can change without changing
// cfg's.
func (cfg Config) clone() Config {
	cfg.Ports = slices.Clone(cfg.Ports)
	cfg.Routes = slices.Clone(cfg.Routes)
	cfg.Services = slices.Clone(cfg.Services)
	cfg.Filters = slices.Clone(cfg.Filters)
	return cfg
}

// Text returns cfg in configuration-file syntax (see Directives), which
// ParseConfig reads back as the same configuration.
func (cfg Config) Text() string {
	var b strings.Builder
	if cfg.Workers != 0 {
		fmt.Fprintf(&b, "workers %d\n", cfg.Workers)
	}
	for _, p := range cfg.Ports {
		fmt.Fprintf(&b, "port %s\n", p)
	}
	for _, r := range cfg.Routes {
		fmt.Fprintf(&b, "route %s\n", r)
	}
	for _, s := range cfg.Services {
		fmt.Fprintf(&b, "service %s\n", s)
	}
	for _, r := range cfg.Filters {
		fmt.Fprintf(&b, "filter %s\n", r)
	}
	return b.String()
}

func (r RouteSpec) String() string {
	if r.Via.IsValid() {
		return r.Prefix.String() + "=" + r.Port + ",via=" + r.Via.String()
	}
	return r.Prefix.String() + "=" + r.Port
}

// portIndex returns the index of the port named name, or -1.
func (cfg *Config) portIndex(name string) int {
	for i, p := range cfg.Ports {
		if p.Name == name {
			return i
		}
	}
	return -1
}
