package vswitch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"softnet.dev/program"
	"softnet.dev/tun"
	"softnet.dev/vhostuser"
	"softnet.dev/vxlan"
)

// PortSpec is one --port argument:
// kind:NAME[,netns=NS][,dev=IFNAME][,queues=N][,offload=on|off][,gro=on|off][,io=uring|syscall]
// [,allow=any|none|PREFIX[+PREFIX...]][,mac=MAC[+MAC...]][,dhcp-server=on|off]
// [,router=on|off], kind tun or tap; vhost-user:NAME,socket=PATH
// [,mode=server|client] with queues, offload and the port security
// options; or a VXLAN overlay port,
// vxlan:NAME,vni=N,local=IP[:PORT],remote=IP[,remote=IP...]
// [,fdb=MAC@REMOTE...][,port=N][,srcports=MIN-MAX][,netns=NS][,queues=N]
// and the policy options, whose namespace is the underlay's.
type PortSpec struct {
	// TAP says the port carries Ethernet frames and is bridged: a TAP
	// device, or with VhostUser a vhost-user port.
	TAP bool
	// VhostUser is a vhost-user port (package vhostuser) listening on
	// Socket for a VM's front-end, instead of a TAP device.
	VhostUser bool
	Socket    string
	// Client: the vhost-user port connects to the front-end's socket
	// (mode=client) instead of listening on it (mode=server, the
	// default).
	Client bool
	Name   string
	// VXLAN is a vxlan: port, which is bridged like a TAP port. Its
	// overlay is VNI, Local (port 0: DstPort), Remotes and DstPort
	// (port=; 0: vxlan.DefaultPort).
	VXLAN   bool
	VNI     uint32
	Local   netip.AddrPort
	Remotes []netip.Addr
	DstPort uint16
	// SrcPorts are the outer source ports (srcports=MIN-MAX; zero:
	// the kernel's ephemeral range, as vxlan.Config's defaults).
	SrcPorts [2]uint16
	// Static are the fdb=MAC@REMOTE entries: stations whose remote is
	// known, never learned over or aged; a routed port's remote VTEP MACs.
	Static []vxlan.StaticEntry
	// L3 (mode=l3) makes a routed overlay port, routed like a tun port
	// (route PREFIX=NAME,via=REMOTE), a VTEP whose MAC is VTEPMAC
	// (vtep-mac=).
	L3      bool
	VTEPMAC [6]byte
	NetNS   string // a name as `ip netns` takes it, or a namespace file's absolute path
	Queues  int    // 0: one per worker
	Offload bool   // default on
	GRO     bool   // default on with offload; needs it
	IO      tun.IO // default tun.IOAuto: io_uring where the kernel has it
	// Allow is the set of source addresses the guest may send from; nil
	// is the default: the prefixes routed to a TUN port, any address on
	// a TAP port (whose guests are bridged, not routed).
	Allow *program.Allow
	// MACs locks a TAP port's source MACs (empty: any).
	MACs [][6]byte
	// DHCPServer lets the guest answer DHCP; off by default.
	DHCPServer bool
	// Router lets the guest send IPv6 router advertisements and
	// redirects; off by default.
	Router bool
	// Dev is the device's name in its namespace when it differs from the
	// port's: port names are unique in the switch, device names only in
	// their namespace (a CNI plugin gives every container an eth0).
	Dev string

	at string // "file:line" of a configuration file's directive, for errors
}

