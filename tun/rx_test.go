package tun

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
)

// The kernel's UDP datagrams and pings toward the softnet side of a TUN
// device arrive through Receive, as packet.Parse understands them.
func TestReceiveUDPAndPing(t *testing.T) {
	for _, offload := range []bool{false, true} {
		t.Run(fmt.Sprintf("offload=%v", offload), func(t *testing.T) {
			_, c := newPool(t, buffer.Config{})
			ns := netnstest.New(t)
			name := devName("snr")
			d := openDev(t, Config{Name: name, NetNS: ns.Name, Offload: offload})
			addAddrs(t, ns, name, hostV4, hostV6)
			q := d.RxQueue(0)

			for _, dst := range []netip.AddrPort{netip.AddrPortFrom(peerV4, 4000), netip.AddrPortFrom(peerV6, 4006)} {
				payload := []byte("softnet rx test to " + dst.String())
				conn := dialUDP(t, ns, dst)
				if _, err := conn.Write(payload); err != nil {
					t.Fatal(err)
				}
				got := receive(t, c, q, 1, isUDPTo(packet.L3, dst))
				b := got[0]
				h := parse(t, b, packet.L3)
				src := netip.AddrPortFrom(h.SrcIP, h.SrcPort)
				if src != netip.AddrPortFrom(dst.Addr().Prev(), conn.LocalAddr().(*net.UDPAddr).AddrPort().Port()) {
					t.Errorf("UDP from %v, want the socket's address", src)
				}
				if l4 := b.Bytes()[h.L4Off:]; !bytes.Equal(l4[packet.UDPHeaderLen:], payload) {
					t.Errorf("payload %q, want %q", l4[packet.UDPHeaderLen:], payload)
				}
				// With offloads the kernel leaves the UDP checksum to the
				// device: the packet keeps its header for the egress.
				if want := map[bool]uint8{false: 0, true: FlagVnetHdr}[offload]; b.Flags() != want {
					t.Errorf("flags %d, want %d", b.Flags(), want)
				}
				if !offload && !packet.TransportChecksumOK(b.Bytes(), &h) {
					t.Error("UDP checksum wrong")
				}
				c.Consume(b)
			}

			for _, v6 := range []bool{false, true} {
				host, peer, network, typ := hostV4, peerV4, "ip4:icmp", uint8(8)
				if v6 {
					host, peer, network, typ = hostV6, peerV6, "ip6:ipv6-icmp", 128
				}
				var conn net.PacketConn
				if err := ns.Do(func() (err error) {
					conn, err = net.ListenPacket(network, host.String())
					return err
				}); err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if _, err := conn.WriteTo(icmpEcho(v6, 77, 1, []byte("ping")), &net.IPAddr{IP: peer.AsSlice()}); err != nil {
					t.Fatal(err)
				}
				got := receive(t, c, q, 1, func(b *buffer.Buf) bool {
					var h packet.Headers
					ok, _ := packet.Parse(b.Bytes(), packet.L3, &h)
					return ok && h.DstIP == peer && (h.IPProto == packet.ProtoICMP || h.IPProto == packet.ProtoICMPv6) && uint8(h.SrcPort) == typ
				})
				h := parse(t, got[0], packet.L3)
				if h.SrcIP != host || !packet.TransportChecksumOK(got[0].Bytes(), &h) {
					t.Errorf("echo request from %v, checksum ok %v", h.SrcIP, packet.TransportChecksumOK(got[0].Bytes(), &h))
				}
				c.Consume(got[0])
			}
			if s := d.Stats(); s.RxPackets < 4 || s.RxBytes == 0 {
				t.Errorf("stats %+v, want at least 4 packets", s)
			}
		})
	}
}

