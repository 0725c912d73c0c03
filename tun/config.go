package tun

import (
	"errors"
	"fmt"
	"log/slog"

	"strings"

	"softnet.dev/internal/knob"
	"softnet.dev/internal/netns"
	"softnet.dev/packet"
)

// FlagVnetHdr is the buffer flag (buffer.Buf.Flags) of a packet whose
// virtio-net header is still needed: it occupies the vnet.HeaderLen bytes
// immediately before the data, and asks for GSO or a checksum to finish.
const FlagVnetHdr uint8 = 1

// Limits of a Config.
const (
	MaxNameLen = 15  // IFNAMSIZ less the terminating NUL
	MaxQueues  = 256 // the kernel's MAX_TAP_QUEUES
	MinMTU     = 68  // the IPv4 minimum; the kernel refuses less
	MaxMTU     = 65535
)

// Config describes the device to open.
type Config struct {
	Name    string // device name, at most MaxNameLen bytes
	TAP     bool   // L2 (Ethernet frames) instead of TUN (L3, IP packets)
	NetNS   string // a namespace name (/run/netns/NAME), an absolute path of a namespace file (/proc/PID/ns/net), or "" for the current one
	Queues  int    // default 1; more than 1 uses IFF_MULTI_QUEUE
	Offload bool   // IFF_VNET_HDR and TUNSETOFFLOAD; false opens the device without a vnet header
	MTU     int    // 0 leaves the device's MTU as it is
	// GRO coalesces, in each burst given to Transmit, runs of segments of
	// one TCP or UDP flow into GSO packets (see vnet.Coalescer), each
	// written with one gathering write: fewer system calls, and the
	// receiving stack handles one large packet instead of many. It needs
	// Offload and applies to the GSO kinds the kernel accepted (TSO4,
	// TSO6, USO4, USO6), with checksum offload.
	GRO bool
	// IO picks how the queues move packets: IOAuto (the zero value) uses
	// io_uring where the kernel supports it and read/write system calls
	// elsewhere; Device.IO says which was chosen, and why not io_uring.
	IO IO
	// KeepGSO makes Queue.Read hand GSO packets over whole, each preceded
	// by its virtio-net header, and Queue.Write take packets with their
	// header, instead of splitting them into segments and writing
	// headerless packets. It needs Offload.
	KeepGSO bool
	// Adopt takes over a device that a program before kept
	// (Device.Keep, or Device.Persist and died) as if Open had created
	// it: Open fails with ErrNoDevice rather than create it, leaves its
	// addresses and routes as they are, and the device stays persistent
	// (Device.Persist) until Close removes it, unless kept again.
	Adopt bool
	// Log receives what happens to the device's link while it is open:
	// down and up, MTU changes (and the frames the port then accepts),
	// deletion. Nil discards it.
	Log *slog.Logger
	// PortName is the name Info reports, by which an engine and a switch
	// know the port; "" is Name. Device names are unique only within a
	// namespace (every container has an eth0), so a switch serving
	// devices of one name in several namespaces names their ports apart.
	PortName string
	// Knobs turn mechanisms off for softnet's own lab, which measures
	// what each is worth. Only softnet's packages can make a value other
	// than the zero one: the device described here, whose queues take
	// the buffers for a burst with one Cache.GetBulk once its first
	// packet has been read (TUN cannot say how many wait) and return the
	// unused ones at the end of the burst.
	Knobs knob.TUN
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	fail := func(format string, args ...any) (Config, error) {
		return cfg, fmt.Errorf("tun %s: "+format, append([]any{cfg.Name}, args...)...)
	}
	switch {
	case cfg.Name == "":
		return cfg, errors.New("tun: no device name")
	case len(cfg.Name) > MaxNameLen:
		return fail("name longer than %d bytes", MaxNameLen)
	case !netns.ValidDevName(cfg.Name):
		// The kernel's dev_valid_name; checked here for a clearer error.
		return fail("invalid device name: Linux refuses '/', ':', white space, \".\" and \"..\"")
	case strings.ContainsRune(cfg.Name, '%'):
		// TUNSETIFF would expand a pattern like "tun%d" into a name we
		// would not know to look up, check or remove.
		return fail("name patterns (%%d) are not supported")
	case cfg.Queues < 1 || cfg.Queues > MaxQueues:
		return fail("%d queues, want 1 to %d", cfg.Queues, MaxQueues)
	case cfg.MTU != 0 && (cfg.MTU < MinMTU || cfg.MTU > MaxMTU):
		return fail("MTU %d outside [%d, %d]", cfg.MTU, MinMTU, MaxMTU)
	case !netns.Valid(cfg.NetNS):
		return fail("invalid namespace %q: want a name or an absolute path", cfg.NetNS)
	case cfg.IO > IOUring:
		return fail("unknown I/O mode %d", cfg.IO)
	case cfg.GRO && !cfg.Offload:
		return fail("GRO needs offload: without a vnet header the device cannot take GSO packets")
	case cfg.KeepGSO && !cfg.Offload:
		return fail("KeepGSO needs offload: without a vnet header there are no GSO packets")
	}
	return cfg, nil
}

// Validate checks cfg as Open would, without opening anything: the
// device name (the kernel's rules, and no name patterns), the namespace
// name, the queue count, the MTU and the offloads.
func (cfg Config) Validate() error {
	_, err := cfg.withDefaults()
	return err
}

// FileConfig says how FromFiles runs a device over files opened
// elsewhere. The device's name, kind, queues and vnet header come from
// the files themselves.
type FileConfig struct {
	// MTU is the largest packet (after the Ethernet header on TAP) a
	// file without a vnet header can deliver. 0 looks the device's MTU
	// up in its namespace (TUNGETDEVNETNS), which needs CAP_NET_ADMIN
	// there. Files with a vnet header take packets of up to MaxMTU and
	// ignore it.
	MTU int
	// GRO and KeepGSO are Config's; they need files with a vnet header.
	GRO     bool
	KeepGSO bool
}

func (cfg FileConfig) check(vnetHdr bool) error {
	switch {
	case cfg.MTU != 0 && (cfg.MTU < MinMTU || cfg.MTU > MaxMTU):
		return fmt.Errorf("MTU %d outside [%d, %d]", cfg.MTU, MinMTU, MaxMTU)
	case cfg.GRO && !vnetHdr:
		return errors.New("GRO needs a file opened with IFF_VNET_HDR")
	case cfg.KeepGSO && !vnetHdr:
		return errors.New("KeepGSO needs a file opened with IFF_VNET_HDR")
	}
	return nil
}

// linkOverhead is what a device's frames carry beyond its MTU: nothing
// on TUN; on TAP the Ethernet header and one 802.1Q tag, which rides
// outside the MTU (the kernel's VLAN_ETH_HLEN), so that a guest's VLAN
// device at the same MTU sends full-size frames.
func linkOverhead(tap bool) int {
	if tap {
		return packet.EthernetHeaderLen + packet.VLANTagLen
	}
	return 0
}
