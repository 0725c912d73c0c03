package tun

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
)

// An MTU raised after Open, on a device without offloads, is followed:
// Info says the new max frame, and 9000-byte packets pass both ways.
func TestMTURaisedAfterOpen(t *testing.T) {
	for _, tap := range []bool{false, true} {
		t.Run(fmt.Sprintf("tap=%v", tap), func(t *testing.T) {
			_, c := newPool(t, buffer.Config{})
			ns := netnstest.New(t)
			name := devName("snm")
			d := openDev(t, Config{Name: name, NetNS: ns.Name, TAP: tap, MTU: 1500})
			l2 := linkOverhead(tap)
			if got := d.Info().MaxFrame; got != 1500+l2 {
				t.Fatalf("max frame %d at MTU 1500", got)
			}
			addAddrs(t, ns, name, hostV4, netip.Addr{})
			peerMAC := [6]byte{0x02, 0, 0, 0, 0, 2}
			if tap {
				exec(t, ns, "ip", "neigh", "add", peerV4.String(), "lladdr", net.HardwareAddr(peerMAC[:]).String(), "dev", name)
			}
			exec(t, ns, "ip", "link", "set", name, "mtu", strconv.Itoa(9000))
			deadline := time.Now().Add(testTimeout)
			for d.Info().MaxFrame != 9000+l2 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if got := d.Info().MaxFrame; got != 9000+l2 {
				t.Fatalf("max frame %d after the MTU went to 9000, want %d", got, 9000+l2)
			}

			// Guest to softnet: one 9000-byte IP packet, not fragments.
			dst := netip.AddrPortFrom(peerV4, 4000)
			payload := bytes.Repeat([]byte{'j'}, 9000-packet.IPv4HeaderLen-packet.UDPHeaderLen)
			if _, err := dialUDP(t, ns, dst).Write(payload); err != nil {
				t.Fatal(err)
			}
			layer := packet.L3
			if tap {
				layer = packet.L2
			}
			b := receive(t, c, d.RxQueue(0), 1, isUDPTo(layer, dst))[0]
			frame := 9000
			if tap {
				frame += packet.EthernetHeaderLen // untagged
			}
			if b.Len() != frame {
				t.Errorf("received %d bytes, want %d", b.Len(), frame)
			}
			c.Consume(b)

			// Softnet to guest.
			conn := listenUDP(t, ns, hostV4)
			out, err := c.Get(buffer.ClassGSO)
			if err != nil {
				t.Fatal(err)
			}
			n := packet.PutUDP(out.Frame()[out.Headroom():], netip.AddrPortFrom(peerV4, 5000), conn.LocalAddr().(*net.UDPAddr).AddrPort(), payload)
			out.SetData(out.Headroom(), n)
			if tap {
				eth, _ := out.Prepend(packet.EthernetHeaderLen)
				packet.PutEthernet(eth, deviceMAC(t, ns, name, tap), peerMAC, packet.EtherTypeIPv4)
			}
			if n, err := d.TxQueue(0).Transmit(c, []*buffer.Buf{out}); n != 1 || err != nil {
				t.Fatalf("Transmit of 9000 bytes = %d, %v (stats %+v)", n, err, d.Stats())
			}
			buf := make([]byte, 10000)
			got, err := readUDP(t, conn, buf)
			if err != nil || got != len(payload) {
				t.Fatalf("guest socket got %d bytes, %v; want %d", got, err, len(payload))
			}
		})
	}
}

// A full-size frame with an 802.1Q tag from a TAP guest is received:
// the tag rides outside the MTU, as on the kernel's bridge (a guest's
// VLAN device at the TAP's MTU sends such frames).
func TestTAPTaggedFullSizeFrame(t *testing.T) {
	_, c := newPool(t, buffer.Config{})
	ns := netnstest.New(t)
	name := devName("snv")
	d := openDev(t, Config{Name: name, NetNS: ns.Name, TAP: true, MTU: 1500})
	exec(t, ns, "ip", "link", "set", name, "up")
	dst := netip.AddrPortFrom(peerV4, 4100)
	payload := bytes.Repeat([]byte{'v'}, 1500-packet.IPv4HeaderLen-packet.UDPHeaderLen)
	frame := make([]byte, 1500+packet.EthernetHeaderLen+packet.VLANTagLen)
	packet.PutEthernet(frame, [6]byte{0x02, 0, 0, 0, 0, 2}, [6]byte{0x02, 0, 0, 0, 0, 1}, packet.EtherTypeVLAN)
	binary.BigEndian.PutUint16(frame[14:], 5) // VLAN 5
	binary.BigEndian.PutUint16(frame[16:], packet.EtherTypeIPv4)
	packet.PutUDP(frame[18:], netip.AddrPortFrom(hostV4, 4000), dst, payload)
	ns.Inject(t, name, true, frame)
	b := receive(t, c, d.RxQueue(0), 1, isUDPTo(packet.L2, dst))[0]
	if b.Len() != len(frame) {
		t.Errorf("received a %d-byte frame, want %d", b.Len(), len(frame))
	}
	// And back to the guest, as a bridge would send it to another TAP.
	if n, err := d.TxQueue(0).Transmit(c, []*buffer.Buf{b}); n != 1 || err != nil {
		t.Errorf("Transmit of the tagged frame = %d, %v", n, err)
	}
	if s := d.Stats(); s.RxDrops.Total() != 0 || s.TxDrops.Total() != 0 {
		t.Errorf("drops: rx %v, tx %v", s.RxDrops, s.TxDrops)
	}
}
