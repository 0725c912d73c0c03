package packet

import (
	"net/netip"
	"testing"

	"softnet.dev/drop"
)

// FuzzParse parses every input both as an Ethernet frame and as a TUN
// packet and checks that Parse stays within the buffer, reports only the
// documented reasons, and agrees with itself across the two layers. It
// also runs the functions that trust a parsed Headers on the result.
func FuzzParse(f *testing.F) {
	for _, c := range goodCases() {
		f.Add(c.data)
		f.Add(c.data[:len(c.data)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{0x4f})
	f.Add(ipv6Packet(ipv6DestOptions, []byte{ipv6DestOptions, 0, 0, 0, 0, 0, 0, 0, ipv6HopByHop, 0}))
	mapped := ipv6Packet(ProtoUDP, make([]byte, UDPHeaderLen))
	copy(mapped[8:], netip.MustParseAddr("::ffff:198.18.0.1").AsSlice())
	f.Add(mapped)

	f.Fuzz(func(t *testing.T, data []byte) {
		var l2, l3 Headers
		ok2, reason2 := Parse(data, L2, &l2)
		checkParsed(t, data, L2, &l2, ok2, reason2)
		ok, reason := Parse(data, L3, &l3)
		checkParsed(t, data, L3, &l3, ok, reason)
		checkSnapshots(t, data, L2, &l2, ok2, reason2)
		checkSnapshots(t, data, L3, &l3, ok, reason)

		if len(data) == 0 {
			return
		}
		var etherType uint16
		switch data[0] >> 4 {
		case 4:
			etherType = EtherTypeIPv4
		case 6:
			etherType = EtherTypeIPv6
		default:
			return
		}
		for _, tci := range []uint16{0, 0x2123} {
			frame := ethernetFrame(etherType, tci, data)
			var got Headers
			gotOK, gotReason := Parse(frame, L2, &got)
			switch {
			case gotOK != ok:
				t.Fatalf("VLAN %#x: from L2 ok=%v (%v), from L3 ok=%v (%v)", tci, gotOK, gotReason, ok, reason)
			case !ok && gotReason != reason:
				t.Fatalf("VLAN %#x: from L2 %v, from L3 %v", tci, gotReason, reason)
			case ok && got != shiftedToL2(l3, etherType, tci):
				t.Fatalf("VLAN %#x:\nfrom L2 %+v\nfrom L3 %+v", tci, got, l3)
			}
		}
	})
}

// checkSnapshots parses snapshots of data, cut at a few places, and
// checks them against what Parse made of the whole: the same headers once
// the snapshot holds them, HdrTrunc before, and a malformed packet never
// parsed.
func checkSnapshots(t *testing.T, data []byte, from Layer, whole *Headers, ok bool, reason drop.Reason) {
	t.Helper()
	for _, n := range []int{0, 1, 14, 20, 34, 40, 54, 60, 128, len(data) / 2, len(data) - 1, len(data)} {
		if n < 0 || n > len(data) {
			continue
		}
		var h Headers
		sok, sreason := ParseSnapshot(data[:n], len(data), from, &h)
		switch {
		case n == len(data) && (sok != ok || !ok && sreason != reason || ok && h != *whole):
			t.Fatalf("layer %d: the whole packet as a snapshot: ok=%v %v %+v, Parse: ok=%v %v %+v", from, sok, sreason, h, ok, reason, *whole)
		case sok && !ok:
			t.Fatalf("layer %d: a snapshot of %d bytes parses, the packet fails: %v", from, n, reason)
		case sok && h != *whole:
			t.Fatalf("layer %d: snapshot of %d bytes:\n got %+v\nwant %+v", from, n, h, *whole)
		case !sok && sreason != drop.HdrTrunc && sreason != reason:
			t.Fatalf("layer %d: snapshot of %d bytes: %v; the whole packet: ok=%v %v", from, n, sreason, ok, reason)
		}
	}
}

// checkParsed checks what Parse returned for data, and runs the functions
// that take a parsed Headers.
func checkParsed(t *testing.T, data []byte, from Layer, h *Headers, ok bool, reason drop.Reason) {
	t.Helper()
	if !ok {
		switch reason {
		case drop.PktTooSmall, drop.HdrTrunc, drop.InvalidProto, drop.UnhandledProto:
		default:
			t.Fatalf("layer %d: undocumented reason %v", from, reason)
		}
		return
	}

	end := h.L3Off + h.L3Len
	switch {
	case from == L3 && h.L3Off != 0,
		from == L2 && h.L3Off != EthernetHeaderLen && h.L3Off != EthernetHeaderLen+VLANTagLen:
		t.Fatalf("layer %d: L3Off %d", from, h.L3Off)
	case h.L3Len <= 0 || end > len(data):
		t.Fatalf("layer %d: L3 [%d, %d) of %d bytes", from, h.L3Off, end, len(data))
	case from == L3 && (h.EtherType != 0 || h.Dst != [6]byte{} || h.Src != [6]byte{} || h.VLAN != 0):
		t.Fatalf("layer 3: Ethernet fields set: %+v", h)
	case from == L2 && h.EtherType != h.Proto:
		t.Fatalf("EtherType %#04x, Proto %#04x", h.EtherType, h.Proto)
	}
	switch h.Proto {
	case EtherTypeIPv4, EtherTypeARP:
		if !h.SrcIP.Is4() || !h.DstIP.Is4() {
			t.Fatalf("Proto %#04x with addresses %v, %v", h.Proto, h.SrcIP, h.DstIP)
		}
	case EtherTypeIPv6:
		// An IPv4-mapped address can arrive in an IPv6 header (Parse
		// does not judge addresses) and must stay a 16-byte address: the
		// L3 program keeps such hosts apart from IPv4 ones.
		if !h.SrcIP.Is6() || !h.DstIP.Is6() {
			t.Fatalf("IPv6 with addresses %v, %v", h.SrcIP, h.DstIP)
		}
	default:
		t.Fatalf("Proto %#04x", h.Proto)
	}

	if h.L4Off != 0 {
		minLen := map[uint8]int{ProtoUDP: UDPHeaderLen, ProtoTCP: TCPHeaderLen, ProtoICMP: ICMPHeaderLen, ProtoICMPv6: ICMPHeaderLen}[h.IPProto]
		if minLen == 0 || h.L4Off <= h.L3Off || h.L4Off+minLen > end || h.L4Off >= len(data) {
			t.Fatalf("IPProto %d at L4Off %d, L3 [%d, %d)", h.IPProto, h.L4Off, h.L3Off, end)
		}
		if h.IPProto == ProtoTCP && h.L4Off+int(data[h.L4Off+12]>>4)*4 > end {
			t.Fatalf("TCP header at %d runs past %d", h.L4Off, end)
		}
	} else if (h.IPProto == ProtoUDP || h.IPProto == ProtoTCP) && !h.Fragment && h.Proto != EtherTypeARP {
		t.Fatalf("IPProto %d without a fragment was not parsed", h.IPProto)
	}

	TransportChecksumOK(data, h)
	// DecrementTTL changes the packet and the Headers, so give it copies;
	// a valid IPv4 header checksum must stay valid.
	p, decremented := append([]byte(nil), data...), *h
	hdrOK := h.Proto == EtherTypeIPv4 && IPv4HeaderChecksumOK(p[h.L3Off:])
	ttl := h.TTL
	if DecrementTTL(p, &decremented) {
		if decremented.TTL != ttl-1 {
			t.Fatalf("TTL %d decremented to %d", ttl, decremented.TTL)
		}
		if hdrOK && !IPv4HeaderChecksumOK(p[h.L3Off:]) {
			t.Fatalf("DecrementTTL broke the header checksum of %x", data)
		}
	} else if ttl > 1 && h.Proto != EtherTypeARP {
		t.Fatalf("DecrementTTL refused TTL %d", ttl)
	}
}
