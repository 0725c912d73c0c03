package tun

import (
	"encoding/binary"
	"net/netip"
	"os"
	"testing"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/vnet"
)

// rawUDP opens a nonblocking UDP socket inside ns, bound to local and,
// if dst is valid, connected to it; closed at cleanup. Raw file
// descriptors, because the net package allocates per call.
func rawUDP(t *testing.T, ns *netnstest.NS, local, dst netip.AddrPort) int {
	t.Helper()
	fd := -1
	err := ns.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err = unix.Bind(fd, &unix.SockaddrInet4{Addr: local.Addr().As4(), Port: int(local.Port())}); err != nil {
			return err
		}
		if dst.IsValid() {
			return unix.Connect(fd, &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())})
		}
		return nil
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// disableIPv6 turns IPv6 off on a device, through /proc/sys/net, which
// shows the namespace of the thread that opens it.
func disableIPv6(t *testing.T, ns *netnstest.NS, dev string) {
	t.Helper()
	if err := ns.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/"+dev+"/disable_ipv6", []byte("1"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
}

// echoRequest returns an IPv4 ICMP echo request.
func echoRequest(src, dst netip.Addr) []byte {
	icmp := icmpEcho(false, 1, 1, make([]byte, 56))
	pkt := make([]byte, packet.IPv4HeaderLen+len(icmp))
	packet.PutIPv4(pkt, src, dst, packet.ProtoICMP, 64, len(icmp))
	copy(pkt[packet.IPv4HeaderLen:], icmp)
	return pkt
}

// The per-packet paths allocate nothing in steady state: receive with and
// without a vnet header, transmit with a zero header, plain, with the
// checksum finished here, segmented here, whole, and coalesced by GRO.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	_, c := newPool(t, buffer.Config{})
	ns1, ns2 := netnstest.New(t), netnstest.New(t)
	nameA, nameB := devName("sna"), devName("snb")
	a := openDev(t, Config{Name: nameA, NetNS: ns1.Name, Offload: true, GRO: true})
	b := openDev(t, Config{Name: nameB, NetNS: ns2.Name})
	addAddrs(t, ns1, nameA, hostV4, netip.Addr{})
	addAddrs(t, ns2, nameB, peerV4, netip.Addr{})
	// No IPv6 on these devices: no link-local chatter in the bursts.
	disableIPv6(t, ns1, nameA)
	disableIPv6(t, ns2, nameB)

	const sinkPort = 7000
	sink := rawUDP(t, ns2, netip.AddrPortFrom(peerV4, sinkPort), netip.AddrPort{})
	plain := rawUDP(t, ns1, netip.AddrPortFrom(hostV4, 0), netip.AddrPortFrom(peerV4, sinkPort))
	gso := rawUDP(t, ns1, netip.AddrPortFrom(hostV4, 0), netip.AddrPortFrom(peerV4, sinkPort))
	if err := unix.SetsockoptInt(gso, unix.SOL_UDP, unix.UDP_SEGMENT, 1000); err != nil {
		t.Fatal(err)
	}
	useGSO := a.Info().Offloads&port.OffloadUSO4 != 0
	if !useGSO {
		t.Log("the kernel refused USO: the GSO cases send plain datagrams")
	}

	toA := echoRequest(peerV4, hostV4) // answered out of A
	toB := echoRequest(hostV4, peerV4) // answered out of B
	payload := make([]byte, 8000)
	drain := make([]byte, 2048)
	bufs := make([]*buffer.Buf, 64)
	one := make([]*buffer.Buf, 1)

	put := func(tmpl []byte) *buffer.Buf {
		buf, err := c.Get(buffer.ClassMTU)
		if err != nil {
			t.Fatal(err)
		}
		copy(buf.Frame()[buf.Headroom():], tmpl)
		buf.SetData(buf.Headroom(), len(tmpl))
		return buf
	}
	// recv receives from d until a packet that match accepts arrives,
	// freeing the others; bounded in polls, not time, to stay
	// allocation-free.
	recv := func(d *Device, match func(*buffer.Buf) bool) *buffer.Buf {
		for range 100000 {
			n, err := d.RxQueue(0).Receive(c, bufs)
			if err != nil {
				t.Fatal(err)
			}
			var got *buffer.Buf
			for _, buf := range bufs[:n] {
				if got == nil && match(buf) {
					got = buf
				} else {
					c.Consume(buf)
				}
			}
			if got != nil {
				return got
			}
		}
		t.Fatal("no packet")
		return nil
	}
	isICMP := func(buf *buffer.Buf) bool { return buf.Len() > 20 && buf.Bytes()[9] == packet.ProtoICMP }
	isUDP := func(buf *buffer.Buf) bool { return buf.Len() > 20 && buf.Bytes()[9] == packet.ProtoUDP }
	drainSink := func() {
		for {
			if _, err := unix.Read(sink, drain); err != nil {
				return
			}
		}
	}
	four := make([]*buffer.Buf, 4)
	transmit := func(d *Device, buf *buffer.Buf) {
		one[0] = buf
		if n, err := d.TxQueue(0).Transmit(c, one); n != 1 || err != nil {
			t.Fatalf("Transmit = %d, %v", n, err)
		}
	}

	cases := []struct {
		name string
		f    func()
	}{
		{"zero header tx, vnet rx", func() {
			transmit(a, put(toA))
			c.Consume(recv(a, isICMP))
		}},
		{"plain tx and rx", func() {
			transmit(b, put(toB))
			c.Consume(recv(b, isICMP))
		}},
		{"checksum finished", func() {
			if _, err := unix.Write(plain, payload[:1000]); err != nil {
				t.Fatal(err)
			}
			transmit(b, recv(a, isUDP))
			drainSink()
		}},
		{"segmented", func() {
			if _, err := unix.Write(gso, payload); err != nil {
				t.Fatal(err)
			}
			for range map[bool]int{true: 1, false: 8}[useGSO] {
				transmit(b, recv(a, isUDP))
			}
			drainSink()
		}},
		{"whole", func() {
			if _, err := unix.Write(gso, payload); err != nil {
				t.Fatal(err)
			}
			// Back into A, whose kernel drops it (no forwarding): the
			// write is what is measured.
			for range map[bool]int{true: 1, false: 8}[useGSO] {
				transmit(a, recv(a, isUDP))
			}
		}},
		{"coalesced", func() {
			for i := range four {
				if _, err := unix.Write(plain, payload[:1000]); err != nil {
					t.Fatal(err)
				}
				four[i] = recv(a, isUDP)
			}
			// Back into A as one USO packet.
			if n, err := a.TxQueue(0).Transmit(c, four); n != len(four) || err != nil {
				t.Fatalf("Transmit = %d, %v", n, err)
			}
		}},
	}
	for _, tc := range cases {
		if allocs := testing.AllocsPerRun(100, tc.f); allocs != 0 {
			t.Errorf("%s: %.1f allocations per run", tc.name, allocs)
		}
	}
	sa, sb := a.Stats(), b.Stats()
	t.Logf("A: %+v", sa)
	t.Logf("B: %+v", sb)
	if useGSO && (sb.Segmented == 0 || sa.GSOOut == 0) {
		t.Error("the GSO cases did not segment or pass whole")
	}
	if sb.CsumFinished == 0 {
		t.Error("no checksum was finished")
	}
	if a.Info().Offloads&port.OffloadUSO4 != 0 && sa.Coalesced == 0 {
		t.Error("the GRO case coalesced nothing")
	}
}

