package tun

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
	"softnet.dev/port"
)

// A device deleted underneath its port: Receive and Transmit report
// port.ErrDown, Transmit drops the burst as DEV_READY, and Close still
// succeeds.
func TestDeviceDeleted(t *testing.T) {
	for _, offload := range []bool{false, true} {
		_, c := newPool(t, buffer.Config{})
		ns := netnstest.New(t)
		name := devName("snd")
		d := openDev(t, Config{Name: name, NetNS: ns.Name, Offload: offload, Queues: 2})
		bufs := make([]*buffer.Buf, 8)
		if n, err := d.RxQueue(0).Receive(c, bufs); err != nil {
			c.ConsumeBulk(bufs[:n])
			t.Fatalf("Receive before delete: %v", err)
		} else {
			c.ConsumeBulk(bufs[:n])
		}
		exec(t, ns, "ip", "link", "del", name)

		for i := range 2 {
			n, err := d.RxQueue(i).Receive(c, bufs)
			c.ConsumeBulk(bufs[:n])
			if !errors.Is(err, port.ErrDown) {
				t.Errorf("queue %d: Receive after delete = %d, %v, want port.ErrDown", i, n, err)
			} else {
				t.Logf("Receive: %v", err)
			}
		}
		// Until the link watch has seen the deletion a burst may be
		// dropped as toward a link that is merely down, without error.
		given := 0
		var err error
		deadline := time.Now().Add(testTimeout)
		for !errors.Is(err, port.ErrDown) && time.Now().Before(deadline) {
			burst := []*buffer.Buf{
				putUDP(t, c, netip.AddrPortFrom(peerV4, 1), netip.AddrPortFrom(hostV4, 2), []byte("x")),
				putUDP(t, c, netip.AddrPortFrom(peerV4, 1), netip.AddrPortFrom(hostV4, 2), []byte("y")),
			}
			given += len(burst)
			var n int
			if n, err = d.TxQueue(1).Transmit(c, burst); n != 0 || err != nil && !errors.Is(err, port.ErrDown) {
				t.Fatalf("Transmit after delete = %d, %v, want 0, port.ErrDown", n, err)
			}
			if err == nil {
				time.Sleep(time.Millisecond)
			}
		}
		if !errors.Is(err, port.ErrDown) {
			t.Fatalf("Transmit did not report the deletion within %v", testTimeout)
		}
		t.Logf("Transmit: %v", err)
		if s := d.Stats(); s.TxDrops[drop.DevReady] != uint64(given) {
			t.Errorf("stats %+v, want %d DEV_READY drops", s, given)
		}
		if err := d.Close(); err != nil {
			t.Errorf("Close of a deleted device: %v", err)
		}
		// A closed device's queues report it too, and drop what they get.
		n, err := d.RxQueue(0).Receive(c, bufs)
		if n != 0 || !errors.Is(err, port.ErrDown) {
			t.Errorf("Receive after Close = %d, %v", n, err)
		}
		b := putUDP(t, c, netip.AddrPortFrom(peerV4, 1), netip.AddrPortFrom(hostV4, 2), []byte("z"))
		if n, err := d.TxQueue(0).Transmit(c, []*buffer.Buf{b}); n != 0 || !errors.Is(err, port.ErrDown) {
			t.Errorf("Transmit after Close = %d, %v", n, err)
		}
	}
}

// A device set down is a passing state, on TUN and TAP: packets toward
// it are dropped as DEV_READY without an error, before and after the link
// watch has seen it (then without a write), nothing is received from it,
// and once it is up again packets reach its sockets within a second.
func TestDeviceDownUp(t *testing.T) {
	for _, tap := range []bool{false, true} {
		for _, offload := range []bool{false, true} {
			t.Run(fmt.Sprintf("tap=%v,offload=%v", tap, offload), func(t *testing.T) {
				testDownUp(t, tap, offload)
			})
		}
	}
}

func testDownUp(t *testing.T, tap, offload bool) {
	_, c := newPool(t, buffer.Config{})
	ns := netnstest.New(t)
	name := devName("snw")
	d := openDev(t, Config{Name: name, NetNS: ns.Name, TAP: tap, Offload: offload})
	addAddrs(t, ns, name, hostV4, netip.Addr{})
	mac := deviceMAC(t, ns, name, tap)
	conn := listenUDP(t, ns, hostV4)
	dst := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	seq := byte(0)
	transmit := func() (int, error) {
		seq++
		b := putUDP(t, c, netip.AddrPortFrom(peerV4, 5000), dst, []byte{'p', seq})
		if tap {
			eth, _ := b.Prepend(packet.EthernetHeaderLen)
			packet.PutEthernet(eth, mac, [6]byte{0x02, 0, 0, 0, 0, 2}, packet.EtherTypeIPv4)
		}
		return d.TxQueue(0).Transmit(c, []*buffer.Buf{b})
	}
	// delivered polls, for at most within, for a packet sent by transmit
	// to reach the socket.
	buf := make([]byte, 64)
	delivered := func(within time.Duration) bool {
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			if n, err := transmit(); n != 1 || err != nil {
				t.Fatalf("Transmit = %d, %v (stats %+v)", n, err, d.Stats())
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			if n, _, err := conn.ReadFromUDPAddrPort(buf); err == nil && n == 2 {
				return true
			}
		}
		return false
	}
	if !delivered(testTimeout) {
		t.Fatal("nothing delivered before the link went down")
	}

	exec(t, ns, "ip", "link", "set", name, "down")
	const whileDown = 5
	for range whileDown {
		if n, err := transmit(); n != 0 || err != nil {
			t.Fatalf("Transmit on a down device = %d, %v, want 0, nil", n, err)
		}
	}
	deadline := time.Now().Add(testTimeout)
	for !d.link.down.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !d.link.down.Load() {
		t.Fatalf("the link watch did not see the link go down in %v", testTimeout)
	}
	writes := d.Stats().TxPackets
	if n, err := transmit(); n != 0 || err != nil {
		t.Fatalf("Transmit on a down device = %d, %v, want 0, nil", n, err)
	}
	// What the guest sent before going down may still be queued; then
	// nothing more comes.
	bufs := make([]*buffer.Buf, 8)
	for tries := 0; ; tries++ {
		n, err := d.RxQueue(0).Receive(c, bufs)
		c.ConsumeBulk(bufs[:n])
		if err != nil || tries == 100 {
			t.Fatalf("Receive on a down device = %d, %v after %d reads, want 0, nil", n, err, tries)
		}
		if n == 0 {
			break
		}
	}
	s := d.Stats()
	if s.TxDrops[drop.DevReady] != whileDown+1 || s.TxPackets != writes {
		t.Errorf("stats %+v, want %d DEV_READY drops", s, whileDown+1)
	}

	exec(t, ns, "ip", "link", "set", name, "up")
	up := time.Now()
	if !delivered(time.Second) {
		t.Fatalf("nothing delivered within a second of the link coming up (stats %+v)", d.Stats())
	}
	t.Logf("forwarding resumed %v after the link came up", time.Since(up))
}

// deviceMAC returns a TAP device's MAC address, or zero for TUN.
func deviceMAC(t *testing.T, ns *netnstest.NS, name string, tap bool) [6]byte {
	t.Helper()
	var mac [6]byte
	if !tap {
		return mac
	}
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(name)
		if err == nil {
			copy(mac[:], ifi.HardwareAddr)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return mac
}
