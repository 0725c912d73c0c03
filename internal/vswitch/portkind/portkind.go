// Package portkind is the contract between `softnet switch` and its
// kinds of port (tun, tap, vhost-user, vxlan, each a package beside this
// one). A port is a kind, a name, the options every port has (Common)
// and the kind's own options; a kind parses and prints its own options,
// checks them, opens its ports, says which changes a running port takes
// and shows its own counters. The switch registers the kinds in one
// table (internal/vswitch's kinds.go), which its parser, help, control
// API and reload read; nothing else there knows a kind's options.
//
// The shape is the kernel's rtnl_link_ops (a link type registers its
// kind, its attributes' policy, newlink and changelink: `ip link add ...
// type vxlan id 42` hands id to vxlan alone), Open vSwitch's
// netdev_class, and Go's database/sql drivers. A kind imports this
// package and its port's package, never the switch.
package portkind

import (
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/program"
	"softnet.dev/tun"
)

// Kind is a kind of port, as the switch's table registers it.
type Kind struct {
	// Name is the kind as a spec writes it: "vxlan" in "vxlan:NAME,...".
	Name string
	// Synopsis is the shortest spec of the kind, as the switch's errors
	// list the kinds: "vxlan:NAME,vni=N,local=IP,remote=IP".
	Synopsis string
	// Help describes the kind and its own options, for `softnet switch
	// --help`: lines of at most 72 columns, each ending in a newline.
	Help string
	// Keys are the kind's own options, as an unknown option's error
	// lists them, and as the switch tells a spec of another kind that
	// gives one of them which kind it belongs to.
	Keys []string
	// Needs are options a spec of the kind must give, each with the
	// error of a spec without it.
	Needs []Need
	// GuestDevice: the kind's port is a guest's own interface, the
	// device dev= in the namespace netns=, which the switch creates if
	// it is not there (tun, tap), as the CNI plugin makes a pod's
	// interface; not a port that reaches its guests another way (a
	// socket, an overlay) or attaches to an interface that is there.
	GuestDevice bool
	// Takes are the options every port has that the kind takes; a spec
	// that gives another is refused with NotTaken, a format of the
	// option's name ("%s= applies to tun and tap ports").
	Takes    Option
	NotTaken string
	// New returns the kind's options with their defaults, which a spec
	// then sets one by one.
	New func() Options
	// NewCounters returns the kind's own counters, empty, into which
	// the switch reads them back from its JSON statistics (softnet ctl
	// stats); nil if the kind has none.
	NewCounters func() Counters
	// Metrics are the metrics of the kind's own counters (Counters.Collect
	// gives their values).
	Metrics []*Metric
	// Lends is the most buffers of the pool's MTU class that one worker
	// lends the kernel for every port of the kind together, which the
	// switch's pool holds beyond its workers' own (an AF_XDP port's fill
	// rings); 0 for a kind that lends none beyond the TUN and TAP
	// queues' io_uring buffers, which the pool always holds.
	Lends int
}

// Metric is a counter of a kind's ports beyond those every port has, as
// the switch's /metrics serves it: softnet_NAME{port="PORT",LABELS...}.
type Metric struct {
	Name, Help string
	Labels     []string // after port
	// Gauge: a value now (a state), not a counter that only grows.
	Gauge bool
}

// Need is an option a spec must give, and the error of one without it.
type Need struct {
	Key, Missing string
}

// Option is one of the options every port has, as a kind says which it
// takes.
type Option uint16

// The options every port has: where the port's device is, its queues,
// offloads and I/O path, its port security (the switch's, by
// program.PortPolicy) and its rate limits (the switch's, by
// program.Policer).
const (
	NetNS Option = 1 << iota
	Dev
	Queues
	Offload
	GRO
	IO
	Allow
	MAC
	DHCPServer
	Router
	IngressRate
	IngressBurst
	EgressRate
	EgressBurst

	// Limits are the rate limits, which every kind takes: the switch
	// polices them, whatever carries the port's packets.
	Limits = IngressRate | IngressBurst | EgressRate | EgressBurst
	Every  = NetNS | Dev | Queues | Offload | GRO | IO | Allow | MAC | DHCPServer | Router | Limits
)

