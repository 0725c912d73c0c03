// Package lab is `softnet lab`: it measures guest-to-guest throughput on one
// machine, iperf3 between two network namespaces joined by a TUN switch,
// with the kernel's own path and Go forwarders on TUN packages measured
// beside softnet in the same run.
//
// # Variants
//
// Each variant gets two fresh network namespaces (the guests, uniquely
// named softnet-lab-<pid>-<random>-<n>a and …b) joined by one datapath:
//
//   - kernel-veth: a veth pair, the kernel's own path and the upper
//     reference;
//   - wireguard-go: two TUN devices and a two-goroutine forwarder
//     (forwarder.go) on wireguard-go's tun package, the Go peer to beat;
//   - softnet-tun: the same forwarder on softnet's tun package (FromFiles
//     and the blocking Queue API), without an engine: the two TUN
//     packages side by side;
//   - softnet: two TUN (or TAP) ports and a softnet switch opened in this
//     process with the same constructor as `softnet switch` (vswitch.Open),
//     in its default configuration or, with Options.Ladder, with its
//     machinery added one step at a time (variants.go).
//
// The guests get the same addresses whatever the datapath, from
// 198.18.0.0/15 and 2001:db8::/32 only, and each routes the other's
// subnets through its device. Traffic is iperf3 when it is installed, or
// a built-in generator and receiver whose sockets are opened inside the
// namespaces. The modes (options.go): UDP of 1472 and 64 bytes at no rate
// limit, UDP sent with UDP_SEGMENT (always the built-in generator), one
// and four TCP streams, sockperf ping-pong latency (UDP and TCP, client
// and server pinned to two CPUs), and a zero-loss throughput search
// (pdr.go: FD.io CSIT's PDR, a binary search of the offered rate).
//
// With Options.Runs above one, every variant is measured that many times,
// round by round with the order rotated, and each figure is the median of
// its runs (runs.go).
//
// # Measurements
//
// The rate, packets and loss or retransmits are the receiver's (iperf3's
// JSON, or the built-in receiver's counts). The guests' kernels say where
// UDP datagrams were lost: at the sending guest's device, whose queue the
// datapath did not drain in time, or at the receiving socket.
//
// For the datapaths that run in this process, figures are taken over a
// window inside each transfer, its first and last tenth left out, so
// that start-up and the lab's own bookkeeping stay outside: CPU time per
// Gbit forwarded (the process's, from getrusage, less the lab's idle rate
// measured just before; softnet's locked worker thread alone from
// /proc/self/task/TID/stat), and heap allocations per packet forwarded
// (runtime.MemStats.Mallocs); for UDP, the datagrams that reached the
// receiving guest's UDP layer (its snmp counters) and the CPU time per
// such datagram. The peak RSS is VmHWM, reset before each
// transfer through /proc/self/clear_refs. For softnet the pool's drop
// reasons, cache hit rate and remote frees cover the whole transfer, and
// its leak check runs when the variant is taken down.
//
// # Many ports
//
// With Options.Ports (--ports N) the lab measures one switch with many
// guests instead of the variants (ports.go): N namespaces, created eight
// at a time, each with a TUN (or TAP) port; half the ports are the
// switch's when it opens, the other half are added while it runs, as
// `softnet ctl port add` and `route add` would add them, with
// Options.Workers workers and Options.IO's I/O path. It reports: how
// many guests reach a neighbour (the first guest) over IPv4 and IPv6;
// the process's RSS after those pings and its peak (VmRSS, VmHWM reset
// before the switch opened), and the pool's mapped size, which depends
// on the workers only; the process's CPU time over Options.PortsIdle
// without traffic; the p50 and p99 of adding one more port, added and
// removed Options.PortsChurn times while two other guests ping every
// 10 ms, and that ping's loss; and iperf3 UDP and TCP between the last
// two guests crowded (on the switch with every other port) over the
// same two alone (their ports moved to a switch of their own), alone and
// crowded in turn for Options.Runs rounds. The table and JSON lines
// (experiments lab-ports-*) carry the goals: every port
// reachable, peak RSS ≤ 128 MiB, idle ≤ 1 % of a CPU, add p99 ≤ 50 ms,
// no ping lost, crowded ≥ 0.95× alone.
//
// # vhost-user
//
// With Options.Vhost (--vhost) the lab measures vhost-user ports, a VM's
// path, instead (vhost.go): DPDK's testpmd with two virtio-user ports
// loops 64- and 1500-byte frames through each back-end in turn, on the
// same CPU: softnet's two vhost-user ports bridged in one switch (its
// worker pinned as an operator pins it with --cpus); DPDK's own vhost
// back-end (a second testpmd, io forwarding), the reference; and Open
// vSwitch with DPDK (vhostovs.go), the switch operators run for VMs: a
// netdev bridge of two dpdkvhostuser ports with the NORMAL action and one
// PMD thread, in an ovsdb-server and ovs-vswitchd the lab starts in a run
// directory and network namespace of their own, skipped with a message
// naming its package when it is not installed. Options.VhostBackends
// picks some. Then softnet's TUN path at 64 bytes. Mpps, Gbit/s, each
// back-end's CPU time per packet (its process's and its forwarding
// thread's, from /proc), Open vSwitch's PMD counters (flow-cache hits,
// cycles per packet), softnet's allocations per packet and the ports'
// drops; experiments lab-vhost-64 and lab-vhost-1500, with the goals
// softnet ≥ 0.5× DPDK's back-end, ≥ 1.3× Open vSwitch and ≥ 10× its TUN
// path at 64 bytes, no allocation per packet. testpmd and Open vSwitch run
// through package internal/dpdk: hugepages of the run's own, removed with
// their files when they stop.
//
// # Clean-up
//
// Everything a run creates (namespaces, devices, processes, sockets) is
// registered for removal as it is created and removed when the variant
// ends, fails or is cancelled; processes are stopped by their PID only,
// and die with the lab if it is killed outright (PR_SET_PDEATHSIG).
package lab
