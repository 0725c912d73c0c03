package afxdp

import (
	"fmt"
	"log/slog"
	"strings"

	"softnet.dev/buffer"
	"softnet.dev/internal/netns"
)

// Mode is where the XDP program runs.
type Mode int

const (
	// ModeAuto is native where the driver has XDP, else generic.
	ModeAuto Mode = iota
	// ModeNative runs the program in the driver (veth has it).
	ModeNative
	// ModeGeneric runs it on the kernel's skb path, on any device.
	ModeGeneric
)

func (m Mode) String() string {
	switch m {
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	}
	return "auto"
}

// ZeroCopy says whether the sockets share the UMEM with the driver.
type ZeroCopy int

const (
	// ZeroCopyAuto uses zero-copy where the driver supports it, and
	// copy mode elsewhere (veth).
	ZeroCopyAuto ZeroCopy = iota
	// ZeroCopyOff always copies: the kernel copies each frame into and
	// out of the UMEM.
	ZeroCopyOff
	// ZeroCopyOn refuses to open on a driver without zero-copy.
	ZeroCopyOn
)

func (z ZeroCopy) String() string {
	switch z {
	case ZeroCopyOff:
		return "off"
	case ZeroCopyOn:
		return "on"
	}
	return "auto"
}

// Defaults of the zero fields of a Config.
const (
	// DefaultRing is the number of entries of a socket's transmit and
	// completion rings; DefaultRxRing of its receive and fill rings,
	// which must hold what a peer sends while the worker is away: a
	// veth peer's TCP stream emptied fill rings of 512 on a loaded
	// machine (NOMEM, and the sender retransmitted), not of 2048.
	DefaultRing   = 512
	DefaultRxRing = 2048
	minRing       = 64
	maxRing       = 16384
	maxQueues     = 256
	// ethOverhead is what a frame adds to the MTU: the Ethernet header
	// and one 802.1Q tag.
	ethOverhead = 18
)

// Config describes an AF_XDP port: one socket per queue of an existing
// interface, the host end of a veth pair or a NIC, fed by an XDP program
// that redirects the interface's frames to them.
type Config struct {
	// Name is the port's name, as ports are named in the engine, and
	// the interface's unless Dev is set.
	Name  string
	Dev   string
	NetNS string // the interface's namespace: a name or a path, as tun.Config's
	// Pool provides the frames: the sockets' UMEM is one of its classes'
	// slabs, so that received frames are the workers' buffers.
	Pool *buffer.Pool
	// Queues is the number of sockets, bound to the interface's queues
	// 0 to Queues-1 (default: every receive queue it has). Frames the
	// interface receives on other queues are not the port's (see
	// PassUnclaimed).
	Queues int
	Mode   Mode
	// ZeroCopy: veth has no zero-copy, so its ports copy.
	ZeroCopy ZeroCopy
	// FrameSize is the largest frame that lands in one UMEM frame
	// (default: the interface's MTU plus 18). It picks the smallest
	// class of Pool whose frames hold it after the kernel's 256-byte
	// XDP headroom, and which is no larger than a page: longer frames
	// arrive in pieces (multi-buffer XDP) and are joined into a buffer
	// of a larger class.
	FrameSize int
	// Ring sizes, powers of two from 64 to 16384 (default DefaultRxRing
	// for receive and fill, DefaultRing for transmit and completion).
	// The completion ring must hold the transmit ring.
	RxRing, TxRing, FillRing, CompletionRing int
	// PassUnclaimed hands frames that arrive on a queue without a socket
	// to the kernel's stack, as for a NIC the host still uses. By
	// default they are dropped by the program and counted as drop.XDP.
	PassUnclaimed bool
	// TrustCsum says the peer sends complete checksums (on a veth:
	// `ethtool -K PEER tx off` in the guest). By default every received
	// TCP and UDP frame whose checksum field holds only its pseudo-header
	// sum, as a peer with checksum offload leaves it, is finished in
	// software: AF_XDP carries no checksum metadata.
	TrustCsum bool
	Log       *slog.Logger // default: discard
}

// withDefaults fills in what does not depend on the interface.
func (cfg Config) withDefaults() Config {
	if cfg.Dev == "" {
		cfg.Dev = cfg.Name
	}
	for _, r := range []*int{&cfg.TxRing, &cfg.CompletionRing} {
		if *r == 0 {
			*r = DefaultRing
		}
	}
	for _, r := range []*int{&cfg.RxRing, &cfg.FillRing} {
		if *r == 0 {
			*r = DefaultRxRing
		}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// Validate checks cfg, with its defaults, without touching the system.
func (cfg Config) Validate() error {
	if cfg.Pool == nil {
		return fmt.Errorf("afxdp %s: no buffer pool: the UMEM is one of its classes", cfg.Name)
	}
	return cfg.Check()
}

// Check checks cfg as Validate does but for its pool, which a
// configuration written before the pool exists (a switch's port spec)
// has not.
func (cfg Config) Check() error {
	cfg = cfg.withDefaults()
	fail := func(format string, args ...any) error {
		return fmt.Errorf("afxdp %s: "+format, append([]any{cfg.Name}, args...)...)
	}
	switch {
	case cfg.Name == "" || len(cfg.Name) > 64 || strings.ContainsAny(cfg.Name, ",= \t/"):
		return fail("name %q: want 1 to 64 characters without commas, '=', '/' or blanks", cfg.Name)
	case !netns.ValidDevName(cfg.Dev):
		return fail("interface %q: not a valid interface name", cfg.Dev)
	case !netns.Valid(cfg.NetNS):
		return fail("invalid namespace %q: want a name or an absolute path", cfg.NetNS)
	case cfg.Queues < 0 || cfg.Queues > maxQueues:
		return fail("%d queues: want 1 to %d (0: every queue of the interface)", cfg.Queues, maxQueues)
	case cfg.Mode < ModeAuto || cfg.Mode > ModeGeneric:
		return fail("unknown XDP mode %d", cfg.Mode)
	case cfg.ZeroCopy < ZeroCopyAuto || cfg.ZeroCopy > ZeroCopyOn:
		return fail("unknown zero-copy setting %d", cfg.ZeroCopy)
	case cfg.FrameSize < 0 || cfg.FrameSize > 65535:
		return fail("frame size %d: want 64 to 65535 (0: the MTU's)", cfg.FrameSize)
	case cfg.FrameSize != 0 && cfg.FrameSize < 64:
		return fail("frame size %d: want 64 to 65535 (0: the MTU's)", cfg.FrameSize)
	}
	for _, r := range []struct {
		name string
		n    int
	}{{"rx", cfg.RxRing}, {"tx", cfg.TxRing}, {"fill", cfg.FillRing}, {"completion", cfg.CompletionRing}} {
		if r.n < minRing || r.n > maxRing || r.n&(r.n-1) != 0 {
			return fail("%s ring of %d entries: want a power of two from %d to %d", r.name, r.n, minRing, maxRing)
		}
	}
	if cfg.CompletionRing < cfg.TxRing {
		return fail("completion ring (%d) smaller than the tx ring (%d): the kernel would stall transmits it cannot complete", cfg.CompletionRing, cfg.TxRing)
	}
	return nil
}
