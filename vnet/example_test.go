package vnet_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"softnet.dev/buffer"
	"softnet.dev/packet"
	"softnet.dev/vnet"
)

// A guest writes a 4000-byte UDP payload to its TUN device with USO: the
// port checks the header and cuts the datagram into 1400-byte ones.
func Example() {
	src := netip.MustParseAddrPort("[fd00::1]:5000")
	dst := netip.MustParseAddrPort("[fd00::2]:6000")
	payload := make([]byte, 4000)

	// What the guest writes: the virtio-net header, then the datagram with
	// only the pseudo-header sum in its checksum field.
	frame := make([]byte, vnet.HeaderLen+packet.IPv6HeaderLen+packet.UDPHeaderLen+len(payload))
	udpLen := packet.UDPHeaderLen + len(payload)
	packet.PutUDP(frame[vnet.HeaderLen:], src, dst, payload)
	pseudo := packet.PseudoHeaderChecksum(packet.ProtoUDP, src.Addr(), dst.Addr(), udpLen)
	binary.BigEndian.PutUint16(frame[vnet.HeaderLen+packet.IPv6HeaderLen+6:], uint16(pseudo))
	vnet.Header{
		Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOUDPL4, GSOSize: 1400,
		HdrLen: 48, CsumStart: 40, CsumOffset: 6,
	}.Encode(frame)

	// What the port does with it.
	h, ok := vnet.Decode(frame)
	if !ok {
		fmt.Println("drop: no virtio-net header")
		return
	}
	pkt := frame[vnet.HeaderLen:]
	if ok, reason := vnet.Check(h, pkt, packet.L3); !ok {
		fmt.Println("drop:", reason)
		return
	}
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	cache, _ := pool.NewCache(nil)
	segs := make([]*buffer.Buf, vnet.SegmentCount(h, pkt, packet.L3))
	n, reason := vnet.Segment(cache, h, pkt, packet.L3, segs)
	if n == 0 {
		fmt.Println("drop:", reason)
		return
	}
	for _, b := range segs[:n] {
		var ph packet.Headers
		packet.Parse(b.Bytes(), packet.L3, &ph)
		fmt.Printf("%d bytes, UDP checksum ok: %v\n", b.Len(), packet.TransportChecksumOK(b.Bytes(), &ph))
	}
	cache.ConsumeBulk(segs[:n])
	// Output:
	// 1448 bytes, UDP checksum ok: true
	// 1448 bytes, UDP checksum ok: true
	// 1248 bytes, UDP checksum ok: true
}
