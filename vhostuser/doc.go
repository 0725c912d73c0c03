// Package vhostuser makes a virtio-net device of a virtual machine (or of
// any vhost-user front-end: QEMU, cloud-hypervisor, DPDK's virtio-user) a
// softnet port. The front-end shares the guest's memory with the port over
// a Unix socket, and the port moves packets in and out of the guest's
// virtqueues directly: no system call and no kernel copy per packet. It is
// the back-end side of the vhost-user protocol (QEMU's
// docs/interop/vhost-user.rst) over split virtqueues (virtio 1.x).
//
// Listen creates the socket (server mode) and serves one front-end at a
// time; when it goes away, its rings stop, its memory is unmapped, and the
// next one may connect, so a VM that reboots or a front-end that restarts
// finds the port again. In client mode (Config.Client) the port connects
// to the front-end's socket instead, and again when the front-end comes
// back. The port negotiates VIRTIO_F_VERSION_1, VIRTIO_NET_F_MRG_RXBUF,
// VIRTIO_RING_F_EVENT_IDX, VHOST_USER_F_PROTOCOL_FEATURES with REPLY_ACK
// (and MQ for Config.Queues > 1), and with Config.Offload the checksum and
// TCP segmentation offloads, mapped onto package vnet's header code as
// package tun does for TAP devices: a packet from the guest with a partial
// checksum or a GSO header is validated (vnet.Check) and marked
// tun.FlagVnetHdr; a marked packet toward a guest that did not take the
// offload is segmented or its checksum finished in software. Indirect
// descriptors and packed rings are not offered.
//
// A Port is an L2 port.Port with one queue pair per virtqueue pair: rings
// 2i (the guest's receive queue) and 2i+1 (its transmit queue). The RX
// queue walks each available descriptor chain with every index, flag,
// length and address checked against the memory table (a chain that
// points outside the guest's memory, loops or is longer than the queue is
// a counted drop, never an access out of bounds: the guest is not
// trusted), copies the packet into a buffer of a bulk get from the
// worker's cache, completes the burst's used entries with one index store
// and notifies the guest once per burst, if it asked (event index or
// flag). The TX queue
// copies packets into the guest's receive chains, merging chains for a
// packet larger than one. Packets are copied, not wrapped: the guest may
// rewrite a buffer as soon as it is used.
//
// The worker never waits for the control plane: it takes a ring for one
// burst with TryLock, and a burst that finds the control plane changing
// the ring skips it (RX) or drops as DEV_READY (TX). An idle worker sleeps
// on the RX queue's own epoll set, which holds the ring's kick eventfd:
// Arm resets it, asks for a kick (clears VIRTQ_USED_F_NO_NOTIFY, or with
// event indexes writes avail_event) and then looks at the ring once more,
// so that a packet the guest adds at any moment is either seen or kicked;
// Disarm stops asking, so a busy ring costs the guest no kicks.
//
// A memory region past the end of its file is refused, and a burst that
// faults in guest memory anyway (the front-end shrank the file) is
// recovered (debug.SetPanicOnFault): its buffers are freed and the ring is
// given up until the front-end restarts it.
//
// The host must be little-endian, as virtio 1.x rings are.
package vhostuser
