package tun

import (
	"bytes"
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
			l2 := 0
			if tap {
				l2 = packet.EthernetHeaderLen
			}
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
			if b.Len() != 9000+l2 {
				t.Errorf("received %d bytes, want %d", b.Len(), 9000+l2)
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
