package vxlan

import (
	"encoding/binary"

	"softnet.dev/buffer"
	"softnet.dev/packet"
	"softnet.dev/tun"
	"softnet.dev/vnet"
)

// maxPlain is the longest inner frame (or IP packet) that is not a GSO
// packet: a 1500-byte MTU with an Ethernet header and a VLAN tag.
const maxPlain = 1500 + 18

// markGSO gives a received TCP packet longer than an MTU of 1500 the
// virtio-net header of a GSO packet, as a TAP device gives one from a
// guest, and flags it tun.FlagVnetHdr: the egress port passes it whole
// where it takes TSO, or segments it in software. Segments carry up to
// what a 1500-byte MTU leaves. It reports false, changing nothing, for
// anything else (and such a packet goes on as it is).
//
// Such packets come in two kinds. A peer whose segmentation offload
// sent one whole datagram (over a veth, nothing segments it) leaves the
// pseudo-header sum in the checksum field, as checksum offload does: the
// packet is checksum-partial, and is marked so (NEEDS_CSUM). A peer on a
// jumbo underlay sends segments of up to its MTU with full checksums
// (its own, or its NIC's): such a packet is marked only once its
// checksum verifies, with the field turned into the pseudo-header sum
// that a partial checksum starts from, as the kernel's GRO leaves a
// packet it merged. One whose checksum does not verify is left as it
// came, for the guest to find bad: a partial checksum would be finished
// over the corrupted data downstream (by the segmenter, the guest, or a
// NIC the guest forwards through), making it look good.
func markGSO(b *buffer.Buf, layer packet.Layer) bool {
	pkt := b.Bytes()
	var h packet.Headers
	if ok, _ := packet.Parse(pkt, layer, &h); !ok || h.IPProto != packet.ProtoTCP || h.Fragment || h.L4Off == 0 || b.Headroom() < vnet.HeaderLen {
		return false
	}
	tcpLen := int(pkt[h.L4Off+12]>>4) * 4
	hdrLen := h.L4Off + tcpLen
	mss := 1500 - (h.L4Off - h.L3Off) - tcpLen
	end := h.L3Off + h.L3Len
	if tcpLen < 20 || end > len(pkt) || mss <= 0 || end-hdrLen <= mss {
		return false
	}
	v := vnet.Header{Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, HdrLen: uint16(hdrLen), GSOSize: uint16(mss), CsumStart: uint16(h.L4Off), CsumOffset: 16}
	if h.Proto == packet.EtherTypeIPv6 {
		v.GSOType = vnet.GSOTCPv6
	}
	if ok, _ := vnet.Check(v, pkt, layer); !ok {
		return false
	}
	field := pkt[h.L4Off+16 : h.L4Off+18]
	pseudo := uint16(packet.PseudoHeaderChecksum(packet.ProtoTCP, h.SrcIP, h.DstIP, end-h.L4Off))
	if binary.BigEndian.Uint16(field) != pseudo {
		if !packet.TransportChecksumOK(pkt, &h) {
			return false
		}
		binary.BigEndian.PutUint16(field, pseudo)
	}
	v.Encode(b.Frame()[b.Headroom()-vnet.HeaderLen:])
	b.SetFlags(tun.FlagVnetHdr)
	return true
}