func (p PortSpec) String() string {
	kind := "tun"
	switch {
	case p.VhostUser:
		kind = "vhost-user"
	case p.VXLAN:
		kind = "vxlan"
	case p.TAP:
		kind = "tap"
	}
	s := kind + ":" + p.Name
	if p.VhostUser {
		s += ",socket=" + p.Socket
		if p.Client {
			s += ",mode=client"
		}
	}
	if p.VXLAN {
		s += fmt.Sprintf(",vni=%d,local=", p.VNI)
		if p.Local.Port() != 0 {
			s += p.Local.String()
		} else {
			s += p.Local.Addr().String()
		}
		for _, r := range p.Remotes {
			s += ",remote=" + r.String()
		}
		if p.DstPort != 0 {
			s += ",port=" + strconv.Itoa(int(p.DstPort))
		}
		for _, e := range p.Static {
			s += ",fdb=" + net.HardwareAddr(e.MAC[:]).String() + "@" + e.Remote.String()
		}
		if p.L3 {
			s += ",mode=l3,vtep-mac=" + net.HardwareAddr(p.VTEPMAC[:]).String()
		}
		if p.SrcPorts != [2]uint16{} {
			s += fmt.Sprintf(",srcports=%d-%d", p.SrcPorts[0], p.SrcPorts[1])
		}
	}
	if p.NetNS != "" {
		s += ",netns=" + p.NetNS
	}
	if p.Dev != "" {
		s += ",dev=" + p.Dev
	}
	if p.Queues > 0 {
		s += ",queues=" + strconv.Itoa(p.Queues)
	}
	if !p.VXLAN && !p.Offload {
		s += ",offload=off"
	} else if !p.VXLAN && !p.VhostUser && !p.GRO {
		s += ",gro=off"
	}
	if p.IO != tun.IOAuto {
		s += ",io=" + p.IO.String()
	}
	if p.Allow != nil {
		s += ",allow=" + p.Allow.String()
	}
	if len(p.MACs) > 0 {
		s += ",mac=" + FormatMACs(p.MACs)
	}
	if p.DHCPServer {
		s += ",dhcp-server=on"
	}
	if p.Router {
		s += ",router=on"
	}
	return s
}

