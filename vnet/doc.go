// Package vnet handles the virtio-net header (struct virtio_net_hdr) that
// TUN and TAP devices opened with IFF_VNET_HDR and vhost-user guests put
// before a packet, and does in software the offloads it describes.
//
// Everything here comes from a guest and is checked before it is
// trusted: Check validates a header against its packet and gives the
// drop.Reason for one that must go, following the kernel's
// virtio_net_hdr_to_skb. Then a port that cannot pass the packet on
// whole finishes its checksum or splits it:
//
//	h, _ := vnet.Decode(frame)
//	if ok, reason := vnet.Check(h, pkt, packet.L3); !ok {
//		cache.Drop(b, reason)
//	}
//	n, reason := vnet.Segment(cache, h, pkt, packet.L3, segs) // or FinishChecksum
//
// A Coalescer does the reverse (GRO) for a device that takes GSO
// packets: it plans which segments of a flow in a burst can leave as one
// packet, with the kernel's merge rules, without copying anything.
// Nothing that reads guest input panics, reads out of bounds or
// allocates.
//
// Design: docs/design.md, "TUN and TAP devices, offloads, GSO and GRO".
package vnet
