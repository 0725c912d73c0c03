package vswitch

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// PortSpec is one --port argument:
// kind:NAME[,netns=NS][,queues=N][,offload=on|off][,gro=on|off].
type PortSpec struct {
	TAP     bool
	Name    string
	NetNS   string
	Queues  int  // 0: one per worker
	Offload bool // default on
	GRO     bool // default on with offload; needs it
}

func (p PortSpec) String() string {
	kind := "tun"
	if p.TAP {
		kind = "tap"
	}
	s := kind + ":" + p.Name
	if p.NetNS != "" {
		s += ",netns=" + p.NetNS
	}
	if p.Queues > 0 {
		s += ",queues=" + strconv.Itoa(p.Queues)
	}
	if !p.Offload {
		s += ",offload=off"
	} else if !p.GRO {
		s += ",gro=off"
	}
	return s
}

// RouteSpec is one --route argument: PREFIX=PORT, PORT a port's name.
type RouteSpec struct {
	Prefix netip.Prefix
	Port   string
}

// Config is everything `softnet switch` needs.
type Config struct {
	Ports    []PortSpec
	Routes   []RouteSpec
	Services []ServiceSpec
	Workers  int // default 1
}

// ParsePort parses a --port value.
func ParsePort(s string) (PortSpec, error) {
	kind, rest, ok := strings.Cut(s, ":")
	spec := PortSpec{Offload: true, GRO: true}
	groSet := false
	switch {
	case !ok:
		return spec, fmt.Errorf("port %q: want tun:NAME or tap:NAME", s)
	case kind == "tap":
		spec.TAP = true
	case kind != "tun":
		return spec, fmt.Errorf("port %q: unknown kind %q (tun or tap)", s, kind)
	}
	fields := strings.Split(rest, ",")
	spec.Name = fields[0]
	if err := checkIfName(spec.Name); err != nil {
		return spec, fmt.Errorf("port %q: %w", s, err)
	}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok || v == "" {
			return spec, fmt.Errorf("port %q: option %q: want key=value", s, f)
		}
		switch k {
		case "netns":
			if strings.ContainsAny(v, "/\x00") || v == "." || v == ".." {
				return spec, fmt.Errorf("port %q: bad netns name %q", s, v)
			}
			spec.NetNS = v
		case "queues":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 256 {
				return spec, fmt.Errorf("port %q: queues %q: want 1 to 256", s, v)
			}
			spec.Queues = n
		case "offload", "gro":
			on := v == "on"
			if !on && v != "off" {
				return spec, fmt.Errorf("port %q: %s %q: want on or off", s, k, v)
			}
			if k == "offload" {
				spec.Offload = on
			} else {
				spec.GRO, groSet = on, true
			}
		default:
			return spec, fmt.Errorf("port %q: unknown option %q (netns, queues, offload, gro)", s, k)
		}
	}
	if !spec.Offload {
		if groSet && spec.GRO {
			return spec, fmt.Errorf("port %q: gro=on needs offload=on: without a vnet header the device cannot take GSO packets", s)
		}
		spec.GRO = false
	}
	return spec, nil
}

func checkIfName(n string) error {
	if n == "" || len(n) > 15 || strings.ContainsAny(n, "/ :,=\x00\t") || n == "." || n == ".." {
		return fmt.Errorf("bad device name %q (1 to 15 bytes, no '/', ':', ',', '=' or spaces)", n)
	}
	return nil
}

// ParseRoute parses a --route value.
func ParseRoute(s string) (RouteSpec, error) {
	pfx, name, ok := strings.Cut(s, "=")
	if !ok {
		return RouteSpec{}, fmt.Errorf("route %q: want PREFIX=PORT", s)
	}
	p, err := netip.ParsePrefix(pfx)
	if err != nil {
		return RouteSpec{}, fmt.Errorf("route %q: %w", s, err)
	}
	if err := checkIfName(name); err != nil {
		return RouteSpec{}, fmt.Errorf("route %q: %w", s, err)
	}
	return RouteSpec{Prefix: p.Masked(), Port: name}, nil
}

