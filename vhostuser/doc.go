// Package vhostuser makes a virtual machine's virtio-net device a softnet
// port: the back-end side of the vhost-user protocol (QEMU's
// docs/interop/vhost-user.rst) over split virtqueues. The front-end (QEMU,
// cloud-hypervisor, DPDK's virtio-user) shares the guest's memory over a
// Unix socket, and the port moves packets in and out of the guest's rings
// itself, with no system call and no kernel copy per packet.
//
//	p, err := vhostuser.Listen(vhostuser.Config{Name: "vm1", Socket: "/run/vm1.sock", Offload: true})
//	if err != nil {
//		return err
//	}
//	eng, err := engine.New(engine.Config{Pool: pool, Programs: chain}, tap, p)
//
// Listen serves one front-end at a time and the next after it goes away,
// so a VM that reboots finds the port again; Config.Client connects to
// the front-end's socket instead. A Port is an L2 port.Port with a queue
// pair per virtqueue pair. The guest and the front-end are not trusted:
// every descriptor is checked against the memory table, and a bad chain
// is a counted drop, never an access out of bounds; guest memory is
// touched only under a fault guard, and no descriptor of the front-end's
// is waited on. Whatever is refused is counted by reason
// (Stats.Refusals). The host must be little-endian.
//
// Design: docs/design.md, "vhost-user ports".
package vhostuser
