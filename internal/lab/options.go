package lab

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"softnet.dev/internal/vswitch"
	"softnet.dev/program"
	"softnet.dev/tun"
)

// Mode is the kind of traffic of a transfer.
type Mode string

const (
	UDP    Mode = "udp"     // 1472-byte datagrams, no rate limit (iperf3 -u -b 0 -l 1472)
	UDP64  Mode = "udp64"   // 64-byte datagrams, no rate limit: packets per second
	UDPGSO Mode = "udp-gso" // 1472-byte segments sent 44 at a time with UDP_SEGMENT, as QUIC stacks send
	TCP    Mode = "tcp"     // one bulk stream
	TCP4   Mode = "tcp4"    // four parallel streams (iperf3 -P 4)
	// Latency: sockperf ping-pong of 64-byte messages, client and server
	// pinned to different CPUs; one-way latency (half the round trip).
	LatencyUDP Mode = "latency-udp"
	LatencyTCP Mode = "latency-tcp"
	// The zero-loss throughput search (FD.io CSIT's PDR): the highest
	// offered UDP rate whose loss is at most PDRLossPct, by binary search.
	PDR   Mode = "pdr"   // 1472-byte datagrams
	PDR64 Mode = "pdr64" // 64-byte datagrams
)

// Modes lists every mode, in run order.
var Modes = []Mode{UDP, UDP64, UDPGSO, TCP, TCP4, LatencyUDP, LatencyTCP, PDR, PDR64}

// DefaultModes are what a run measures unless told otherwise: the
// figures of the headline, in about half a minute per variant.
var DefaultModes = []Mode{UDP, UDP64, TCP}

// Shorthands accepted by ParseModes.
var modeGroups = map[string][]Mode{
	"all":     Modes,
	"latency": {LatencyUDP, LatencyTCP},
}

