package vxlan

import (
	"fmt"
	"net/netip"

	"strings"
	"time"

	"softnet.dev/internal/netns"
)

// Defaults of the zero fields of a Config.
const (
	// DefaultAgeingTime is the kernel vxlan's: learned stations are
	// forgotten 300 s after their last frame.
	DefaultAgeingTime = 300 * time.Second
	// DefaultMaxEntries bounds the learned stations (the kernel's vxlan
	// has no bound by default; a remote sending from random MACs must not
	// cost memory without end).
	DefaultMaxEntries = 4096
	// The outer source ports, by default the kernel's ephemeral range,
	// as the kernel's vxlan picks them.
	DefaultSrcPortMin = 32768
	DefaultSrcPortMax = 60999
	maxQueues         = 256
)

// MaxRemotes bounds a port's remotes: a frame flooded costs a datagram
// to each (sent 256 to a system call), and each queue keeps every
// remote's address. Kubernetes clusters stop at 5000 nodes, each a
// remote of an overlay such as Flannel's.
const MaxRemotes = 16384

// Config describes a VXLAN port: one VNI, reached over UDP from a local
// address to a list of remote VTEPs (VXLAN tunnel endpoints), the
// kernel's `ip link add NAME type vxlan id VNI local LOCAL dstport PORT`
// with one `bridge fdb append 00:00:00:00:00:00 dst REMOTE` per remote.
type Config struct {
	Name string // the port's name, as ports are named in the engine
	VNI  uint32
	// Local is the underlay address the port sends from and receives
	// on, and the UDP port it receives on (0: Port).
	Local   netip.AddrPort
	Remotes []netip.Addr // the flood list (at most MaxRemotes; none only on an L3 port); datagrams from others are dropped
	NetNS   string       // the underlay's namespace, as tun.Config's
	// Port is the remote VTEPs' UDP port (default DefaultPort; the
	// kernel's vxlan uses 8472 unless given dstport).
	Port   uint16
	Queues int // one per worker (default 1)
	// SrcPortMin and SrcPortMax bound the outer source ports (default
	// DefaultSrcPortMin to DefaultSrcPortMax): the port binds a sending
	// socket to each of up to 16 of them, spread over the range, and a
	// hash of the inner flow picks one.
	SrcPortMin, SrcPortMax uint16
	MaxEntries             int           // learned stations (default DefaultMaxEntries)
	AgeingTime             time.Duration // default DefaultAgeingTime
	// Static are stations whose remote is known (the kernel's `bridge
	// fdb append MAC dev vx0 dst IP`): never learned over, never aged,
	// not counted in MaxEntries. Each remote must be one of Remotes.
	Static []StaticEntry
	// L3 makes a routed port (layer L3, IP packets), as Flannel's and
	// Calico's VXLAN backends use the overlay: the port is a VTEP with
	// the MAC VTEPMAC; it sends each packet to the remote its route
	// says (SetRoutes), in a frame from VTEPMAC to the remote's VTEP MAC
	// (its Static entry), and takes only frames to VTEPMAC. Nothing is
	// learned or flooded.
	L3      bool
	VTEPMAC [6]byte
}

// Route sends packets to Prefix to the remote Via (an L3 port's).
type Route struct {
	Prefix netip.Prefix
	Via    netip.Addr
}

// StaticEntry is a station behind a remote, as configured.
type StaticEntry struct {
	MAC    [6]byte
	Remote netip.Addr
}

// withDefaults returns cfg with its zero fields filled in.
func (cfg Config) withDefaults() Config {
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Local.Port() == 0 {
		cfg.Local = netip.AddrPortFrom(cfg.Local.Addr(), cfg.Port)
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if cfg.SrcPortMin == 0 && cfg.SrcPortMax == 0 {
		cfg.SrcPortMin, cfg.SrcPortMax = DefaultSrcPortMin, DefaultSrcPortMax
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.AgeingTime == 0 {
		cfg.AgeingTime = DefaultAgeingTime
	}
	return cfg
}

// Validate checks cfg, with its defaults, without touching the system.
func (cfg Config) Validate() error {
	cfg = cfg.withDefaults()
	fail := func(format string, args ...any) error {
		return fmt.Errorf("vxlan %s: "+format, append([]any{cfg.Name}, args...)...)
	}
	local := cfg.Local.Addr()
	switch {
	case cfg.Name == "" || len(cfg.Name) > 64 || strings.ContainsAny(cfg.Name, ",= \t/"):
		return fail("name %q: want 1 to 64 characters without commas, '=', '/' or blanks", cfg.Name)
	case cfg.VNI > MaxVNI:
		return fail("vni %d: want 0 to %d", cfg.VNI, MaxVNI)
	case !local.IsValid():
		return fail("no local address: want the underlay's unicast address to send from")
	case local.IsUnspecified() || local.IsMulticast():
		return fail("local address %v: want a unicast address of the underlay (the outer checksum covers it)", local)
	case local.Is4In6():
		return fail("local address %v: write IPv4 addresses as such", local)
	case len(cfg.Remotes) == 0 && !cfg.L3:
		// A routed port floods nothing: it may wait for its first
		// remote (a node agent's, as nodes join).
		return fail("no remote: want at least one")
	case len(cfg.Remotes) > MaxRemotes:
		return fail("%d remotes: want at most %d", len(cfg.Remotes), MaxRemotes)
	case cfg.Queues < 1 || cfg.Queues > maxQueues:
		return fail("%d queues: want 1 to %d", cfg.Queues, maxQueues)
	case cfg.SrcPortMin == 0 || cfg.SrcPortMin > cfg.SrcPortMax:
		return fail("source ports %d-%d: want 1 <= min <= max", cfg.SrcPortMin, cfg.SrcPortMax)
	case cfg.MaxEntries < 1:
		return fail("max entries %d: want at least 1", cfg.MaxEntries)
	case cfg.AgeingTime < 0:
		return fail("ageing time %v is negative", cfg.AgeingTime)
	case !netns.Valid(cfg.NetNS):
		return fail("invalid namespace %q: want a name or an absolute path", cfg.NetNS)
	}
	seen := map[netip.Addr]bool{}
	for _, r := range cfg.Remotes {
		switch {
		case !r.IsValid() || r.IsUnspecified() || r.IsMulticast():
			return fail("remote %v: want a unicast address (multicast groups are not supported)", r)
		case r.Is4() != local.Is4() || r.Is4In6():
			return fail("remote %v: the local address %v is of the other family", r, local)
		case r == local:
			return fail("remote %v is the local address", r)
		case seen[r]:
			return fail("remote %v given twice", r)
		}
		seen[r] = true
	}
	macs := map[[6]byte]bool{}
	for _, e := range cfg.Static {
		switch {
		case e.MAC[0]&1 != 0 || e.MAC == [6]byte{}:
			return fail("static entry %x: not a station's MAC (group or zero; the flood list is Remotes)", e.MAC)
		case !seen[e.Remote]:
			return fail("static entry %x: %v is not a remote", e.MAC, e.Remote)
		case macs[e.MAC]:
			return fail("static entry %x given twice", e.MAC)
		}
		macs[e.MAC] = true
	}
	if cfg.L3 && (cfg.VTEPMAC[0]&1 != 0 || cfg.VTEPMAC == [6]byte{}) {
		return fail("VTEP MAC %x: a routed port needs a unicast MAC of its own", cfg.VTEPMAC)
	}
	return nil
}
