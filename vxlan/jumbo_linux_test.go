package vxlan

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
	"softnet.dev/tun"
	"softnet.dev/vnet"
)

// Over a jumbo underlay (a veth of MTU 9000 between two hosts) a peer
// sends TCP segments of 8000 bytes, longer than a guest's 1500-byte MTU,
// with full checksums, as a peer that segments to its MTU does. Each
// that verifies becomes a GSO packet whose segments, made downstream in
// software as an egress port without TSO makes them, all carry correct
// checksums. Each whose checksum is wrong (a payload byte flipped on
// the way) reaches the egress port as it came, unmarked, so that nothing
// downstream finishes a checksum over the corrupted data and the guest
// finds it bad. A segment with a partial checksum (the pseudo-header
// sum, as a peer with segmentation offload sends it) is marked as
// before.
func TestPortJumboUnderlayChecksums(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	peer, host := netnstest.New(t), netnstest.New(t)
	for _, args := range [][]string{
		{"ip", "link", "add", "ju0", "mtu", "9000", "type", "veth", "peer", "name", "ju1", "mtu", "9000", "netns", host.Name},
		{"ip", "link", "set", "ju0", "up"},
		{"ip", "-n", host.Name, "link", "set", "ju1", "up"},
	} {
		if out, err := peer.Exec(args...); err != nil {
			t.Fatal(err, out)
		}
	}
	peer.AddAddr(t, "ju0", netip.PrefixFrom(a, 24))
	host.AddAddr(t, "ju1", netip.PrefixFrom(b, 24))
	_, c := newPool(t)
	p := openPort(t, Config{Name: "b", VNI: 42, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: host.Name})
	if p.MTU() != 9000-50 {
		t.Fatalf("inner MTU %d, want %d", p.MTU(), 9000-50)
	}

	const payload = 8000
	type sent struct {
		name   string
		frame  []byte
		marked bool // a GSO packet with a partial checksum
	}
	var frames []sent
	for i, v6 := range []bool{false, true} {
		full := jumboTCP(v6, uint16(7000+10*i), payload, true)
		bad := jumboTCP(v6, uint16(7001+10*i), payload, true)
		bad[len(bad)-100] ^= 0x40 // corrupted after its checksum was computed
		frames = append(frames,
			sent{"full checksum, " + family(v6), full, true},
			sent{"wrong checksum, " + family(v6), bad, false},
			sent{"partial checksum, " + family(v6), jumboTCP(v6, uint16(7002+10*i), payload, false), true})
	}
	var ds [][]byte
	for _, f := range frames {
		ds = append(ds, datagram(0x08, 42, 0, f.frame))
	}
	sendFrom(t, peer, a, b, ds...)

	got := map[uint16]*buffer.Buf{} // by source port
	bufs := make([]*buffer.Buf, 64)
	for deadline := time.Now().Add(testTimeout); len(got) < len(frames); {
		n, err := p.RxQueue(0).Receive(c, bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, buf := range bufs[:n] {
			var h packet.Headers
			if ok, reason := packet.Parse(buf.Bytes(), packet.L2, &h); !ok {
				t.Fatalf("received a frame that does not parse: %v", reason)
			}
			got[binary.BigEndian.Uint16(buf.Bytes()[h.L4Off:])] = buf
		}
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d frames after %v; stats %+v", len(got), len(frames), testTimeout, p.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Cleanup(func() {
		for _, buf := range got {
			c.Consume(buf)
		}
	})
	segs := make([]*buffer.Buf, vnet.MaxSegments)
	for _, f := range frames {
		var want packet.Headers
		packet.Parse(f.frame, packet.L2, &want)
		buf := got[binary.BigEndian.Uint16(f.frame[want.L4Off:])]
		if buf == nil {
			t.Fatalf("%s: not received", f.name)
		}
		if !f.marked {
			if buf.Flags() != 0 || !bytes.Equal(buf.Bytes(), f.frame) {
				t.Errorf("%s: marked %v, or not as it was sent: it must reach the guest as it came", f.name, buf.Flags() == tun.FlagVnetHdr)
			}
			continue
		}
		if buf.Flags() != tun.FlagVnetHdr {
			t.Errorf("%s: not marked as a GSO packet", f.name)
			continue
		}
		h, _ := vnet.Decode(buf.Frame()[buf.Headroom()-vnet.HeaderLen : buf.Headroom()])
		n, reason := vnet.Segment(c, h, buf.Bytes(), packet.L2, segs)
		if n == 0 {
			t.Errorf("%s: not segmented: %v", f.name, reason)
			continue
		}
		var data []byte
		for i, s := range segs[:n] {
			var sh packet.Headers
			if ok, _ := packet.Parse(s.Bytes(), packet.L2, &sh); !ok || sh.L3Len > 1500 || !packet.TransportChecksumOK(s.Bytes(), &sh) {
				t.Errorf("%s: segment %d of %d: bad checksum or too long", f.name, i, n)
			}
			data = append(data, s.Bytes()[sh.L4Off+20:sh.L3Off+sh.L3Len]...)
		}
		c.ConsumeBulk(segs[:n])
		if !bytes.Equal(data, f.frame[want.L4Off+20:]) {
			t.Errorf("%s: the segments' payload differs", f.name)
		}
	}
	if s := p.Stats(); s.RxGSO != 4 || s.RxDrops.Total() != 0 {
		t.Errorf("stats %+v: want 4 GSO packets, no drop", s)
	}
}

func family(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// jumboTCP returns an Ethernet frame with a TCP segment of payload bytes
// from source port sport, over IPv4 or IPv6, whose checksum is full or
// only the pseudo-header sum.
func jumboTCP(v6 bool, sport uint16, payload int, full bool) []byte {
	src, dst := netip.MustParseAddr("198.18.9.1"), netip.MustParseAddr("198.18.9.2")
	et, ipLen := uint16(packet.EtherTypeIPv4), 20
	if v6 {
		src, dst = netip.MustParseAddr("2001:db8:9::1"), netip.MustParseAddr("2001:db8:9::2")
		et, ipLen = packet.EtherTypeIPv6, 40
	}
	b := make([]byte, 14+ipLen+20+payload)
	n := packet.PutEthernet(b, macB, macA, et)
	if v6 {
		n += packet.PutIPv6(b[n:], src, dst, packet.ProtoTCP, 64, 20+payload)
	} else {
		n += packet.PutIPv4(b[n:], src, dst, packet.ProtoTCP, 64, 20+payload)
	}
	tcp := b[n:]
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], 5001)
	binary.BigEndian.PutUint32(tcp[4:], 1)
	tcp[12] = 5 << 4
	tcp[13] = 0x18 // ACK, PSH
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	for i := range payload {
		tcp[20+i] = byte(i * 13)
	}
	binary.BigEndian.PutUint16(tcp[16:], uint16(packet.PseudoHeaderChecksum(packet.ProtoTCP, src, dst, 20+payload)))
	if full {
		vnet.FinishChecksum(vnet.Header{Flags: vnet.FlagNeedsCsum, CsumStart: uint16(n), CsumOffset: 16}, b)
	}
	return b
}
