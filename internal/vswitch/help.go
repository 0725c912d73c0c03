package vswitch

import (
	"strings"

	"softnet.dev/internal/vswitch/portkind"
)

// commonHelp describes the options every port has, as PortHelp lists
// them.
const commonHelp = `  netns     a named network namespace (ip netns add NS) to put it in, or
            a namespace file's path (/proc/PID/ns/net)
  dev       the device's name in the namespace, if not NAME: port names
            are unique in the switch, device names in their namespace
  queues    queues (default: one per worker)
  offload   virtio-net header with checksum and segmentation offloads (on)
  gro       coalesce each burst's segments of a TCP or UDP flow into one
            GSO packet for this port: one write instead of many (on with
            offload; needs it)
  io        uring or syscall: how a device's queues move packets
            (default: io_uring where the kernel allows it; the log says
            which)
  allow     source addresses the guest may send from, and claim in ARP
            and neighbour discovery; others are dropped as IP_RPFILTER
            (ARP_SPOOF, IPV6_NDISC_SPOOF). Default: the prefixes routed to
            a routed port, any on a bridged one; allow=any for a guest
            that routes for others
  mac       the source MACs a bridged port's guest may use (MAC_SPOOF),
            their EUI-64 link-local addresses allowed too (default any);
            with allow= and no mac=, list fe80::/64 for IPv6 link-local
            traffic (neighbour and router discovery)
  dhcp-server  let DHCP/DHCPv6 server messages out of the guest (off:
            dropped as DHCP_SERVER)
  router    let IPv6 router advertisements and redirects out of the
            guest (off: dropped as IPV6_RA_GUARD, RFC 6105's RA guard);
            while no port is a router, guests' router solicitations and
            MLDv2/IGMPv3 reports (to ff02::2, ff02::16, 224.0.0.2,
            224.0.0.22) drop as NO_ROUTE instead of reaching every port
  ingress-rate, ingress-burst  police what the switch receives from the
            port (what its guest sends; the CNI bandwidth capability's
            egressRate): bits per second and bits, with k, M, G or T
            (100M); over it dropped as POLICE_INGRESS. Burst default:
            250 ms of the rate (at least 64 KiB), which TCP needs to
            hold its rate through a policer
  egress-rate, egress-burst  the same for what the switch sends to the
            port (what its guest receives; CNI's ingressRate):
            POLICE_EGRESS. Both change live (SIGHUP, ctl port set)
`

// PortHelp describes the port specs, every kind's and the options every
// port has, for `softnet switch --help`.
func PortHelp() string {
	var b strings.Builder
	b.WriteString(`A port is KIND:NAME[,OPTION=VALUE...]: a kind, its name, the kind's own
options and those of the options every port has that its kind takes.
The kinds:
`)
	for _, k := range kinds {
		b.WriteString(k.Help)
	}
	b.WriteString("The options every port has:\n")
	b.WriteString(commonHelp)
	return b.String()
}

// PortUsage is the --port flag's usage: the kinds' shortest specs and
// the options every port has.
func PortUsage() string {
	return kindList(func(k *portkind.Kind) string { return k.Synopsis }) +
		" (see above) with ,netns=NS ,dev=IFNAME ,queues=N ,offload=on|off ,gro=on|off ,io=uring|syscall ,allow=PREFIX[+...]|any ,mac=MAC[+...] ,dhcp-server=on|off ,router=on|off ,ingress-rate=BITS/S ,ingress-burst=BITS ,egress-rate=BITS/S ,egress-burst=BITS"
}

// RouteUsage is the --route flag's usage.
func RouteUsage() string {
	return "a static route PREFIX=PORT (routed ports; PREFIX=PORT,via=REMOTE for a routed " + relayKinds() + " port)"
}