// Common are the options every port has, those its kind takes.
type Common struct {
	NetNS   string // a name as `ip netns` takes it, or a namespace file's absolute path
	Dev     string // the device's name in its namespace, when it differs from the port's
	Queues  int    // 0: one per worker
	Offload bool   // default on
	GRO     bool   // default on with offload, for kinds that take it; needs it
	IO      tun.IO // default tun.IOAuto: io_uring where the kernel has it
	// Allow is the set of source addresses the guest may send from; nil
	// is the default: the prefixes routed to a routed port, any address
	// on a bridged one.
	Allow      *program.Allow
	MACs       [][6]byte // the source MACs a bridged port's guest may use (empty: any)
	DHCPServer bool      // let the guest answer DHCP; off by default
	Router     bool      // let the guest send IPv6 router advertisements; off by default
	// Ingress limits what the switch receives from the port (what its
	// guest sends), Egress what it sends to the port (what its guest
	// receives): the switch's directions, as Open vSwitch's ingress
	// policing, where the CNI bandwidth capability's are the pod's. Zero:
	// no limit. A change of them alone is made live, without the kind.
	Ingress, Egress program.Limit
}

// Field is an option as a spec writes it: Key=Value.
type Field struct {
	Key, Value string
}

// Options are a port's options of its kind and what the kind does with
// them. They do not change once set: a port that changes gets new ones.
type Options interface {
	// Set sets the option key, one of the kind's Keys, to value and
	// reports true; or reports false for an option that is not the
	// kind's. A kind may also claim an option every port has, to refuse
	// it with a reason of its own.
	Set(key, value string) (known bool, err error)
	// Fields are the options set, in the order a spec writes them; Set
	// reads each back to the same options.
	Fields() []Field
	// Check checks the options of the port name with its common options
	// and q queues (0: none given), as opening it would, without
	// touching the system.
	Check(name string, c Common, q int) error
	// Layer is packet.L2 for a port that carries Ethernet frames and is
	// bridged, packet.L3 for one that carries IP packets and is routed.
	Layer() packet.Layer
	// Open opens the port name with q queues, with what the switch
	// lends it.
	Open(name string, c Common, q int, h Host) (Opened, error)
	// Live reports whether a running port of these options takes next,
	// options of its kind, with Opened.Change, keeping its common
	// options; if not, the switch closes it and opens it again.
	Live(next Options) bool
}

// Host is what the switch lends a port it opens.
type Host struct {
	// Pool is the buffer pool of the switch's workers, whose slabs a
	// port that shares frames with the kernel is made of (package
	// afxdp's UMEM is a class's slab).
	Pool *buffer.Pool
	// Log receives what happens to the port while it is open.
	Log *slog.Logger
	// Adopt is set for a port whose device the switch that ran before
	// kept (Keeper): the kind takes it over as its own, with what the
	// guest configured on it, and fails with an error that is ErrGone
	// if it went away meanwhile.
	Adopt bool
}

// ErrGone is the error of a port to adopt (Host.Adopt) whose device went
// away while no switch ran.
var ErrGone = errors.New("its device went away")

// Keeper is an Opened whose device can outlive the switch, so that its
// guest stays configured across a restart of the switch.
type Keeper interface {
	// Persist makes the device outlive the switch if it dies, for the
	// next one to adopt; the port's close still removes it.
	Persist() error
	// Keep is Persist, and the port's close then leaves the device in
	// place, for the next switch to adopt.
	Keep() error
}

// Opened is an open port of a kind.
type Opened interface {
	// Port is the port the engine moves packets through.
	Port() port.Port
	// Describe is what the switch logs about the port it opened, as
	// slog's key-value pairs.
	Describe() []any
	// Stats are the port's counters now.
	Stats() Stats
	// Change makes the port's options next, which Live said it takes.
	Change(next Options) error
}