// ParseModes turns the names given to --modes into modes: each a mode's
// name, "latency" (UDP and TCP) or "all". Case and spaces do not matter;
// a mode named twice is an error, as is an unknown name.
func ParseModes(names []string) ([]Mode, error) {
	var out []Mode
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		ms, ok := modeGroups[n]
		if !ok {
			ms = []Mode{Mode(n)}
		}
		for _, m := range ms {
			if !slices.Contains(Modes, m) {
				return nil, fmt.Errorf("mode %q: want one of %s, latency or all", n, modeNames(Modes))
			}
			if slices.Contains(out, m) {
				return nil, fmt.Errorf("mode %q given twice", m)
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// kind groups the modes by how they are measured and reported.
type kind int

const (
	kindUDP     kind = iota // a UDP transfer at no rate limit
	kindTCP                 // a TCP transfer
	kindLatency             // a sockperf ping-pong
	kindPDR                 // a search over UDP transfers at set rates
)

func (m Mode) kind() kind {
	switch m {
	case TCP, TCP4:
		return kindTCP
	case LatencyUDP, LatencyTCP:
		return kindLatency
	case PDR, PDR64:
		return kindPDR
	}
	return kindUDP
}

// UDP payload sizes: each datagram is one 1500-byte packet, the MTU of
// every device in the lab. Over IPv6 1472 bytes would need two fragments.
const (
	UDPPayload  = 1472 // over IPv4 (iperf3 -l 1472)
	UDPPayload6 = 1452 // over IPv6
	SmallUDP    = 64   // udp64, pdr64 and the latency modes' messages
	TCPStreams4 = 4    // tcp4's parallel streams
)

// udpPayload returns the datagram size of the family the traffic uses.
func udpPayload(ipv6 bool) int {
	if ipv6 {
		return UDPPayload6
	}
	return UDPPayload
}

// payload returns the datagram (or message) size of mode m.
func (m Mode) payload(ipv6 bool) int {
	switch m {
	case UDP64, PDR64, LatencyUDP, LatencyTCP:
		return SmallUDP
	}
	return udpPayload(ipv6)
}

// Traffic says what generates the traffic.
type Traffic string

const (
	TrafficAuto    Traffic = "auto"    // iperf3 if installed, else built-in
	TrafficIperf3  Traffic = "iperf3"  // iperf3, which must be installed
	TrafficBuiltin Traffic = "builtin" // Go sockets in this process
)

// Defaults.
const (
	DefaultDuration = 10 * time.Second // each transfer
	DefaultPDRSteps = 7                // trials of a PDR search: one at full rate, six halvings
	DefaultPDRTrial = 2 * time.Second  // each of them
	PDRLossPct      = 0.5              // the loss a PDR trial may have
	maxRuns         = 20
	// --ports: the guests take one /24 each of 198.18.0.0/15, so at
	// most 511 of them, the churned port's included.
	MinPorts          = 4 // the neighbour, a pinging pair, an iperf3 pair
	MaxPorts          = 500
	DefaultPortsIdle  = 10 * time.Second
	DefaultPortsChurn = 20
	maxWorkers        = 8
)

// Options configure a run. The zero value plus Peers is `softnet lab`.
type Options struct {
	// Duration of each transfer (each mode of each variant), in whole
	// seconds since iperf3 takes no less; default DefaultDuration.
	Duration time.Duration
	TAP      bool    // TAP ports bridged by MAC address instead of routed TUN ports
	Peers    bool    // also measure kernel-veth, wireguard-go and softnet-tun
	Ladder   bool    // softnet's ladder instead of its default configuration alone
	Modes    []Mode  // default: DefaultModes
	Traffic  Traffic // default TrafficAuto
	IPv6     bool    // run the traffic over the guests' IPv6 addresses
	// Runs is how many times each variant is measured (default 1). The
	// runs are interleaved, the variants' order rotated each round, and
	// the report gives each figure's median and the spread.
	Runs int
	// PDRSteps and PDRTrial bound a PDR search: its number of trials
	// (at least 2) and the length of each, in whole seconds.
	PDRSteps int
	PDRTrial time.Duration
	// Ports, if not 0, runs the many-ports measurement (ports.go) instead
	// of the variants: that many guests on one softnet switch. Workers
	// and IO are that switch's (default one worker, io_uring where the
	// kernel has it); PortsIdle is how long its idle CPU is measured and
	// PortsChurn how many times one more port is added and removed.
	Ports      int
	Workers    int
	IO         tun.IO
	PortsIdle  time.Duration
	PortsChurn int
	// Overlay, if set, runs the overlay measurement (overlay.go) of
	// these kinds instead of the variants: two hosts, each with a guest
	// behind softnet's or the kernel's VXLAN, over a veth underlay of
	// IPv4 or, with UnderlayIPv6, IPv6. SoftnetBinary is the softnet
	// executable each softnet host runs as `softnet switch` (default:
	// this process's own).
	Overlay       []OverlayKind
	UnderlayIPv6  bool
	SoftnetBinary string
	// Vhost, if set, runs the vhost-user measurement (vhost.go) instead of
	// the variants: DPDK's testpmd through softnet's vhost-user ports,
	// through DPDK's own back-end and through Open vSwitch with DPDK, and
	// softnet's TUN path at 64 bytes. VhostBackends, if not empty, are
	// the back-ends it measures (of VhostBackends; default all, Open
	// vSwitch skipped when it is not installed).
	Vhost         bool
	VhostBackends []string
	// VhostUnpinned leaves softnet's worker to the scheduler, as
	// `softnet switch` without --cpus, instead of pinning it to the CPU
	// the other back-ends' forwarding threads have: to see where it runs
	// (VhostRun.Placement) and what that does to the rate.
	VhostUnpinned bool
	// Bandwidth, if set, runs the bandwidth measurement (bandwidth.go)
	// instead of the variants: iperf3 TCP and UDP both ways through
	// softnet's rate limits and the reference CNI bandwidth plugin's tc
	// on a veth pair, at each of BandwidthRates (bits per second; default
	// DefaultBandwidthRates). BandwidthPlugin is the plugin's executable;
	// by default the run builds it from the Go module proxy.
	// BandwidthBurst, if not zero, is each limit's burst as a time at its
	// rate; zero is softnet's default burst (vswitch.DefaultBurst).
	Bandwidth       bool
	BandwidthRates  []uint64
	BandwidthBurst  time.Duration
	BandwidthPlugin string
	// AFXDP, if set, runs the AF_XDP measurement (afxdp.go) instead of
	// the variants: two guests' veths joined by softnet's afxdp ports,
	// the kernel's bridge and Open vSwitch's afxdp netdev, and softnet's
	// TAP path; then a switch of AFXDPIdlePorts idle afxdp ports.
	// SoftnetBinary is the switch's executable, as for Overlay. Default
	// modes: AFXDPModes.
	AFXDP bool
	// AFXDPMTU, if not zero, is the MTU of the --afxdp run's guest
	// devices and veth host ends, for every configuration alike (the
	// veths' default is 1500): jumbo frames, which afxdp ports receive
	// in pieces (multi-buffer XDP).
	AFXDPMTU int
	// Progress, if set, receives a line of progress at each step.
	Progress func(msg string)
	// Log receives the engine's own messages (a port that went down);
	// default: discarded.
	Log *slog.Logger
}

// Validate reports whether a run with these options could start: the
// checks that do not need the machine.
func (o Options) Validate() error {
	_, err := o.withDefaults()
	return err
}

func (o Options) withDefaults() (Options, error) {
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if len(o.Modes) == 0 {
		o.Modes = DefaultModes
		if o.AFXDP {
			o.Modes = AFXDPModes
		}
	}
	if o.Traffic == "" {
		o.Traffic = TrafficAuto
	}
	if o.Runs == 0 {
		o.Runs = 1
	}
	if o.PDRSteps == 0 {
		o.PDRSteps = DefaultPDRSteps
	}
	if o.PDRTrial == 0 {
		o.PDRTrial = DefaultPDRTrial
	}
	if o.Ports > 0 {
		if o.Workers == 0 {
			o.Workers = 1
		}
		if o.PortsIdle == 0 {
			o.PortsIdle = DefaultPortsIdle
		}
		if o.PortsChurn == 0 {
			o.PortsChurn = DefaultPortsChurn
		}
	}
	if o.Bandwidth && len(o.BandwidthRates) == 0 {
		o.BandwidthRates = DefaultBandwidthRates
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o, o.validate()
}

func wholeSeconds(what string, d time.Duration) error {
	if d < time.Second || d%time.Second != 0 {
		return fmt.Errorf("%s %v: want whole seconds, at least 1s (iperf3 -t takes seconds)", what, d)
	}
	if d > time.Hour {
		return fmt.Errorf("%s %v: at most 1h", what, d)
	}
	return nil
}

func (o Options) validate() error {
	if err := wholeSeconds("duration", o.Duration); err != nil {
		return err
	}
	if err := wholeSeconds("pdr trial", o.PDRTrial); err != nil {
		return err
	}
	for i, m := range o.Modes {
		if !slices.Contains(Modes, m) {
			return fmt.Errorf("mode %q: want one of %s", m, modeNames(Modes))
		}
		if slices.Contains(o.Modes[:i], m) {
			return fmt.Errorf("mode %q given twice", m)
		}
	}
	switch o.Traffic {
	case TrafficAuto, TrafficIperf3, TrafficBuiltin:
	default:
		return fmt.Errorf("traffic %q: want auto, iperf3 or builtin", o.Traffic)
	}
	if o.Runs < 1 || o.Runs > maxRuns {
		return fmt.Errorf("runs %d: want 1 to %d", o.Runs, maxRuns)
	}
	if o.PDRSteps < 2 || o.PDRSteps > 20 {
		return fmt.Errorf("pdr steps %d: want 2 to 20 (one trial at full rate, then halvings)", o.PDRSteps)
	}
	if err := o.validateOverlay(); err != nil {
		return err
	}
	if err := o.validateAFXDP(); err != nil {
		return err
	}
	if err := o.validatePorts(); err != nil {
		return err
	}
	if err := o.validateBandwidth(); err != nil {
		return err
	}
	return o.validateVhost()
}

// bandwidthBurst is the burst of a limit at rate, in bits.
func (o Options) bandwidthBurst(rate uint64) uint64 {
	if o.BandwidthBurst == 0 {
		return vswitch.DefaultBurst(rate)
	}
	return uint64(float64(rate) * o.BandwidthBurst.Seconds())
}

// validateBandwidth checks that a bandwidth run is asked for alone, at
// rates softnet's ports take.
func (o Options) validateBandwidth() error {
	switch {
	case !o.Bandwidth && (len(o.BandwidthRates) > 0 || o.BandwidthPlugin != "" || o.BandwidthBurst != 0):
		return fmt.Errorf("bandwidth rates and plugin without a bandwidth run")
	case !o.Bandwidth:
		return nil
	case o.Ports > 0 || len(o.Overlay) > 0 || o.Vhost || o.Ladder || o.AFXDP:
		return fmt.Errorf("bandwidth is a run of its own: give it without ports, overlay, vhost, afxdp or ladder")
	case o.Runs > 1:
		return fmt.Errorf("runs %d: a bandwidth run measures each limit once", o.Runs)
	}
	if o.BandwidthBurst < 0 || o.BandwidthBurst > 10*time.Second {
		return fmt.Errorf("bandwidth burst %v: want up to 10s of the rate", o.BandwidthBurst)
	}
	for _, r := range o.BandwidthRates {
		if err := (program.Limit{Rate: r, Burst: o.bandwidthBurst(r)}).Valid(); err != nil {
			return fmt.Errorf("bandwidth rate: %w", err)
		}
	}
	return nil
}

// validateVhost checks that a vhost-user run is asked for alone: its
// configurations and transfers are its own.
func (o Options) validateVhost() error {
	for i, b := range o.VhostBackends {
		if !slices.Contains(VhostBackends, b) {
			return fmt.Errorf("vhost back-end %q: want one of %s", b, strings.Join(VhostBackends, ", "))
		}
		if slices.Contains(o.VhostBackends[:i], b) {
			return fmt.Errorf("vhost back-end %q given twice", b)
		}
	}
	switch {
	case !o.Vhost && len(o.VhostBackends) > 0:
		return fmt.Errorf("vhost back-ends %s without a vhost run", strings.Join(o.VhostBackends, ","))
	case !o.Vhost && o.VhostUnpinned:
		return fmt.Errorf("vhost-unpinned without a vhost run")
	case !o.Vhost:
		return nil
	case o.Ports > 0:
		return fmt.Errorf("vhost and ports are two different runs: give one")
	case len(o.Overlay) > 0:
		return fmt.Errorf("vhost and overlay are two different runs: give one")
	case o.Ladder:
		return fmt.Errorf("vhost and ladder are two different runs: give one")
	case o.Runs > 1:
		return fmt.Errorf("runs %d: a vhost run measures each configuration once", o.Runs)
	}
	return nil
}

// validateAFXDP checks that an AF_XDP run is asked for alone, with
// modes that apply to it.
func (o Options) validateAFXDP() error {
	if !o.AFXDP {
		if o.AFXDPMTU != 0 {
			return fmt.Errorf("afxdp-mtu applies to an afxdp run only")
		}
		return nil
	}
	if o.AFXDPMTU != 0 && (o.AFXDPMTU < 1280 || o.AFXDPMTU > 65535) {
		return fmt.Errorf("afxdp-mtu %d: want 1280 to 65535 (IPv6's minimum to the largest an interface takes)", o.AFXDPMTU)
	}
	switch {
	case o.Ports > 0:
		return fmt.Errorf("afxdp and ports are two different runs: give one")
	case len(o.Overlay) > 0:
		return fmt.Errorf("afxdp and overlay are two different runs: give one")
	case o.Vhost:
		return fmt.Errorf("afxdp and vhost are two different runs: give one")
	case o.Ladder:
		return fmt.Errorf("afxdp and ladder are two different runs: give one")
	case o.TAP:
		return fmt.Errorf("tap does not apply to afxdp: softnet's TAP path is one of its configurations")
	}
	for _, m := range o.Modes {
		if m.kind() != kindUDP && m.kind() != kindTCP || m == UDPGSO {
			return fmt.Errorf("mode %s does not apply to afxdp: want udp, udp64, tcp or tcp4", m)
		}
	}
	return nil
}

// validateOverlay checks the options of the overlay measurement.
func (o Options) validateOverlay() error {
	if len(o.Overlay) == 0 {
		if o.UnderlayIPv6 || o.SoftnetBinary != "" && !o.AFXDP {
			return fmt.Errorf("underlay-ipv6 and the softnet binary apply to the overlay measurement only (overlay)")
		}
		return nil
	}
	for i, k := range o.Overlay {
		if k != OverlayL2 && k != OverlayL3 {
			return fmt.Errorf("overlay %q: want l2 or l3", k)
		}
		if slices.Contains(o.Overlay[:i], k) {
			return fmt.Errorf("overlay %q given twice", k)
		}
	}
	switch {
	case o.Ports > 0:
		return fmt.Errorf("overlay and ports are two different runs: give one")
	case o.Ladder:
		return fmt.Errorf("overlay and ladder are two different runs: give one")
	case o.TAP:
		return fmt.Errorf("tap does not apply to overlay: its l2 kind has TAP guests, l3 TUN guests")
	}
	for _, m := range o.Modes {
		if m.kind() != kindUDP && m.kind() != kindTCP || m == UDPGSO {
			return fmt.Errorf("mode %s does not apply to overlay: want udp, udp64, tcp or tcp4", m)
		}
	}
	return nil
}

// validatePorts checks the options of the many-ports measurement, which
// are errors without it: they would silently do nothing.
func (o Options) validatePorts() error {
	if o.Ports == 0 {
		if o.Workers != 0 || o.IO != tun.IOAuto || o.PortsIdle != 0 || o.PortsChurn != 0 {
			return fmt.Errorf("workers, io, idle and churn apply to the many-ports measurement only (ports)")
		}
		return nil
	}
	switch {
	case o.Ports < MinPorts || o.Ports > MaxPorts:
		return fmt.Errorf("ports %d: want %d to %d", o.Ports, MinPorts, MaxPorts)
	case o.Workers < 1 || o.Workers > maxWorkers:
		return fmt.Errorf("workers %d: want 1 to %d", o.Workers, maxWorkers)
	case o.IO > tun.IOUring:
		return fmt.Errorf("io %v: want auto, syscall or uring", o.IO)
	case o.PortsIdle < time.Second || o.PortsIdle > time.Hour:
		return fmt.Errorf("idle %v: want 1s to 1h", o.PortsIdle)
	case o.PortsChurn < 1 || o.PortsChurn > 1000:
		return fmt.Errorf("churn %d: want 1 to 1000", o.PortsChurn)
	case o.Ladder:
		return fmt.Errorf("ports and ladder are two different runs: give one")
	}
	return nil
}

// modeNames lists modes for a message: "udp, udp64, …".
func modeNames(ms []Mode) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}