// ParseConfig reads a configuration file: one directive per line,
// `port SPEC`, `route PREFIX=PORT` or `workers N`; blank lines and
// everything after '#' are ignored. Errors name the file and line.
func ParseConfig(name string, r io.Reader) (Config, error) {
	var cfg Config
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		fail := func(err error) (Config, error) { return cfg, fmt.Errorf("%s:%d: %w", name, line, err) }
		if len(f) != 2 {
			return fail(fmt.Errorf("want one value after %q, got %d", f[0], len(f)-1))
		}
		switch f[0] {
		case "port":
			p, err := ParsePort(f[1])
			if err != nil {
				return fail(err)
			}
			cfg.Ports = append(cfg.Ports, p)
		case "route":
			rt, err := ParseRoute(f[1])
			if err != nil {
				return fail(err)
			}
			cfg.Routes = append(cfg.Routes, rt)
		case "service":
			sv, err := ParseService(f[1])
			if err != nil {
				return fail(err)
			}
			cfg.Services = append(cfg.Services, sv)
		case "workers":
			n, err := strconv.Atoi(f[1])
			if err != nil || n < 1 {
				return fail(fmt.Errorf("workers %q: want a positive number", f[1]))
			}
			cfg.Workers = n
		default:
			return fail(fmt.Errorf("unknown directive %q (port, route, service, workers)", f[0]))
		}
	}
	if err := sc.Err(); err != nil {
		return cfg, fmt.Errorf("%s: %w", name, err)
	}
	return cfg, nil
}

// Validate checks the configuration as a whole.
func (cfg *Config) Validate() error {
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.Workers < 1 || cfg.Workers > 256 {
		return fmt.Errorf("workers %d: want 1 to 256", cfg.Workers)
	}
	if len(cfg.Ports) < 2 {
		return fmt.Errorf("%d ports: a switch needs at least two", len(cfg.Ports))
	}
	names := map[string]bool{}
	tap, tun := 0, 0
	for _, p := range cfg.Ports {
		// Routes and stats name ports by device name, so names are unique
		// even across namespaces.
		if names[p.Name] {
			return fmt.Errorf("port %s: a port named %s is given twice", p, p.Name)
		}
		names[p.Name] = true
		if p.TAP {
			tap++
		} else {
			tun++
		}
		if p.Queues != 0 && p.Queues < cfg.Workers {
			return fmt.Errorf("port %s: %d queues for %d workers: each worker needs a queue of every port", p, p.Queues, cfg.Workers)
		}
	}
	if tap > 0 && tun > 0 {
		return fmt.Errorf("mixing tun and tap ports is not supported: TUN ports carry IP packets and are routed by the L3 forwarder, TAP ports carry Ethernet frames and are bridged; connecting them would need the switch to add and strip Ethernet headers and answer ARP and neighbour discovery for the TUN side")
	}
	for _, rt := range cfg.Routes {
		if tap > 0 {
			return fmt.Errorf("route %s=%s: routes apply to tun ports; tap ports are bridged by MAC address", rt.Prefix, rt.Port)
		}
		if !cfg.hasPort(rt.Port) {
			return fmt.Errorf("route %s=%s: no such port", rt.Prefix, rt.Port)
		}
	}
	seen := map[netip.AddrPort]bool{}
	for _, sv := range cfg.Services {
		if tap > 0 {
			return fmt.Errorf("service %s: services answer on tun ports (the L3 forwarder routes to them)", sv)
		}
		if seen[sv.Addr] {
			return fmt.Errorf("service %s: address given twice", sv)
		}
		seen[sv.Addr] = true
	}
	return nil
}

func (cfg *Config) hasPort(name string) bool {
	for _, p := range cfg.Ports {
		if p.Name == name {
			return true
		}
	}
	return false
}
