// Package vxlan is a VXLAN overlay port (RFC 7348): Ethernet frames
// carried in UDP between VTEPs over an IPv4 or IPv6 underlay,
// byte-compatible with the Linux kernel's vxlan device. A Port is an L2
// port.Port that the engine polls like a TAP device and a bridge sees as
// one port.
//
//	vx, err := vxlan.Open(vxlan.Config{Name: "vx0", VNI: 42,
//		Local:   netip.MustParseAddrPort("198.18.100.1:4789"),
//		Remotes: []netip.Addr{netip.MustParseAddr("198.18.100.2")}})
//	if err != nil {
//		return err
//	}
//	eng, err := engine.New(engine.Config{Pool: pool, Programs: []program.Program{bridge}}, tap, vx)
//
// It floods and learns as the kernel's vxlan does: each inner source MAC
// is learned against its remote (Table lists them), and broadcast,
// multicast and unknown destinations go to every remote. A burst is one
// recvmmsg, with UDP_GRO coalescing a flow's datagrams, and one sendmmsg
// per sending socket, a flow's equal-sized datagrams going as one
// UDP_SEGMENT entry. The underlay is untrusted: a datagram from an
// unknown source, with a bad header or another VNI is a counted drop. A
// packet longer than MTU() drops as drop.PktTooBig and is answered with
// ICMP, as the kernel's tunnels do. Config.L3 makes a routed port
// (SetRoutes), as Flannel's and Calico's backends use it.
//
// Design: docs/design.md, "VXLAN overlay ports".
package vxlan