// RouteSpec is one --route argument: PREFIX=PORT[,via=REMOTE], PORT a
// port's name, REMOTE the remote VTEP of a routed vxlan port.
type RouteSpec struct {
	Prefix netip.Prefix
	Port   string
	Via    netip.Addr

	at string
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

// ParsePort parses a --port value.
func ParsePort(s string) (PortSpec, error) {
	kind, rest, ok := strings.Cut(s, ":")
	spec := PortSpec{Offload: true, GRO: true}
	groSet, vniSet := false, false
	switch {
	case !ok:
		return spec, fmt.Errorf("port %q: want tun:NAME, tap:NAME, vhost-user:NAME,socket=PATH or vxlan:NAME,vni=N,local=IP,remote=IP", s)
	case kind == "tap":
		spec.TAP = true
	case kind == "vhost-user":
		spec.TAP, spec.VhostUser, spec.GRO = true, true, false
	case kind == "vxlan":
		spec.VXLAN = true
	case kind != "tun":
		return spec, fmt.Errorf("port %q: unknown kind %q (tun, tap, vhost-user or vxlan)", s, kind)
	}
	fields := strings.Split(rest, ",")
	spec.Name = fields[0]
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok || v == "" {
			return spec, fmt.Errorf("port %q: option %q: want key=value", s, f)
		}
		vniSet = vniSet || k == "vni"
		if handled, err := spec.parseVXLANOption(k, v); handled || err != nil {
			if err != nil {
				return spec, fmt.Errorf("port %q: %w", s, err)
			}
			continue
		}
		if spec.VhostUser && (k == "netns" || k == "dev" || k == "gro" || k == "io") {
			return spec, fmt.Errorf("port %q: %s= applies to tun and tap devices, not to vhost-user ports", s, k)
		}
		if spec.VXLAN && (k == "offload" || k == "gro" || k == "io" || k == "dev") {
			return spec, fmt.Errorf("port %q: %s= applies to tun and tap ports", s, k)
		}
		switch k {
		case "socket", "mode":
			if !spec.VhostUser {
				return spec, fmt.Errorf("port %q: %s= applies to vhost-user ports", s, k)
			}
			if k == "socket" {
				spec.Socket = v
				break
			}
			if v != "server" && v != "client" {
				return spec, fmt.Errorf("port %q: mode %q: want server or client", s, v)
			}
			spec.Client = v == "client"
		case "netns":
			spec.NetNS = v
		case "dev":
			spec.Dev = v
		case "queues":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return spec, fmt.Errorf("port %q: queues %q: want a positive number", s, v)
			}
			spec.Queues = n
		case "offload", "gro", "dhcp-server", "router":
			on := v == "on"
			if !on && v != "off" {
				return spec, fmt.Errorf("port %q: %s %q: want on or off", s, k, v)
			}
			switch k {
			case "offload":
				spec.Offload = on
			case "gro":
				spec.GRO, groSet = on, true
			case "dhcp-server":
				spec.DHCPServer = on
			default:
				spec.Router = on
			}
		case "io":
			if err := spec.IO.UnmarshalText([]byte(v)); err != nil {
				return spec, fmt.Errorf("port %q: %w", s, err)
			}
		case "allow":
			a, err := parseAllow(v)
			if err != nil {
				return spec, fmt.Errorf("port %q: %w", s, err)
			}
			spec.Allow = &a
		case "mac":
			if !spec.TAP && !spec.VXLAN {
				return spec, fmt.Errorf("port %q: mac= applies to tap ports: tun ports carry no MAC addresses", s)
			}
			m, err := parseMACs(v)
			if err != nil {
				return spec, fmt.Errorf("port %q: %w", s, err)
			}
			spec.MACs = m
		default:
			opts := "netns, dev, queues, offload, gro, io, allow, mac, dhcp-server, router"
			switch {
			case spec.VXLAN:
				opts = "vni, local, remote, fdb, port, srcports, mode, vtep-mac, netns, queues, allow, mac, dhcp-server, router"
			case spec.VhostUser:
				opts = "socket, mode, queues, offload, allow, mac, dhcp-server, router"
			}
			return spec, fmt.Errorf("port %q: unknown option %q (%s)", s, k, opts)
		}
	}
	if spec.VhostUser {
		if spec.Socket == "" {
			return spec, fmt.Errorf("port %q: a vhost-user port needs socket=PATH", s)
		}
		if err := spec.vhostUser(spec.Queues).Validate(); err != nil {
			return spec, fmt.Errorf("port %q: %w", s, err)
		}
		return spec, nil
	}
	if spec.VXLAN {
		if !vniSet {
			return spec, fmt.Errorf("port %q: vxlan ports need vni=N", s)
		}
		if err := spec.validate(max(spec.Queues, 1)); err != nil {
			return spec, fmt.Errorf("port %q: %w", s, err)
		}
		return spec, nil
	}
	if !spec.Offload {
		if groSet && spec.GRO {
			return spec, fmt.Errorf("port %q: gro=on needs offload=on: without a vnet header the device cannot take GSO packets", s)
		}
		spec.GRO = false
	}
	// The device's own rules (name, namespace, queues) are package tun's.
	if err := spec.validate(spec.Queues); err != nil {
		return spec, fmt.Errorf("port %q: %w", s, err)
	}
	if spec.Dev != "" {
		// Routes name the port: its name keeps a device name's rules.
		if err := (tun.Config{Name: spec.Name}).Validate(); err != nil {
			return spec, fmt.Errorf("port %q: port name: %w", s, err)
		}
	}
	return spec, nil
}

