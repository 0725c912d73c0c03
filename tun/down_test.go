package tun

import (
	"errors"
	"net/netip"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
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
		burst := []*buffer.Buf{
			putUDP(t, c, netip.AddrPortFrom(peerV4, 1), netip.AddrPortFrom(hostV4, 2), []byte("x")),
			putUDP(t, c, netip.AddrPortFrom(peerV4, 1), netip.AddrPortFrom(hostV4, 2), []byte("y")),
		}
		n, err := d.TxQueue(1).Transmit(c, burst)
		if n != 0 || !errors.Is(err, port.ErrDown) {
			t.Errorf("Transmit after delete = %d, %v, want 0, port.ErrDown", n, err)
		} else {
			t.Logf("Transmit: %v", err)
		}
		if s := d.Stats(); s.TxDrops[drop.DevReady] != 2 {
			t.Errorf("stats %+v, want 2 DEV_READY drops", s)
		}
		if err := d.Close(nil); err != nil {
			t.Errorf("Close of a deleted device: %v", err)
		}
		// A closed device's queues report it too, and drop what they get.
		n, err = d.RxQueue(0).Receive(c, bufs)
		if n != 0 || !errors.Is(err, port.ErrDown) {
			t.Errorf("Receive after Close = %d, %v", n, err)
		}
		b := putUDP(t, c, netip.AddrPortFrom(peerV4, 1), netip.AddrPortFrom(hostV4, 2), []byte("z"))
		if n, err := d.TxQueue(0).Transmit(c, []*buffer.Buf{b}); n != 0 || !errors.Is(err, port.ErrDown) {
			t.Errorf("Transmit after Close = %d, %v", n, err)
		}
	}
}

// A device set down administratively: writes fail with EIO, which is
// port.ErrDown too.
func TestDeviceSetDown(t *testing.T) {
	_, c := newPool(t, buffer.Config{})
	ns := netnstest.New(t)
	name := devName("snw")
	d := openDev(t, Config{Name: name, NetNS: ns.Name})
	exec(t, ns, "ip", "link", "set", name, "down")
	b := putUDP(t, c, netip.AddrPortFrom(peerV4, 1), netip.AddrPortFrom(hostV4, 2), []byte("x"))
	if n, err := d.TxQueue(0).Transmit(c, []*buffer.Buf{b}); n != 0 || !errors.Is(err, port.ErrDown) {
		t.Errorf("Transmit on a down device = %d, %v, want 0, port.ErrDown", n, err)
	}
}
