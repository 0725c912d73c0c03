package tun

import (
	"fmt"
	"net/netip"
	"softnet.dev/internal/linkstats"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
)

// A guest floods a device whose queue nobody reads: what does not fit in
// the device's queue is the kernel's TX drop, which KernelStats and
// linkstats report alike, and which softnet's own counters never see.
func TestKernelStatsFlood(t *testing.T) {
	for _, tap := range []bool{false, true} {
		t.Run(fmt.Sprintf("tap=%v", tap), func(t *testing.T) {
			_, c := newPool(t, buffer.Config{})
			ns := netnstest.New(t)
			name := devName("snk")
			d := openDev(t, Config{Name: name, NetNS: ns.Name, TAP: tap})
			addAddrs(t, ns, name, hostV4, netip.Addr{})
			if tap {
				exec(t, ns, "ip", "neigh", "add", peerV4.String(), "lladdr", "02:00:00:00:00:02", "dev", name)
			}
			exec(t, ns, "ip", "link", "set", name, "txqueuelen", "64")
			before, err := d.KernelStats()
			if err != nil {
				t.Fatal(err)
			}
			const flood = 1000
			conn := dialUDP(t, ns, netip.AddrPortFrom(peerV4, 9))
			for i := range flood {
				if _, err := conn.Write([]byte("flood")); err != nil {
					t.Fatalf("datagram %d: %v", i, err)
				}
			}
			after, err := d.KernelStats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("kernel stats before %+v, after %+v", before, after)
			// The queue holds up to 64 (TX packets are counted as they are
			// read); anything else the guest sent (neighbour discovery,
			// IGMP) could only take room from the flood.
			dropped := after.TxDropped - before.TxDropped
			if dropped < flood-64 || dropped > flood+8 {
				t.Errorf("%d of %d datagrams counted as TX dropped, want all but the 64 queued", dropped, flood)
			}

			lc, err := linkstats.Open(ns.Name, name)
			if err != nil {
				t.Fatal(err)
			}
			defer lc.Close()
			viaName, err := lc.Read()
			if err != nil {
				t.Fatal(err)
			}
			if viaName.TxDropped < after.TxDropped {
				t.Errorf("linkstats: TX dropped %d, KernelStats %d", viaName.TxDropped, after.TxDropped)
			}

			// What softnet then reads is the queue's content only.
			layer := packet.L3
			if tap {
				layer = packet.L2
			}
			got := receive(t, c, d.RxQueue(0), 1, isUDPTo(layer, netip.AddrPortFrom(peerV4, 9)))
			c.ConsumeBulk(got)
			bufs := make([]*buffer.Buf, 64)
			for {
				n, err := d.RxQueue(0).Receive(c, bufs)
				c.ConsumeBulk(bufs[:n])
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
			}
			s := d.Stats()
			if s.RxPackets > 64 || s.RxDrops.Total() != 0 {
				t.Errorf("softnet received %d packets (drops %v): more than the queue held", s.RxPackets, s.RxDrops)
			}
			final, err := d.KernelStats()
			if err != nil {
				t.Fatal(err)
			}
			if final.TxPackets-before.TxPackets != s.RxPackets || final.TxPackets+final.TxDropped < flood {
				t.Errorf("kernel TX packets %d, dropped %d; softnet received %d of %d sent", final.TxPackets, final.TxDropped, s.RxPackets, flood)
			}
		})
	}
}