// parseVXLANOption parses an option of a vxlan: port and reports
// whether it was one.
func (p *PortSpec) parseVXLANOption(k, v string) (bool, error) {
	switch k {
	case "mode":
		if !p.VXLAN {
			return false, nil // a vhost-user port's
		}
	case "vni", "local", "remote", "port", "srcports", "fdb", "vtep-mac":
		if !p.VXLAN {
			return true, fmt.Errorf("%s= applies to vxlan ports", k)
		}
	default:
		return false, nil
	}
	switch k {
	case "vni":
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n > vxlan.MaxVNI {
			return true, fmt.Errorf("vni %q: want 0 to %d", v, vxlan.MaxVNI)
		}
		p.VNI = uint32(n)
	case "local":
		ap, err := netip.ParseAddrPort(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
				return true, fmt.Errorf("local %q: want IP or IP:PORT ([IPv6]:PORT)", v)
			}
			ap = netip.AddrPortFrom(a, 0)
		}
		p.Local = ap
	case "remote":
		a, err := netip.ParseAddr(v)
		if err != nil {
			return true, fmt.Errorf("remote %q: want an IP address", v)
		}
		p.Remotes = append(p.Remotes, a)
	case "port":
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			return true, fmt.Errorf("port %q: want a UDP port, 1 to 65535", v)
		}
		p.DstPort = uint16(n)
	case "srcports":
		lo, hi, ok := strings.Cut(v, "-")
		a, aerr := strconv.ParseUint(lo, 10, 16)
		b, berr := strconv.ParseUint(hi, 10, 16)
		if !ok || aerr != nil || berr != nil || a == 0 || a > b {
			return true, fmt.Errorf("srcports %q: want MIN-MAX, 1 <= MIN <= MAX <= 65535", v)
		}
		p.SrcPorts = [2]uint16{uint16(a), uint16(b)}
	case "fdb":
		mac, ip, ok := strings.Cut(v, "@")
		m, merr := net.ParseMAC(mac)
		r, rerr := netip.ParseAddr(ip)
		if !ok || merr != nil || len(m) != 6 || rerr != nil {
			return true, fmt.Errorf("fdb %q: want MAC@REMOTE", v)
		}
		p.Static = append(p.Static, vxlan.StaticEntry{MAC: [6]byte(m), Remote: r})
	case "mode":
		if v != "l2" && v != "l3" {
			return true, fmt.Errorf("mode %q: want l2 (bridged) or l3 (routed)", v)
		}
		p.L3 = v == "l3"
	case "vtep-mac":
		m, err := net.ParseMAC(v)
		if err != nil || len(m) != 6 {
			return true, fmt.Errorf("vtep-mac %q: want a MAC address", v)
		}
		p.VTEPMAC = [6]byte(m)
	}
	return true, nil
}

// checkVia checks a route to the port: via= a remote with a VTEP MAC
// for a routed vxlan port, and only for one.
func (p PortSpec) checkVia(rt RouteSpec) error {
	switch {
	case !p.VXLAN && rt.Via.IsValid():
		return fmt.Errorf("route %s: via= is for routed vxlan ports", rt)
	case !p.VXLAN:
		return nil
	case !rt.Via.IsValid():
		return fmt.Errorf("route %s: a route to a vxlan port says via=REMOTE", rt)
	}
	for _, e := range p.Static {
		if e.Remote == rt.Via {
			return nil
		}
	}
	return fmt.Errorf("route %s: %v is no remote of %s with a VTEP MAC (fdb=MAC@%v)", rt, rt.Via, p.Name, rt.Via)
}

// l2 says whether the port carries Ethernet frames (tap, vxlan) and is
// bridged, rather than IP packets that are routed (tun).
func (p PortSpec) l2() bool { return p.TAP || p.VXLAN && !p.L3 }

// vxlanConfig is the overlay port a vxlan: spec opens with q queues.
func (p PortSpec) vxlanConfig(q int) vxlan.Config {
	return vxlan.Config{Name: p.Name, VNI: p.VNI, Local: p.Local, Remotes: p.Remotes, NetNS: p.NetNS, Port: p.DstPort, Queues: q,
		SrcPortMin: p.SrcPorts[0], SrcPortMax: p.SrcPorts[1], Static: p.Static, L3: p.L3, VTEPMAC: p.VTEPMAC}
}

// device is the TUN/TAP device the port opens with q queues.
func (p PortSpec) device(q int) tun.Config {
	c := tun.Config{Name: p.Name, TAP: p.TAP, NetNS: p.NetNS, Queues: q, Offload: p.Offload, GRO: p.GRO, IO: p.IO}
	if p.Dev != "" {
		c.Name, c.PortName = p.Dev, p.Name
	}
	return c
}

// vhostUser is the vhost-user port a VhostUser spec opens with q queue
// pairs.
func (p PortSpec) vhostUser(q int) vhostuser.Config {
	return vhostuser.Config{Name: p.Name, Socket: p.Socket, Client: p.Client, Queues: q, Offload: p.Offload}
}

