package tun

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
	"softnet.dev/vnet"
)

// Packets Transmit writes reach the kernel's sockets: UDP over IPv4 and
// IPv6, on TUN with and without a vnet header and on TAP.
func TestTransmitUDP(t *testing.T) {
	cases := []struct {
		tap, offload bool
	}{{false, false}, {false, true}, {true, false}, {true, true}}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("tap=%v,offload=%v", tc.tap, tc.offload), func(t *testing.T) {
			_, c := newPool(t, buffer.Config{})
			ns := netnstest.New(t)
			name := devName("snx")
			d := openDev(t, Config{Name: name, NetNS: ns.Name, TAP: tc.tap, Offload: tc.offload})
			addAddrs(t, ns, name, hostV4, hostV6)
			var mac [6]byte
			if tc.tap {
				if err := ns.Do(func() error {
					ifi, err := net.InterfaceByName(name)
					if err == nil {
						copy(mac[:], ifi.HardwareAddr)
					}
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			for i, host := range []netip.Addr{hostV4, hostV6} {
				conn := listenUDP(t, ns, host)
				dst := conn.LocalAddr().(*net.UDPAddr).AddrPort()
				src := netip.AddrPortFrom(host.Next(), 5000)
				payload := bytes.Repeat([]byte{byte('a' + i)}, 1000)
				b := putUDP(t, c, src, dst, payload)
				if tc.tap {
					etherType := packet.EtherTypeIPv4
					if host.Is6() {
						etherType = packet.EtherTypeIPv6
					}
					eth, _ := b.Prepend(packet.EthernetHeaderLen)
					packet.PutEthernet(eth, mac, [6]byte{0x02, 0, 0, 0, 0, 2}, etherType)
				}
				if n, err := d.TxQueue(0).Transmit(c, []*buffer.Buf{b}); n != 1 || err != nil {
					t.Fatalf("Transmit = %d, %v (stats %+v)", n, err, d.Stats())
				}
				buf := make([]byte, 2000)
				n, err := readUDP(t, conn, buf)
				if err != nil {
					t.Fatalf("%v: %v", host, err)
				}
				if !bytes.Equal(buf[:n], payload) {
					t.Errorf("%v: socket got %d bytes, want the %d sent", host, n, len(payload))
				}
			}
			if s := d.Stats(); s.TxPackets != 2 || s.TxDrops.Total() != 0 {
				t.Errorf("stats %+v, want 2 packets sent, no drops", s)
			}
		})
	}
}

// A packet longer than the device's frame is dropped, not written.
func TestTransmitTooBig(t *testing.T) {
	_, c := newPool(t, buffer.Config{})
	ns := netnstest.New(t)
	name := devName("snb")
	d := openDev(t, Config{Name: name, NetNS: ns.Name, MTU: 1280})
	b := putUDP(t, c, netip.AddrPortFrom(peerV4, 1), netip.AddrPortFrom(hostV4, 2), make([]byte, 1400))
	empty, err := c.Get(buffer.ClassMTU)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := d.TxQueue(0).Transmit(c, []*buffer.Buf{b, empty}); n != 0 || err != nil {
		t.Fatalf("Transmit = %d, %v, want 0, nil", n, err)
	}
	s := d.Stats()
	if s.TxDrops[drop.PktTooBig] != 1 || s.TxDrops[drop.PktTooSmall] != 1 || s.TxPackets != 0 {
		t.Errorf("stats %+v, want one PKT_TOO_BIG and one PKT_TOO_SMALL drop", s)
	}
}

// A marked packet whose header is wrong is dropped, by this package
// when it must act on the header, by the kernel when it passes whole.
func TestTransmitBadHeader(t *testing.T) {
	_, c := newPool(t, buffer.Config{})
	ns := netnstest.New(t)
	withCsum := openDev(t, Config{Name: devName("snh"), NetNS: ns.Name, Offload: true})
	without := openDev(t, Config{Name: devName("snh"), NetNS: ns.Name})
	bad := func(h vnet.Header) *buffer.Buf {
		b := putUDP(t, c, netip.AddrPortFrom(peerV4, 1), netip.AddrPortFrom(hostV4, 2), []byte("bad header"))
		h.Encode(b.Frame()[b.Headroom()-vnet.HeaderLen:])
		b.SetFlags(FlagVnetHdr)
		return b
	}
	outside := vnet.Header{Flags: vnet.FlagNeedsCsum, CsumStart: 1000, CsumOffset: 6}
	ufo := vnet.Header{GSOType: vnet.GSOUDP, GSOSize: 8, Flags: vnet.FlagNeedsCsum, CsumStart: 20, CsumOffset: 6}
	for _, tc := range []struct {
		name string
		d    *Device
		h    vnet.Header
		want drop.Reason
	}{
		{"csum outside, finished here", without, outside, drop.DevHdr},
		{"csum outside, passed whole", withCsum, outside, drop.DevHdr},
		{"UFO, segmented here", withCsum, ufo, drop.GsoSeg},
	} {
		before := tc.d.Stats().TxDrops[tc.want]
		if n, err := tc.d.TxQueue(0).Transmit(c, []*buffer.Buf{bad(tc.h)}); n != 0 || err != nil {
			t.Errorf("%s: Transmit = %d, %v, want 0, nil", tc.name, n, err)
		}
		if s := tc.d.Stats(); s.TxDrops[tc.want] != before+1 {
			t.Errorf("%s: drops %v, want one more %v", tc.name, s.TxDrops, tc.want)
		}
	}
}
