// Package vxlan is a VXLAN overlay port (RFC 7348): Ethernet frames
// carried in UDP datagrams between VTEPs (VXLAN tunnel endpoints) over an
// IPv4 or IPv6 underlay, byte-compatible with the Linux kernel's vxlan
// device. A Port is a port.Port of layer L2 that the engine polls like a
// TAP device; a bridge sees it as one port.
//
// Receive takes the buffers for a burst with one bulk get from the
// worker's cache and receives up to a burst of datagrams with one
// recvmmsg, straight into them: the VXLAN header lands at the end of the
// headroom and the inner frame where a fresh buffer's data starts. The
// socket has UDP_GRO on: a run of one flow's datagrams arrives as one
// (each message gathers into its buffer and 64 KiB of the queue's spill
// area), and is split again, the first datagram in place and the others
// copied into buffers of their own, so that the egress port sees the
// flow's frames one after another and its GRO can coalesce them again.
// Every datagram is validated before its frame is handed over: a source
// that is not one of the configured remotes (IP_RPFILTER), a header
// without the I flag or with reserved bits (VXLAN_INVALID_HDR), another
// VNI (VXLAN_VNI_NOT_FOUND), a datagram too short for the headers
// (HDR_TRUNC) or longer than a buffer (PKT_TOO_BIG) is dropped into the
// cache with its reason and counted in the port's Stats.
//
// Flood and learn, as the kernel's vxlan: the source MAC of every inner
// frame is learned against the remote it came from, in a bounded table
// with ageing (300 s by default); Transmit sends a frame to a learned
// station to its remote only, and floods broadcast, multicast and
// unknown destinations to every remote.
//
// Transmit writes each datagram's VXLAN header into a header slot of
// the queue and sends a whole burst with sendmmsg, each datagram
// gathered from its slot and the frame's buffer without a copy. The
// outer source port comes from a hash of the inner flow (RFC 7348
// section 5, for ECMP), as the kernel's and Open vSwitch's do: the port
// has up to 16 sending UDP sockets, each bound to a source port of the
// configured range, and a flow's hash picks one, so a flow keeps its
// port and its order. A run of datagrams of one socket to one remote of
// equal length (the segments of a guest's TSO packet, a flow's burst of
// full-sized packets) is one sendmmsg entry with UDP_SEGMENT. The kernel
// computes the outer UDP checksum. GSO packets and partial checksums
// from guests' TAP devices are finished in software first (package
// vnet).
//
// A packet longer than the underlay's path MTU less the encapsulation
// (Port.MTU) is dropped as PKT_TOO_BIG and answered, as the kernel's
// tunnels do, with ICMP "fragmentation needed" or "packet too big" from
// its destination, handed over by the receive queue of the same worker.
// Frames that a peer's offloads left unfinished over a veth underlay (a
// checksum holding the pseudo-header sum, a whole TCP GSO datagram) are
// finished or handed on as GSO packets.
//
// With Config.L3 the port is routed, as Flannel's and Calico's VXLAN
// backends use the overlay: an L3 port and a VTEP with a MAC of its own,
// sending each IP packet to the remote its route names (SetRoutes) and
// taking only frames to its MAC.
//
// The port's sockets live in the underlay's network namespace
// (Config.NetNS), as package tun's devices do.
package vxlan