// validate checks the port's own rules with q queues: package tun's,
// vhostuser's or vxlan's.
func (p PortSpec) validate(q int) error {
	switch {
	case p.VhostUser:
		return p.vhostUser(q).Validate()
	case p.VXLAN:
		// Routes and reports name it as they name devices.
		if err := (tun.Config{Name: p.Name}).Validate(); err != nil {
			return err
		}
		return p.vxlanConfig(q).Validate()
	}
	return p.device(q).Validate()
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
			return RouteSpec{}, fmt.Errorf("route %q: via: want the remote VTEP's address", s)
		}
	}
	return rt, nil
}

// parsePrefix parses a prefix and, as ip-route(8) does, refuses one with
// host bits set: 198.18.1.1/24 is more likely a typo for a host route
// or for 198.18.1.0/24 than either.
func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
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
		if err := cfg.parseDirective(f, at); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", at, err))
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	return cfg, errors.Join(errs...)
}

func (cfg *Config) parseDirective(f []string, at string) error {
	if f[0] == "filter" {
		r, err := program.ParseRule(strings.Join(f[1:], " "))
		if err != nil {
			return err
		}
		cfg.Filters = append(cfg.Filters, r)
		return nil
	}
	if len(f) != 2 {
		return fmt.Errorf("want one value after %q, got %d", f[0], len(f)-1)
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
	default:
		return fmt.Errorf("unknown directive %q (port, route, service, filter, workers)", f[0])
	}
	return nil
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
	sockets := map[string]string{}
	tap, tun := 0, 0
	for _, p := range cfg.Ports {
		// Routes and stats name ports by device name, so names are unique
		// even across namespaces.
		if names[p.Name] {
			return in(p.at, fmt.Errorf("port %s: a port named %s is given twice", p, p.Name))
		}
		names[p.Name] = true
		if p.VhostUser {
			if other, dup := sockets[p.Socket]; dup {
				return in(p.at, fmt.Errorf("port %s: port %s listens on socket %s already", p, other, p.Socket))
			}
			sockets[p.Socket] = p.Name
		}
		if p.l2() {
			tap++
		} else {
			tun++
		}
		if p.Queues != 0 && p.Queues < cfg.Workers {
			return in(p.at, fmt.Errorf("port %s: %d queues for %d workers: each worker needs a queue of every port", p, p.Queues, cfg.Workers))
		}
		if err := p.validate(max(p.Queues, cfg.Workers)); err != nil {
			return in(p.at, fmt.Errorf("port %s: %w", p, err))
		}
	}
	if tap > 0 && tun > 0 {
		return fmt.Errorf("mixing tun and tap ports (or vxlan ports, bridged like tap ports) is not supported: TUN ports carry IP packets and are routed by the L3 forwarder, TAP ports carry Ethernet frames and are bridged; connecting them would need the switch to add and strip Ethernet headers and answer ARP and neighbour discovery for the TUN side")
	}
	routed := map[netip.Prefix]string{}
	for _, rt := range cfg.Routes {
		if tap > 0 {
			return in(rt.at, fmt.Errorf("route %s=%s: routes apply to tun ports; tap and vxlan ports are bridged by MAC address", rt.Prefix, rt.Port))
		}
		i := cfg.portIndex(rt.Port)
		if i < 0 {
			return in(rt.at, fmt.Errorf("route %s=%s: no such port", rt.Prefix, rt.Port))
		}
		if err := cfg.Ports[i].checkVia(rt); err != nil {
			return in(rt.at, err)
		}
		if other, dup := routed[rt.Prefix]; dup {
			return in(rt.at, fmt.Errorf("route %s=%s: %s is already routed to %s", rt.Prefix, rt.Port, rt.Prefix, other))
		}
		routed[rt.Prefix] = rt.Port
	}
	seen := map[netip.AddrPort]bool{}
	for _, sv := range cfg.Services {
		if tap > 0 {
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
