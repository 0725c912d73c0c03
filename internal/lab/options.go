package lab

import (
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Mode is the kind of traffic of a transfer.
type Mode string

const (
	UDP Mode = "udp" // 1472-byte datagrams, no rate limit (iperf3 -u -b 0 -l 1472)
	TCP Mode = "tcp" // one bulk stream
)

// Modes lists every mode, in run order.
var Modes = []Mode{UDP, TCP}

// UDP payload sizes: each datagram is one 1500-byte packet, the MTU of
// every device in the lab. Over IPv6 1472 bytes would need two fragments.
const (
	UDPPayload  = 1472 // over IPv4 (iperf3 -l 1472)
	UDPPayload6 = 1452 // over IPv6
)

// udpPayload returns the datagram size of the family the traffic uses.
func udpPayload(ipv6 bool) int {
	if ipv6 {
		return UDPPayload6
	}
	return UDPPayload
}

// Traffic says what generates the traffic.
type Traffic string

const (
	TrafficAuto    Traffic = "auto"    // iperf3 if installed, else built-in
	TrafficIperf3  Traffic = "iperf3"  // iperf3, which must be installed
	TrafficBuiltin Traffic = "builtin" // Go sockets in this process
)

// DefaultDuration is the length of each transfer.
const DefaultDuration = 10 * time.Second

// Options configure a run. The zero value plus Peers is `softnet lab`.
type Options struct {
	// Duration of each transfer (each mode of each variant), in whole
	// seconds since iperf3 takes no less; default DefaultDuration.
	Duration time.Duration
	TAP      bool    // TAP ports bridged by MAC address instead of routed TUN ports
	Peers    bool    // also measure kernel-veth, wireguard-go and softnet-tun
	Ladder   bool    // softnet's ladder instead of its default configuration alone
	Modes    []Mode  // default: Modes
	Traffic  Traffic // default TrafficAuto
	IPv6     bool    // run the traffic over the guests' IPv6 addresses
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
		o.Modes = Modes
	}
	if o.Traffic == "" {
		o.Traffic = TrafficAuto
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o, o.validate()
}

func (o Options) validate() error {
	if o.Duration < time.Second || o.Duration%time.Second != 0 {
		return fmt.Errorf("duration %v: want whole seconds, at least 1s (iperf3 -t takes seconds)", o.Duration)
	}
	if o.Duration > time.Hour {
		return fmt.Errorf("duration %v: at most 1h", o.Duration)
	}
	for i, m := range o.Modes {
		if !slices.Contains(Modes, m) {
			return fmt.Errorf("mode %q: want udp or tcp", m)
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
	return nil
}