// tcpSegment returns TCP segment i of a stream from src to dst: an ACK
// carrying size bytes at sequence number i*size, checksums complete.
func tcpSegment(src, dst netip.AddrPort, i, size int) []byte {
	const tcpLen = 20
	pkt := make([]byte, packet.IPv4HeaderLen+tcpLen+size)
	packet.PutIPv4(pkt, src.Addr(), dst.Addr(), packet.ProtoTCP, 64, tcpLen+size)
	tcp := pkt[packet.IPv4HeaderLen:]
	binary.BigEndian.PutUint16(tcp[0:], src.Port())
	binary.BigEndian.PutUint16(tcp[2:], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], uint32(1000+i*size))
	binary.BigEndian.PutUint32(tcp[8:], 1)
	tcp[12] = tcpLen / 4 << 4
	tcp[13] = 0x10 // ACK
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	for j := range size {
		tcp[tcpLen+j] = byte(i + j)
	}
	binary.BigEndian.PutUint16(tcp[16:], packet.Checksum(tcp, packet.PseudoHeaderChecksum(packet.ProtoTCP, src.Addr(), dst.Addr(), len(tcp))))
	return pkt
}

// Transmit coalesces TCP bursts of every length, up to and beyond
// vnet.GROMaxBurst, into TSO packets without allocating, from the first
// burst on: the queue's GRO scratch space is made with it. It used to
// grow with the longest burst seen, in the switch's worker, when the
// lab's overlay TCP ran.
func TestGROBurstsAllocateNothing(t *testing.T) {
	_, c := newPool(t, buffer.Config{})
	ns := netnstest.New(t)
	name := devName("sng")
	d := openDev(t, Config{Name: name, NetNS: ns.Name, Offload: true, GRO: true})
	addAddrs(t, ns, name, hostV4, netip.Addr{})
	disableIPv6(t, ns, name)
	if d.Info().Offloads&port.OffloadTSO4 == 0 {
		t.Fatal("the kernel refused TSO")
	}
	// Into the device's own stack, which answers with resets: the write
	// is what is measured.
	src, dst := netip.AddrPortFrom(peerV4, 40000), netip.AddrPortFrom(hostV4, 9)
	const size = 100
	segs := make([][]byte, vnet.GROMaxBurst+8)
	for i := range segs {
		segs[i] = tcpSegment(src, dst, i, size)
	}
	bufs := make([]*buffer.Buf, len(segs))
	n := 1
	burst := func() {
		n++
		for i := range n {
			buf, err := c.Get(buffer.ClassMTU)
			if err != nil {
				t.Fatal(err)
			}
			copy(buf.Frame()[buf.Headroom():], segs[i])
			buf.SetData(buf.Headroom(), len(segs[i]))
			bufs[i] = buf
		}
		if sent, err := d.TxQueue(0).Transmit(c, bufs[:n]); sent != n || err != nil {
			t.Fatalf("Transmit of %d = %d, %v", n, sent, err)
		}
	}
	if allocs := testing.AllocsPerRun(len(segs)-2, burst); allocs != 0 {
		t.Errorf("TCP bursts of 2 to %d packets: %.2f allocations per burst", n, allocs)
	}
	if s := d.Stats(); s.Coalesced == 0 || s.CoalescedSegs < 2*s.Coalesced {
		t.Errorf("nothing was coalesced: %+v", s)
	}
}
