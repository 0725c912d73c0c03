// Package vnet handles the virtio-net header that Linux TUN and TAP devices
// put before every packet when they are opened with IFF_VNET_HDR, and the
// software fallbacks for the offloads that header describes: checksum
// completion and GSO segmentation.
//
// # The header
//
// Header is struct virtio_net_hdr: 10 bytes, the multi-byte fields
// little-endian, which is what TUN uses on a little-endian host unless it
// is told otherwise (TUNSETVNETBE). The mergeable-buffers and hash-report
// extensions are not used. Decode and Encode convert it.
//
// A guest that negotiated checksum offload sends a packet with
// FlagNeedsCsum set: the checksum at CsumStart+CsumOffset holds only the
// sum of the pseudo-header (Linux's CHECKSUM_PARTIAL), and whoever takes
// the packet off the guest's hands must finish it; FinishChecksum does.
// A guest that negotiated segmentation offload sends packets of up to 64
// KiB with GSOType and GSOSize set; a port that cannot pass them on whole
// splits them with Segment.
//
// # Untrusted input
//
// Everything here comes from a guest. Check validates a header against
// the packet that follows it before anything trusts either, and says with
// a drop.Reason why a packet must go; nothing that reads guest input
// panics, reads out of bounds or allocates, whatever the input. The rules
// follow the kernel's (virtio_net_hdr_to_skb and the GSO handlers behind
// it), so that a guest sees much the same through softnet as through a
// Linux bridge:
//
//   - drop.DevHdr for the header's own faults: unknown flag bits or GSO
//     types, ECN on anything but TCP, a GSO size below 8 (the kernel's
//     TCP_MIN_GSO_SIZE) or of 0xffff (the kernel's GSO_BY_FRAGS),
//     checksum offsets outside the packet; and for
//     its disagreements with the packet: a GSO type the packet does not
//     match (TCPv4 on IPv6, USO on TCP, anything on ARP), a GSO checksum
//     request that is not for the transport header's own checksum, USO
//     without a checksum request or with more than 128 segments (the
//     kernel's UDP_MAX_SEGMENTS);
//   - for a GSO packet, the reason packet.Parse gives for headers it
//     rejects (drop.HdrTrunc, drop.InvalidProto, ...);
//   - drop.InvalidProto for an IP fragment, which cannot be segmented;
//   - drop.PktTooBig for a GSO packet longer than 65535 bytes after its
//     Ethernet header.
//
// HdrLen is a hint the kernel does not trust either: it is not checked,
// and Segment recomputes the header length from the headers themselves.
// FlagDataValid is accepted and ignored, as the kernel does on transmit.
//
// # Segmentation
//
// Segment produces, from one GSO packet, the packets a NIC with TSO or USO
// would have sent: each a complete copy of the headers (Ethernet and VLAN
// tag included for TAP) followed by at most GSOSize bytes of payload, with
// lengths, IPv4 IDs, TCP sequence numbers and flags, and checksums
// rewritten as the kernel's tcp_gso_segment and __udp_gso_segment do.
// Segment makes at most MaxSegments (128) segments of one packet and
// refuses a packet that would make more with drop.GsoSeg: a guest could
// otherwise make each 64 KiB packet cost a thousand segment copies with a
// tiny GSO size. Check lets such a TCP packet pass, as the kernel does,
// since a port that takes it whole does no work for it.
//
// Legacy UDP fragmentation offload (GSOUDP) would need IP fragmentation,
// which softnet does not do: Check accepts such a packet, since the kernel
// does, but Segment refuses it with drop.GsoSeg.
//
// The transport checksums of the segments are derived like the kernel's.
// With FlagNeedsCsum set, they start from the pseudo-header sum the guest
// left in the checksum field, which covers the transport length of the
// whole packet (as Linux guests leave it): that length is taken out of the
// sum and each segment's put in. Following the guest's sum rather than
// recomputing it keeps right what only the guest knows, such as the final
// destination of a packet with a routing header; a guest that leaves a
// wrong sum gets segments with wrong checksums, as it would from Linux.
// Without the flag (allowed for TSO only), they start from the addresses
// in the IP header.
//
// Segment takes all its buffers with one all-or-nothing bulk get, before
// it copies anything: running out of buffers costs no copying and leaves
// nothing to undo.
//
// # Coalescing
//
// A Coalescer does the reverse for a device that takes GSO packets (GRO):
// it plans, over one burst, which consecutive segments of a flow can
// leave as one GSO packet, with the kernel's rules (tcp_gro_receive,
// udp_gro_receive): identical headers but for lengths, checksums, IPv4
// IDs and PSH; following sequence numbers; equal sizes but for a shorter
// last segment. It copies nothing: it gives the merged headers and each
// segment's payload for a gathering write. Untrusted input does not
// change what it is built on: a segment whose finished checksum does not
// verify is never merged, so merging cannot make a corrupted packet look
// whole, and what Segment makes of a merged packet is exactly the packets
// it was made from (FuzzCoalesce checks this).
package vnet
