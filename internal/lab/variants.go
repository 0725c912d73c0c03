package lab

import (
	"time"

	"softnet.dev/internal/vswitch"
	"softnet.dev/tun"
)

// ladderBusyPoll is the ladder's busy-poll step: the switch's default.
const ladderBusyPoll = vswitch.DefaultBusyPoll

// pathKind is what joins the two guests.
type pathKind int

const (
	pathVeth        pathKind = iota // a veth pair: the kernel's own path
	pathWireguardGo                 // two TUN devices, forwarder.go on wireguard-go's tun package
	pathSoftnetTUN                  // the same forwarder on softnet's tun package, without an engine
	pathSoftnet                     // two TUN/TAP ports and a softnet engine
)

// Names of the peers and of softnet's default configuration.
const (
	KernelVeth  = "kernel-veth"
	WireguardGo = "wireguard-go"
	SoftnetTUN  = "softnet-tun"
	Softnet     = "softnet"
	// OffloadOn is the ladder's name for the default configuration,
	// measured beside offload-off.
	OffloadOn = "offload-on"
)

// softnetConfig is how a softnet variant differs from `softnet switch`
// with ports tun:NAME,netns=NS (or tap:): the ports' offload=, gro= and
// io= options, the switch's workers and busy polling, and the mechanisms
// the ladder turns off, which no setting of the switch can (plan).
type softnetConfig struct {
	Offload  bool          // vnet header, checksum and segmentation offloads
	GRO      bool          // coalesce each burst's segments per flow; needs Offload
	IO       tun.IO        // every port's io=; tun.IOAuto is io_uring where the kernel has it
	Workers  int           // 0 is 1; each port gets one queue per worker
	BusyPoll time.Duration // vswitch.Tuning.BusyPoll: 0 is the default, negative is off

	Uncached   bool // knob.PoolUncached: every buffer from the locked depot
	SingleGets bool // knob.TUNSingleGets: one Get per received packet
	Batch      int  // the engine's budget per queue and round; 0 is the default
	DeferTX    bool // TX on a goroutine per queue (txthread): every free is a remote one
}

// defaultSoftnet is what `softnet switch` runs: offload on, batch 64, bulk,
// GRO, io=uring where the kernel has it, busy polling.
var defaultSoftnet = softnetConfig{Offload: true, GRO: true}

// Variant is one datapath configuration measured by a run.
type Variant struct {
	Name    string
	Desc    string
	kind    pathKind
	softnet softnetConfig
}

// Softnet reports whether the variant runs softnet's engine.
func (v Variant) Softnet() bool { return v.kind == pathSoftnet }

// InProcess reports whether the variant's datapath runs in the lab's
// process, so that its CPU time, allocations and memory are measured.
func (v Variant) InProcess() bool { return v.kind != pathVeth }

// Variants returns what a run with o measures, in order: the peers first
// (kernel-veth is what ratios refer to), then softnet.
func Variants(o Options) []Variant {
	var vs []Variant
	if o.Peers {
		vs = append(vs, Variant{Name: KernelVeth, Desc: "veth pair between the namespaces: the kernel's own path", kind: pathVeth})
		if !o.TAP { // wireguard-go's tun package is TUN only
			vs = append(vs, Variant{Name: WireguardGo, Desc: "two-goroutine forwarder on wireguard-go's tun package: batch reads splitting GSO, GRO writes", kind: pathWireguardGo})
		}
		vs = append(vs, Variant{Name: SoftnetTUN, Desc: "the same forwarder on softnet's tun package (FromFiles, Queue.Read/Write), no engine", kind: pathSoftnetTUN})
	}
	if !o.Ladder {
		return append(vs, Variant{Name: Softnet, Desc: "softnet's default: offload on, batch 64, bulk allocation, GRO, io_uring, busy polling", kind: pathSoftnet, softnet: defaultSoftnet})
	}
	step := func(name, desc string, c softnetConfig) Variant {
		return Variant{Name: name, Desc: desc, kind: pathSoftnet, softnet: c}
	}
	// The steps up to +defer read and write with system calls, as they
	// did before io_uring, so that each adds one mechanism.
	bulk := softnetConfig{Offload: true, IO: tun.IOSyscall, BusyPoll: -1}
	napi := bulk
	napi.SingleGets = true
	noCache := napi
	noCache.Uncached, noCache.Batch = true, 1
	gro := bulk
	gro.GRO = true
	uringStep := gro
	uringStep.IO = tun.IOUring
	busy := uringStep
	busy.BusyPoll = ladderBusyPoll
	two := busy
	two.Workers = 2
	deferred := gro
	deferred.DeferTX = true
	offOff := defaultSoftnet
	offOff.Offload, offOff.GRO = false, false
	return append(vs,
		step("no-cache/batch-1", "no per-worker cache (every buffer from the locked depot), batch 1, offload on", noCache),
		step("napi-cache", "per-worker cache, batch 64, one get per packet", napi),
		step("+bulk", "+ one bulk get per burst", bulk),
		step("+gro", "+ GRO: each burst's segments of a flow leave as one GSO packet (io=syscall)", gro),
		step("uring", "io=uring: multishot reads into a ring of lent buffers, a burst's writes in one io_uring_enter", uringStep),
		step("+busy-poll", "+ busy polling for "+ladderBusyPoll.String()+" after the last packet", busy),
		step("2-workers", "+ a second worker and a second queue per port", two),
		step("+defer", "+gro, with TX on its own goroutine per queue: every free is a deferred remote free", deferred),
		step("offload-off", "default configuration without the vnet header (so without GRO): the kernel segments and checksums", offOff),
		step(OffloadOn, "default configuration (+gro, io=uring where available), measured beside offload-off", defaultSoftnet),
	)
}

// reference returns the name of the variant the goals are about: softnet
// in its default configuration.
func reference(o Options) string {
	if o.Ladder {
		return OffloadOn
	}
	return Softnet
}
