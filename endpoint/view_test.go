package endpoint

import (
	"bytes"
	"net/netip"
	"testing"

	"softnet.dev/packet"
)

// A view built on the application's side from a lend says what the
// worker's parse of the packet said: addresses, ports, the packet and its
// payload, as slices of the frame.
func TestLendView(t *testing.T) {
	payload := []byte("payload, then a device's padding")
	for _, tc := range []struct {
		name     string
		src, dst netip.AddrPort
		raw      bool
	}{
		{"udp4", netip.MustParseAddrPort("198.18.0.1:49152"), netip.MustParseAddrPort("198.19.255.254:9"), false},
		{"udp6", netip.MustParseAddrPort("[2001:db8::1]:40000"), netip.MustParseAddrPort("[2001:db8:0:2::1]:7"), false},
		{"raw4", netip.MustParseAddrPort("198.18.0.4:0"), netip.MustParseAddrPort("198.18.0.3:0"), true},
		{"raw6", netip.MustParseAddrPort("[2001:db8::4]:0"), netip.MustParseAddrPort("[2001:db8::3]:0"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const head = 128 // where the data starts in the frame
			frame := bytes.Repeat([]byte{0xee}, 512)
			d := frame[head:]
			var n int
			switch {
			case !tc.raw:
				n = packet.PutUDP(d, tc.src, tc.dst, payload)
			case tc.src.Addr().Is4():
				n = packet.PutIPv4(d, tc.src.Addr(), tc.dst.Addr(), 253, 64, len(payload))
			default:
				n = packet.PutIPv6(d, tc.src.Addr(), tc.dst.Addr(), 253, 64, len(payload))
			}
			if tc.raw {
				copy(d[n:], payload)
				n += len(payload)
			}
			d = d[:n+6] // padding after the IP packet
			var h packet.Headers
			if ok, reason := packet.Parse(d, packet.L3, &h); !ok {
				t.Fatalf("Parse: %v", reason)
			}
			var x lend
			if !x.locate(d, head, &h, tc.raw) {
				t.Fatal("locate refused a valid packet")
			}
			var v View
			x.setView(&v, frame, tc.raw, 3)
			if v.Src != tc.src || v.Dst != tc.dst {
				t.Errorf("view %v -> %v, want %v -> %v", v.Src, v.Dst, tc.src, tc.dst)
			}
			if !bytes.Equal(v.Payload, payload) || &v.Payload[0] != &frame[head+n-len(payload)] {
				t.Errorf("payload %q, not the frame's %q", v.Payload, payload)
			}
			if len(v.Packet) != n || &v.Packet[0] != &frame[head] {
				t.Errorf("packet of %d bytes at %p, want %d at the frame's data", len(v.Packet), &v.Packet[0], n)
			}
			if v.worker != 3 {
				t.Errorf("worker %d", v.worker)
			}
		})
	}
	// A UDP length beyond the IP packet is refused, not lent.
	d := make([]byte, 256)
	n := packet.PutUDP(d, netip.MustParseAddrPort("198.18.0.1:1"), netip.MustParseAddrPort("198.18.0.2:2"), payload)
	var h packet.Headers
	if ok, _ := packet.Parse(d[:n], packet.L3, &h); !ok {
		t.Fatal("Parse")
	}
	d[packet.IPv4HeaderLen+4]++ // UDP length
	var x lend
	if x.locate(d[:n], 0, &h, false) {
		t.Error("locate accepted a UDP length longer than the packet")
	}
}