// Claimer is Options that claim a resource of the system no other port
// may have, as a vhost-user port its socket: Claim says what the port
// name with the common options c does with it ("listens on socket
// /run/vm1.sock"). Ports of any kind that claim the same words collide:
// kinds that use an interface claim it with InterfaceClaim.
type Claimer interface {
	Claim(name string, c Common) string
}

// InterfaceClaim is the claim of a port on the interface dev (the port's
// name if empty) in the namespace netns, as every kind words it, so that
// two ports of any kinds cannot have one interface: a namespace's name
// and its path under /run/netns are the same namespace.
func InterfaceClaim(name string, c Common) string {
	dev := c.Dev
	if dev == "" {
		dev = name
	}
	ns := c.NetNS
	switch {
	case ns == "":
		return "has interface " + dev
	case !strings.HasPrefix(ns, "/"):
		ns = "/run/netns/" + ns
	}
	return "has interface " + dev + " in namespace " + ns
}

// Relay is Options of a routed kind whose routes name a next hop
// (route PREFIX=PORT,via=ADDR), as a routed vxlan port's name the remote
// behind which the prefix is. CheckVia checks a route to port name via
// via (the zero Addr for a route without via=). The routes of a kind
// that is no Relay say no via=.
type Relay interface {
	CheckVia(name string, via netip.Addr) error
}

// Route is a route to a port whose kind is a Relay, with its next hop.
type Route struct {
	Prefix netip.Prefix
	Via    netip.Addr
}

// Routed is an Opened of a Relay kind, which routes what is sent to it:
// the switch gives it the routes to it whenever they change.
type Routed interface {
	SetRoutes(routes []Route) error
}

// Stats are a port's counters as the switch reports them: those every
// port has, its kernel device's if it has one, and its kind's own.
type Stats struct {
	tun.Stats
	// Kernel are the port's device's counters as the kernel keeps them
	// since the switch opened it, for a kind whose port is a kernel
	// device; nil otherwise, or when they could not be read (KernelErr
	// says why).
	Kernel    *tun.KernelStats `json:"kernel,omitempty"`
	KernelErr string           `json:"kernel_error,omitempty"`
	// Own are the kind's own counters, nil if it has none.
	Own Counters `json:"-"`
}

// Counters are a kind's own counters of a port, beyond those every port
// has.
type Counters interface {
	// Key names them in the switch's JSON statistics: "vxlan".
	Key() string
	// Summary is the paragraph of the switch's report about the port's
	// own counters, or "" for none.
	Summary(port string) string
	// Offloads is the port's line under the report's "offloads:" (and
	// lines of its own after it, indented by four), or "" for the line
	// of every port (GSO and GRO).
	Offloads(port string) string
	// Collect gives the values of the kind's Metrics for the port, each
	// with its labels after the port's.
	Collect(add func(m *Metric, v uint64, labels ...string))
}

// Stater is an Opened whose port has a state of its own beyond up or
// down, as a vhost-user port's front-end: `softnet ctl port show` and
// GET /v1/ports show it.
type Stater interface {
	State() State
}

// State is a port's state as its kind says it.
type State struct {
	// Summary is the state in a few words, as a table of ports shows
	// it: "no front-end connected".
	Summary string
	// Fields are its parts, each a key and a value, in the order the
	// kind shows them (JSON: an object).
	Fields []Field
}

// Stationer is an Opened whose port keeps a table of stations of its
// own, as a vxlan port the remote behind each MAC: `softnet ctl fdb
// show` lists them beside the bridge's.
type Stationer interface {
	Stations() []Station
}

// Station is one station of a port's own table.
type Station struct {
	MAC [6]byte
	// Dst is where the port sends the station's frames, in the kind's
	// words ("198.18.0.2": a vxlan remote), or "".
	Dst    string
	Static bool          // configured, not learned: it does not age
	Age    time.Duration // since it was last seen; 0 for a static one
}
