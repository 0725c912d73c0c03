// Package tun makes Linux TUN and TAP devices softnet ports.
//
// Open creates a device (or attaches to an existing persistent one),
// optionally inside a named network namespace, with one nonblocking
// /dev/net/tun file descriptor per queue (IFF_MULTI_QUEUE for more than
// one). FromFiles runs a device over files opened elsewhere (by a
// privileged helper, a container runtime), learning the device from them
// (TUNGETIFF); both share the queues. A Device is a port.Port: queue i's
// RxQueue reads packets from the kernel into buffers of the polling
// worker's cache, its TxQueue writes them to the kernel. A TUN device
// carries IP packets (packet.L3), a TAP device Ethernet frames
// (packet.L2). Config.Validate checks a Config without opening anything.
//
// # Without an engine
//
// Queue(i) is the same queue for a program that runs no softnet engine,
// with blocking calls: Read and Write of byte slices, in the shape of
// wireguard-go's tun.Device (a batch of buffers, their sizes and an
// offset), and Receive and Transmit of softnet buffers. A read blocks
// (poll) until a packet is there, then takes what else waits, up to the
// batch, without blocking; Close ends blocked reads. Read splits GSO
// packets into segments and finishes partial checksums, so that the
// caller sees plain packets, unless Config.KeepGSO asks for them whole
// with their virtio-net header; Write coalesces runs of a flow into GSO
// packets with Config.GRO, through the same gathering write as Transmit.
//
// # Offloads
//
// With Config.Offload the device is opened with IFF_VNET_HDR and
// TUNSETOFFLOAD: every packet is preceded by a 10-byte virtio-net header
// (package vnet), and the kernel hands over unsegmented GSO packets of up
// to 64 KiB and packets whose checksum is left to finish. Receive reads
// the header into the headroom, immediately before the data, validates
// it, and if the packet still needs work (GSO or a partial checksum) marks
// the buffer with FlagVnetHdr, leaving the header where it is. A transmit
// queue that gets a marked packet writes it with its header in one write,
// without a copy, if its own device accepted that offload; otherwise it
// segments it (vnet.Segment) or finishes its checksum (vnet.FinishChecksum)
// in software. A GSO packet that would make more than vnet.MaxSegments
// segments (a forged header: 64 KiB in segments of 60 bytes) is dropped
// with drop.GsoSeg instead, so one packet costs at most that many writes.
// Unmarked packets go out with a zero header on a device with IFF_VNET_HDR
// and as they are on one without.
//
// With Config.GRO as well, Transmit coalesces each burst before writing
// it: runs of segments of one TCP or UDP flow (vnet.Coalescer) leave as one
// TSO or USO packet, written with one writev of the merged headers and
// every segment's payload, without a copy. It pays where small packets
// reach a device that takes large ones: datagrams from a guest, which the
// kernel never batches, or segments from a device without offloads. The
// bursts are the engine's (up to its batch size per port), so GRO adds no
// waiting. Stats counts the GSO packets built (Coalesced) and the packets
// they carried (CoalescedSegs).
//
// A device with offloads reads every packet into a buffer of the class
// that holds a 64 KiB frame (buffer.ClassGSO in the default pool), since
// the size of the next packet is unknown before the read: the number of
// such buffers bounds the packets in flight from offloading devices. If no
// class holds Info().MaxFrame (a TAP frame of 65535+18 bytes does not fit
// the default pool's 64 KiB), the largest class is used and a longer
// frame is dropped as drop.PktTooBig.
//
// # I/O paths
//
// Config.IO picks how queues move packets. On the system-call path a
// queue reads one packet per read(2) and writes one per write(2) or
// writev(2). On the io_uring path (the default where the kernel has
// multishot read, Linux 6.7, and lets this process use io_uring; Device.IO
// says which path was chosen and why not io_uring) the RX queues a worker
// serves share one ring, the worker's: each queue has a multishot read of
// its file into a provided-buffer group lent from the worker's cache (at
// most RingBuffers buffers per worker and class, whatever the number of
// queues), and the ring enters the kernel only when it has work; each TX
// queue has a ring into which Transmit gathers a burst's writes (the same
// GRO runs, whole offloaded packets and drop reasons as the system-call
// path) and submits them with one io_uring_enter, which also reaps them
// since a TUN write completes inline. Packets that need segmenting or
// checksumming in software take the system-call path, in order.
//
// Every buffer lent to the kernel is accounted for: in the ring until a
// completion names it, then a packet in its queue's FIFO or a drop with
// its reason. An empty buffer group ends a multishot read with ENOBUFS,
// counted as drop.NoMem on that queue, which is re-armed once buffers are
// lent again. The RX queues' FD is the eventfd their ring signals, shared
// by the worker's queues (port.Notifier tells the worker which queue has
// packets). A worker that attaches the queues (port.Attacher: the engine
// does, on its locked thread) gets a single-issuer DEFER_TASKRUN ring;
// Detach cancels a queue's read, and the last one takes every lent buffer
// back. A queue used without attaching gets a ring of its own, which
// Close tears down.
//
// # Namespaces
//
// Config.NetNS names a network namespace as `ip netns add` makes them, or
// gives the path of a namespace file (/proc/PID/ns/net), as container
// runtimes hand them over.
// Everything Open does in it runs on a locked OS thread switched into it;
// the file descriptors and the netlink socket opened there stay bound to
// it, and the thread is switched back (or, if that fails, destroyed).
//
// # Life cycle
//
// A device that Open created is not persistent: closing its last file
// descriptor removes it, which Close checks. A device that existed before
// is left as it was found, except for the device flags TUNSETIFF records
// (IFF_VNET_HDR) and the offloads it was given: if Open set it up, Close
// sets it down again, and an MTU that Open changed is restored.
//
// While it is open, a device's link is followed through an rtnetlink
// subscription in its namespace (Config.Log hears of every change). A
// link set down is a passing state, as operators bounce interfaces:
// Transmit drops what it is given as drop.DevReady, without writing, and
// without an error; Receive gets nothing new; once the link is up again
// packets flow within the moment the kernel takes to tell us. (A write
// that fails with EIO before the news arrives is dropped the same way.)
// On a device without a vnet header, the largest frame (Info().MaxFrame)
// follows the MTU, for receive buffers and for what Transmit lets pass;
// a TAP frame may be 18 bytes longer than the MTU, for its Ethernet
// header and one 802.1Q tag (which the kernel's bridge lets pass outside
// the MTU too). A
// device deleted underneath a port (or moved out of its namespace) makes
// Receive and Transmit return an error that matches port.ErrDown: that
// ends the port.
//
// Receive and Transmit, and the Queue calls, allocate nothing per packet.
package tun