// A TAP device hands over Ethernet frames: the kernel's ARP request for
// the softnet side.
func TestReceiveTAP(t *testing.T) {
	_, c := newPool(t, buffer.Config{})
	ns := netnstest.New(t)
	name := devName("snt")
	d := openDev(t, Config{Name: name, NetNS: ns.Name, TAP: true, Offload: true})
	addAddrs(t, ns, name, hostV4, netip.Addr{})
	conn := dialUDP(t, ns, netip.AddrPortFrom(peerV4, 4000))
	if _, err := conn.Write([]byte("needs ARP first")); err != nil {
		t.Fatal(err)
	}
	got := receive(t, c, d.RxQueue(0), 1, func(b *buffer.Buf) bool {
		var h packet.Headers
		ok, _ := packet.Parse(b.Bytes(), packet.L2, &h)
		return ok && h.Proto == packet.EtherTypeARP && h.ARPOp == packet.ARPRequest && h.DstIP == peerV4
	})
	h := parse(t, got[0], packet.L2)
	if h.Dst != packet.Broadcast || h.SrcIP != hostV4 || got[0].Flags() != 0 {
		t.Errorf("ARP request to %x from %v, flags %d", h.Dst, h.SrcIP, got[0].Flags())
	}
	c.Consume(got[0])
}

// With the pool empty a burst stops, counted as NOMEM, and the packet
// stays queued in the kernel until a buffer is free.
func TestReceivePoolExhausted(t *testing.T) {
	_, c := newPool(t, buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 64}, {Room: 65536, Count: 1}}})
	ns := netnstest.New(t)
	name := devName("sne")
	d := openDev(t, Config{Name: name, NetNS: ns.Name, Offload: true})
	addAddrs(t, ns, name, hostV4, netip.Addr{})
	dst := netip.AddrPortFrom(peerV4, 4000)
	conn := dialUDP(t, ns, dst)
	for _, p := range []string{"first", "second"} {
		if _, err := conn.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	// The only 64 KiB buffer holds the first datagram.
	first := receive(t, c, d.RxQueue(0), 1, isUDPTo(packet.L3, dst))[0]
	bufs := make([]*buffer.Buf, 4)
	if n, err := d.RxQueue(0).Receive(c, bufs); n != 0 || err != nil {
		c.ConsumeBulk(bufs[:n])
		t.Errorf("Receive with an empty pool = %d, %v", n, err)
	}
	if s := d.Stats(); s.RxDrops[drop.NoMem] == 0 {
		t.Errorf("stats %+v, want NOMEM counted", s)
	}
	c.Consume(first)
	second := receive(t, c, d.RxQueue(0), 1, isUDPTo(packet.L3, dst))[0]
	if h := parse(t, second, packet.L3); !bytes.HasSuffix(second.Bytes(), []byte("second")) {
		t.Errorf("got %q after the pool refilled, want the second datagram (%+v)", second.Bytes(), h)
	}
	c.Consume(second)
}

// A burst's buffers come from one bulk get; the ones a
// burst did not use go back, so the pool's leak check still balances.
func TestReceiveBulkAlloc(t *testing.T) {
	p, c := newPool(t, buffer.Config{})
	ns := netnstest.New(t)
	name := devName("snb")
	d := openDev(t, Config{Name: name, NetNS: ns.Name, Offload: true})
	addAddrs(t, ns, name, hostV4, hostV6)
	dst := netip.AddrPortFrom(peerV4, 4100)
	conn := dialUDP(t, ns, dst)
	const sent = 20
	for i := range sent {
		if _, err := conn.Write([]byte(fmt.Sprintf("bulk %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	q := d.RxQueue(0)
	bufs := make([]*buffer.Buf, 64)
	got := 0
	for tries := 0; got < sent && tries < 2000; tries++ {
		n, err := q.Receive(c, bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bufs[:n] {
			var h packet.Headers
			if ok, _ := packet.Parse(b.Bytes(), packet.L3, &h); ok && h.DstPort == dst.Port() {
				got++
			}
		}
		c.ConsumeBulk(bufs[:n])
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if got != sent {
		t.Fatalf("received %d of %d datagrams", got, sent)
	}
	if testIO == IOUring {
		// Buffers stay lent to the kernel until the device closes.
		if err := d.CloseInto(c); err != nil {
			t.Fatal(err)
		}
	}
	c.Publish()
	if s := p.Stats(); s.InUse != 0 || s.Allocs <= uint64(sent) {
		t.Fatalf("pool after bulk receive: in use %d, allocs %d", s.InUse, s.Allocs)
	}
}
