package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"softnet.dev/internal/lab"
	"softnet.dev/internal/vswitch"
)

func newLabCmd() *cobra.Command {
	var (
		opts        lab.Options
		modes       []string
		traffic     string
		asJSON      bool
		jsonFile    string
		plot        string
		cpuProfile  string
		check       bool
		quiet       bool
		ioPath      string
		overlay     bool
		overlayMode string
		// --bandwidth-rates, as written
		bandwidthRates []string
	)
	cmd := &cobra.Command{
		Use:   "lab [flags]",
		Short: "Measure guest-to-guest throughput through softnet, the kernel and Go TUN forwarders",
		Long: `lab measures guest-to-guest throughput on this machine: two guests (network
namespaces with unique names) joined by a datapath, iperf3 between them, and
everything it created removed afterwards, also on failure or Ctrl-C. Needs
root.

Modes (--modes, default udp,udp64,tcp):
  udp, udp64    1472- and 64-byte datagrams at no rate limit
  udp-gso       1472-byte datagrams sent 44 per send with UDP_SEGMENT, as
                QUIC stacks send (the built-in generator)
  tcp, tcp4     one stream; four parallel streams (iperf3 -P 4)
  latency-udp, latency-tcp (or latency: both)
                sockperf ping-pong, 64 B, client and server pinned to two
                CPUs: p50 and p99 one way; skipped without sockperf
  pdr, pdr64    zero-loss throughput (FD.io CSIT's PDR): binary search of
                the offered rate for the highest with loss <= 0.5%

Variants, each with namespaces of its own:
  kernel-veth   a veth pair: the kernel's own path (--peers)
  wireguard-go  a two-goroutine forwarder on wireguard-go's tun package
                (--peers; not with --tap)
  softnet-tun   the same forwarder on softnet's tun package, no engine
                (--peers)
  softnet       an in-process softnet switch with TUN ports (--tap: TAP),
                in its default configuration, or with --ladder:
                no-cache/batch-1, napi-cache, +bulk, +gro (io=syscall
                up to here), uring, +busy-poll, 2-workers, +defer,
                offload-off, offload-on

For each variant and mode lab prints Gbit/s received (or latency) and its
ratios to kernel-veth and wireguard-go, packets/s, loss or retransmits, and
for the in-process datapaths the CPU time per Gbit and per forwarded UDP
datagram, allocations per packet and peak RSS; for
softnet also drops by reason, the cache hit rate, remote frees and the leak
check, then the goals. Without iperf3 a built-in generator and receiver
(Go sockets in the namespaces) send the same two kinds of traffic.

With --ports N lab measures many ports on one switch instead: N guests
(namespaces, made 8 at a time), half of them ports at start, half added
live; every guest pings its neighbour (IPv4 and IPv6); the process's RSS
and the pool's size; idle CPU over --idle; the time to add one more port
(--churn times, added and removed) while two other guests ping; udp and
tcp between two guests with N-2 idle ports against the same two alone,
--runs rounds interleaved. --workers and --io set that switch's workers
and I/O path.

With --overlay (--overlay-mode l2, the default; l3; or both: bridged,
routed, or each in turn) lab measures guests across
two hosts instead: two namespaces joined by a veth pair (the underlay,
198.18.100.0/24, or 2001:db8:100::/64 with --underlay-ipv6, MTU 1500), each
with a guest behind it whose MTU is the overlay's (1450, 1430 over IPv6).
udp, udp64 and tcp (--modes: udp, udp64, tcp, tcp4) go from the guest on
host A to the guest on host B in three configurations, each on namespaces
of its own: softnet-softnet (each host runs this binary as a softnet
switch process), softnet-kernel (host B has the kernel's vxlan device)
and kernel-kernel, the reference. l2: TAP guests bridged onto a vxlan port,
and the kernel's vxlan bridged with a veth to the guest; l3: TUN guests
routed to a mode=l3 vxlan port, and the kernel's vxlan routed as
Flannel's VXLAN backend configures it. UDP datagrams fill the guests'
MTU. Besides the rates and their ratios to kernel-kernel lab reports the
switches' CPU time, their vxlan ports' system calls per datagram (from
the control API's statistics) and their heap allocations per datagram
(also from the control API, the lab's own request subtracted).

With --vhost lab measures vhost-user ports, for VMs, instead: DPDK's
dpdk-testpmd (Debian package dpdk-dev) with two virtio-user ports sends
64- and 1500-byte frames in a loop through (a) softnet's two vhost-user
ports bridged in one switch, its worker on CPU 0 (as with switch --cpus 0),
(b) DPDK's own vhost back-end (testpmd net_vhost ports, io forwarding,
on CPU 0), the reference, and (c) Open vSwitch with DPDK (Debian package
openvswitch-switch-dpdk; skipped with a message when it is not installed):
a netdev bridge of two dpdkvhostuser ports, the NORMAL action, one PMD
thread on CPU 0. Lab runs its own ovsdb-server and ovs-vswitchd, in a run
directory and a network namespace of their own, and never touches a
system Open vSwitch. --vhost-backends picks some of the three;
--vhost-unpinned leaves softnet's worker to the scheduler. It reports
Mpps, Gbit/s, each back-end's CPU time per packet (the process's and its
forwarding thread's), where its forwarding thread and the front-end's ran
(CPUs sampled every 10 ms, context switches), Open vSwitch's flow-cache
hits and cycles per packet, allocations per packet, the ports' drops,
softnet's worker rounds and sleeps, and softnet's TUN path at 64 bytes in
the same run. It takes
512 MiB of 2 MiB hugepages, and 256 MiB more for Open vSwitch
(vm.nr_hugepages raised by as much, lowered after).

With --bandwidth lab measures rate limits instead: at each of
--bandwidth-rates (default 10M,100M,1G bit/s, each with softnet's default
burst), iperf3 TCP and UDP (offered at 1.5x the rate) both ways between
a pod and its host side, through softnet (two TUN ports, the pod's with
ingress-rate and egress-rate) and through a veth pair shaped by the
reference CNI bandwidth plugin (containernetworking/plugins v1.10.0,
built at run time with go install from the module proxy, or
--bandwidth-plugin PATH) with the same limits. It reports each rate
received over the set rate, softnet's TCP goodput over tc's and its
policer's drops.

With --afxdp lab measures afxdp ports on the veth topology of a pod
network: two guests, each with a veth whose host end is in a host
namespace, joined there by (a) softnet's afxdp ports (one worker), (b)
the kernel's bridge, the reference, and (c) Open vSwitch's afxdp netdev
(type=afxdp, native XDP, a netdev bridge without DPDK; Debian package
openvswitch-switch-dpdk, skipped with a message when it is not
installed), and (d) softnet's TAP path, TAP devices in the guests. Modes
udp64 and tcp by default. Then it measures the idle CPU of a switch with
100 afxdp ports on veths.`,
		Example: `  sudo softnet lab
  sudo softnet lab --ladder --plot ladder.svg
  sudo softnet lab --duration 5s --modes udp --json > udp.jsonl
  sudo softnet lab --duration 5s --runs 3 --modes udp,udp64,udp-gso,tcp,tcp4,latency
  sudo softnet lab --ladder --json-file ladder.jsonl   # the table, and the JSON lines in a file
  sudo softnet lab --ladder --cpuprofile lab.prof   # go tool pprof -tagfocus variant=+bulk lab.prof
  sudo softnet lab --ports 250 --workers 2 --io syscall --tap
  sudo softnet lab --overlay --overlay-mode both --runs 3
  sudo softnet lab --overlay --overlay-mode l3 --underlay-ipv6 --json
  sudo softnet lab --afxdp --duration 5s
  sudo softnet lab --afxdp --afxdp-mtu 9000   # jumbo frames on every configuration's devices
  sudo softnet lab --vhost --duration 10s
  sudo softnet lab --bandwidth --duration 5s
  sudo softnet lab --vhost --vhost-backends softnet,ovs-dpdk`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("lab takes no arguments, got %q", args)}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			ms, err := lab.ParseModes(modes)
			if err != nil {
				return usageError{err}
			}
			if err := opts.IO.UnmarshalText([]byte(ioPath)); err != nil {
				return usageError{fmt.Errorf("--io: %w", err)}
			}
			if opts.Ports > 0 {
				for _, name := range []string{"modes", "ladder", "plot", "ipv6", "pdr-steps", "pdr-trial"} {
					if cmd.Flags().Changed(name) {
						return usageError{fmt.Errorf("--%s does not apply to --ports (its transfers are udp and tcp over IPv4)", name)}
					}
				}
			}
			if overlay || cmd.Flags().Changed("overlay-mode") {
				if opts.Overlay, err = lab.ParseOverlay(overlayMode); err != nil {
					return usageError{fmt.Errorf("--overlay-mode: %w", err)}
				}
				for _, name := range []string{"ladder", "plot", "tap", "peers", "ports", "pdr-steps", "pdr-trial"} {
					if cmd.Flags().Changed(name) {
						return usageError{fmt.Errorf("--%s does not apply to --overlay", name)}
					}
				}
			}
			for _, r := range bandwidthRates {
				n, err := vswitch.ParseBits("--bandwidth-rates", r)
				if err != nil {
					return usageError{err}
				}
				opts.BandwidthRates = append(opts.BandwidthRates, n)
			}
			if opts.Bandwidth {
				for _, name := range []string{"overlay", "overlay-mode", "underlay-ipv6", "modes", "ladder", "plot", "ipv6", "pdr-steps", "pdr-trial", "runs", "tap", "peers", "ports", "workers", "io", "idle", "churn", "vhost", "vhost-backends", "vhost-unpinned", "afxdp", "traffic"} {
					if cmd.Flags().Changed(name) {
						return usageError{fmt.Errorf("--%s does not apply to --bandwidth (its configurations and traffic are its own)", name)}
					}
				}
			}
			if opts.AFXDP {
				for _, name := range []string{"overlay", "overlay-mode", "underlay-ipv6", "ladder", "plot", "pdr-steps", "pdr-trial", "tap", "peers", "ports", "workers", "io", "idle", "churn", "vhost", "vhost-backends", "vhost-unpinned", "bandwidth"} {
					if cmd.Flags().Changed(name) {
						return usageError{fmt.Errorf("--%s does not apply to --afxdp (its configurations are its own)", name)}
					}
				}
				if !cmd.Flags().Changed("modes") {
					ms = lab.AFXDPModes
				}
			}
			if opts.Vhost {
				for _, name := range []string{"overlay", "overlay-mode", "underlay-ipv6", "modes", "ladder", "plot", "ipv6", "pdr-steps", "pdr-trial", "runs", "tap", "peers", "ports", "workers", "io", "idle", "churn"} {
					if cmd.Flags().Changed(name) {
						return usageError{fmt.Errorf("--%s does not apply to --vhost (its configurations and traffic are its own)", name)}
					}
				}
			}
			opts.Modes = ms
			opts.Traffic = lab.Traffic(traffic)
			if opts.Runs < 1 {
				return usageError{fmt.Errorf("--runs %d: want at least 1", opts.Runs)}
			}
			if opts.Duration <= 0 {
				return usageError{fmt.Errorf("--duration %v: want whole seconds, at least 1s", opts.Duration)}
			}
			if err := opts.Validate(); err != nil {
				return usageError{err}
			}
			if plot != "" {
				if err := lab.CheckPlotName(plot); err != nil {
					return usageError{err}
				}
			}
			if jsonFile != "" && jsonFile == plot {
				return usageError{fmt.Errorf("--json-file and --plot name the same file %s", plot)}
			}
			stderr := cmd.ErrOrStderr()
			if !quiet {
				opts.Progress = func(msg string) { fmt.Fprintln(stderr, "lab:", msg) }
			}
			opts.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			rep, runErr := lab.Run(cmd.Context(), opts)
			if rep != nil && (len(rep.Variants) > 0 || rep.Ports != nil || len(rep.Overlay) > 0 || rep.Vhost != nil || rep.Bandwidth != nil || rep.AFXDP != nil) {
				if err := writeLabReport(cmd.OutOrStdout(), rep, asJSON, jsonFile, plot); err != nil {
					return errors.Join(runErr, err)
				}
			}
			if runErr != nil {
				return runErr
			}
			if missed := lab.Missed(rep.Goals()); check && len(missed) > 0 {
				return &exitError{code: exitGoalMissed, err: fmt.Errorf("goals not met:\n  %s", strings.Join(missed, "\n  "))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&opts.Duration, "duration", lab.DefaultDuration, "length of each transfer (whole seconds)")
	f.BoolVar(&opts.TAP, "tap", false, "TAP ports bridged by MAC address instead of routed TUN ports")
	f.BoolVar(&opts.Peers, "peers", true, "also measure kernel-veth, wireguard-go and softnet-tun")
	f.BoolVar(&opts.Ladder, "ladder", false, "softnet's ladder (machinery added step by step) instead of its default configuration")
	f.StringSliceVar(&modes, "modes", []string{"udp", "udp64", "tcp"}, "traffic modes: udp, udp64, udp-gso, tcp, tcp4, latency-udp, latency-tcp, pdr, pdr64; latency (both), all")
	f.IntVar(&opts.Runs, "runs", 1, "measure each variant N times, interleaved, and report medians and the spread")
	f.IntVar(&opts.PDRSteps, "pdr-steps", lab.DefaultPDRSteps, "trials of a pdr search (one at no rate limit, then halvings)")
	f.DurationVar(&opts.PDRTrial, "pdr-trial", lab.DefaultPDRTrial, "length of each pdr trial (whole seconds)")
	f.StringVar(&traffic, "traffic", "auto", "traffic generator: auto (iperf3 if installed), iperf3 or builtin")
	f.BoolVar(&opts.IPv6, "ipv6", false, "send the traffic over the guests' IPv6 addresses")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per line instead of tables")
	f.StringVar(&jsonFile, "json-file", "", "also write the JSON lines to FILE")
	f.StringVar(&plot, "plot", "", "also draw the variants as a bar chart in FILE.svg")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to FILE (goroutines labelled by variant)")
	f.BoolVar(&check, "check", false, "exit with status 3 if a goal is not met")
	f.IntVar(&opts.Ports, "ports", 0, fmt.Sprintf("measure N guests on one switch (%d to %d) instead of the variants", lab.MinPorts, lab.MaxPorts))
	f.IntVar(&opts.Workers, "workers", 0, "--ports: the switch's workers (default 1)")
	f.StringVar(&ioPath, "io", "auto", "--ports: the ports' I/O path: auto (io_uring where the kernel has it), uring or syscall")
	f.DurationVar(&opts.PortsIdle, "idle", 0, fmt.Sprintf("--ports: how long the idle switch's CPU is measured (default %v)", lab.DefaultPortsIdle))
	f.IntVar(&opts.PortsChurn, "churn", 0, fmt.Sprintf("--ports: how many times one more port is added and removed (default %d)", lab.DefaultPortsChurn))
	f.BoolVar(&overlay, "overlay", false, "measure guests across two hosts over VXLAN instead of the variants")
	f.StringVar(&overlayMode, "overlay-mode", "l2", "--overlay: l2 (bridged), l3 (routed) or both")
	f.BoolVar(&opts.UnderlayIPv6, "underlay-ipv6", false, "--overlay: an IPv6 underlay (2001:db8:100::/64) instead of IPv4")
	f.IntVar(&opts.AFXDPMTU, "afxdp-mtu", 0, "with --afxdp: the MTU of the guests' devices and the veths' host ends, for every configuration (default 1500; 9000: jumbo frames, which afxdp ports receive in pieces)")
	f.BoolVar(&opts.AFXDP, "afxdp", false, "measure afxdp ports on two guests' veths against softnet's TAP path, the kernel's bridge and Open vSwitch's afxdp netdev, and a switch of 100 idle afxdp ports, instead of the variants")
	f.BoolVar(&opts.Vhost, "vhost", false, "measure vhost-user ports with DPDK's testpmd against DPDK's own back-end and Open vSwitch with DPDK instead of the variants")
	f.StringSliceVar(&opts.VhostBackends, "vhost-backends", nil, "--vhost: the back-ends to measure, of softnet, dpdk-vhost and ovs-dpdk (default all)")
	f.BoolVar(&opts.VhostUnpinned, "vhost-unpinned", false, "--vhost: leave softnet's worker to the scheduler (softnet switch without --cpus) instead of pinning it to CPU 0")
	f.BoolVar(&opts.Bandwidth, "bandwidth", false, "measure softnet's rate limits against the reference CNI bandwidth plugin's tc on a veth pair instead of the variants")
	f.StringSliceVar(&bandwidthRates, "bandwidth-rates", nil, "--bandwidth: the rates, bits per second with k, M, G (default 10M,100M,1G)")
	f.DurationVar(&opts.BandwidthBurst, "bandwidth-burst", 0, "--bandwidth: each limit's burst, as a time at its rate (default: softnet's default burst, 250 ms of the rate and at least 64 KiB)")
	f.StringVar(&opts.BandwidthPlugin, "bandwidth-plugin", "", "--bandwidth: the reference plugin's executable (default: built at run time with go install from the module proxy)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	return cmd
}

// writeLabReport prints the report, as tables or JSON lines, and writes
// the files asked for.
func writeLabReport(w io.Writer, rep *lab.Report, asJSON bool, jsonFile, plot string) error {
	var err error
	if asJSON {
		err = lab.WriteJSON(w, rep)
	} else {
		err = lab.WriteTable(w, rep)
	}
	if err != nil {
		return err
	}
	if jsonFile != "" {
		if err := writeFile(jsonFile, func(w io.Writer) error { return lab.WriteJSON(w, rep) }); err != nil {
			return fmt.Errorf("json file: %w", err)
		}
	}
	if plot != "" {
		if err := writeFile(plot, func(w io.Writer) error { return lab.WriteSVG(w, rep) }); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
	}
	return nil
}

// writeFile creates name and fills it with write.
func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// startCPUProfile profiles the process until the returned stop is called.
func startCPUProfile(name string) (stop func(), err error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
