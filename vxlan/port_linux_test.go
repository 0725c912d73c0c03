package vxlan

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
	"softnet.dev/tun"
	"softnet.dev/vnet"
)

// testTimeout bounds every wait for the kernel.
const testTimeout = 15 * time.Second

// newPool returns a pool and a cache with the leak check registered as a
// cleanup, which runs after the ports are closed.
func newPool(t testing.TB) (*buffer.Pool, *buffer.Cache) {
	t.Helper()
	return newPoolOf(t, buffer.Config{})
}

// newPoolOf is newPool with the pool's configuration.
func newPoolOf(t testing.TB, cfg buffer.Config) (*buffer.Pool, *buffer.Cache) {
	t.Helper()
	pool, err := buffer.NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pool.NewCache(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		if err := pool.Close(); err != nil {
			t.Errorf("leak check: %v", err)
		}
	})
	return pool, c
}

func openPort(t testing.TB, cfg Config) *Port {
	t.Helper()
	p, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.CloseInto(nil); err != nil {
			t.Errorf("close %s: %v", cfg.Name, err)
		}
	})
	return p
}

// send transmits copies of the frames through p's queue 0.
func send(t testing.TB, c *buffer.Cache, p *Port, frames ...[]byte) int {
	t.Helper()
	bufs := make([]*buffer.Buf, len(frames))
	for i, f := range frames {
		b, err := c.Get(0)
		if err != nil {
			t.Fatal(err)
		}
		d, ok := b.Append(len(f))
		if !ok {
			t.Fatalf("frame of %d bytes does not fit", len(f))
		}
		copy(d, f)
		bufs[i] = b
	}
	n, err := p.TxQueue(0).Transmit(c, bufs)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// receive polls p's queue 0 until want frames arrived and returns copies
// of them, failing after testTimeout.
func receive(t testing.TB, c *buffer.Cache, p *Port, want int) [][]byte {
	t.Helper()
	var out [][]byte
	bufs := make([]*buffer.Buf, 64)
	for deadline := time.Now().Add(testTimeout); len(out) < want; {
		n, err := p.RxQueue(0).Receive(c, bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bufs[:n] {
			out = append(out, bytes.Clone(b.Bytes()))
		}
		c.ConsumeBulk(bufs[:n])
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d frames after %v; stats %+v", p.info.Name, len(out), want, testTimeout, p.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}
	return out
}

// waitStats polls p's stats until cond holds.
func waitStats(t *testing.T, p *Port, c *buffer.Cache, what string, cond func(Stats) bool) {
	t.Helper()
	bufs := make([]*buffer.Buf, 64)
	for deadline := time.Now().Add(testTimeout); !cond(p.Stats()); {
		n, err := p.RxQueue(0).Receive(c, bufs)
		if err != nil {
			t.Fatal(err)
		}
		c.ConsumeBulk(bufs[:n])
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s: stats %+v", p.info.Name, what, p.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// underlay gives a fresh namespace's loopback the addresses and returns
// the namespace.
func underlay(t testing.TB, addrs ...netip.Addr) *netnstest.NS {
	ns := netnstest.New(t)
	for _, a := range addrs {
		ns.AddAddr(t, "lo", netip.PrefixFrom(a, a.BitLen()))
	}
	return ns
}

// Two ports on one underlay exchange frames: flooding to the only or
// every remote, learning, unicast to the learned remote, and a remote
// with no route counted as NO_ROUTE while the others get their copy.
// A raw socket sees every datagram on the underlay and checks its UDP
// checksum, which loopback would not.
func TestPortExchange(t *testing.T) {
	for _, family := range []string{"ipv4", "ipv6"} {
		t.Run(family, func(t *testing.T) {
			a, b, nowhere := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3")
			if family == "ipv6" {
				a, b, nowhere = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), netip.MustParseAddr("2001:db8:ffff::3")
			}
			ns := underlay(t, a, b)
			_, c := newPool(t)
			capture := openCapture(t, ns, a, b)
			pa := openPort(t, Config{Name: "a", VNI: 42, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name})
			pb := openPort(t, Config{Name: "b", VNI: 42, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a, nowhere}, NetNS: ns.Name})

			bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
			var frames [][]byte
			for i := range 20 {
				frames = append(frames, frame(bcast, macA, uint16(1000+i), 53, 1+i*70))
			}
			if n := send(t, c, pa, frames...); n != len(frames) {
				t.Fatalf("sent %d of %d", n, len(frames))
			}
			// Each of the frames is a flow of its own: their order
			// across flows is not kept.
			got := receive(t, c, pb, len(frames))
			slices.SortFunc(got, func(x, y []byte) int { return len(x) - len(y) })
			for i := range frames {
				if !bytes.Equal(got[i], frames[i]) {
					t.Fatalf("frame %d differs", i)
				}
			}
			if s := pb.Stats(); s.Learned != 1 || s.Stations != 1 {
				t.Fatalf("b learned %d stations, has %d; want macA", s.Learned, s.Stations)
			}
			if tbl := pb.Table(); len(tbl) != 1 || tbl[0].MAC != macA || tbl[0].Remote != a.String() || tbl[0].Age < 0 || tbl[0].Age > time.Minute {
				t.Fatalf("b's table %+v", tbl)
			}

			// To the learned station: its remote only, no attempt at the
			// unroutable one.
			reply := frame(macA, macB, 53, 1000, 100)
			if n := send(t, c, pb, reply); n != 1 {
				t.Fatalf("unicast: sent %d", n)
			}
			if got := receive(t, c, pa, 1); !bytes.Equal(got[0], reply) {
				t.Fatal("unicast reply differs")
			}
			if s := pb.Stats(); s.TxPackets != 1 || s.Flooded != 0 || s.TxDrops.Total() != 0 {
				t.Fatalf("unicast to a learned station: %+v", s)
			}
			// Unknown destination: flooded to both remotes; the one without
			// a route is a counted drop, the frame still counts as sent.
			unknown := frame([6]byte{0x02, 0, 0, 0, 0, 0x99}, macB, 53, 1000, 10)
			if n := send(t, c, pb, unknown); n != 1 {
				t.Fatalf("flood: sent %d", n)
			}
			if got := receive(t, c, pa, 1); !bytes.Equal(got[0], unknown) {
				t.Fatal("flooded frame differs")
			}
			s := pb.Stats()
			if s.Flooded != 1 || s.TxPackets != 2 || s.TxDrops[drop.NoRoute] != 1 {
				t.Fatalf("flood to a remote without a route: %+v", s)
			}
			if s := pa.Stats(); s.Learned != 1 || s.RxPackets != 2 || s.RxDrops.Total() != 0 {
				t.Fatalf("a: %+v", s)
			}
			// One sendmmsg per sending socket in use (a's 20 flows spread
			// over them); receive calls are at least one per burst that
			// found frames.
			if s := pa.Stats(); s.TxCalls < 2 || s.TxCalls > maxSenders || s.RxCalls < 1 {
				t.Fatalf("a's system calls: %d to send, %d to receive", s.TxCalls, s.RxCalls)
			}
			// b's flood took two: the second reports the unroutable remote.
			if s := pb.Stats(); s.TxCalls != 3 || s.RxCalls < 1 {
				t.Fatalf("b's system calls: %d to send, %d to receive", s.TxCalls, s.RxCalls)
			}
			capture.check(t, len(frames)+2)
		})
	}
}

// capture is a raw socket that sees the underlay's UDP datagrams.
type capture struct {
	fd   int
	ipv4 bool
	a, b netip.Addr // the two ends: a datagram from one is to the other
}

func openCapture(t *testing.T, ns *netnstest.NS, a, b netip.Addr) *capture {
	t.Helper()
	cp := &capture{ipv4: a.Is4(), a: a, b: b}
	family := unix.AF_INET6
	if cp.ipv4 {
		family = unix.AF_INET
	}
	if err := ns.Do(func() (err error) {
		cp.fd, err = unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(cp.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(cp.fd) })
	return cp
}

// check reads until it saw want VXLAN datagrams, each with a correct
// UDP checksum and a source port from the default range.
func (cp *capture) check(t *testing.T, want int) {
	t.Helper()
	buf := make([]byte, 65536)
	seen := 0
	for deadline := time.Now().Add(testTimeout); seen < want; {
		if time.Now().After(deadline) {
			t.Fatalf("capture: %d of %d VXLAN datagrams", seen, want)
		}
		n, from, err := unix.Recvfrom(cp.fd, buf, 0)
		if err != nil {
			continue // the receive timeout: look at the deadline
		}
		udp := buf[:n]
		var src netip.Addr
		if cp.ipv4 {
			ihl := int(udp[0]&0x0f) * 4
			src = netip.AddrFrom4([4]byte(udp[12:16]))
			udp = udp[ihl:]
		} else {
			src = netip.AddrFrom16(from.(*unix.SockaddrInet6).Addr)
		}
		if len(udp) < 8 || binary.BigEndian.Uint16(udp[2:4]) != DefaultPort {
			continue
		}
		dst := cp.a
		if src == cp.a {
			dst = cp.b
		}
		// The kernel computes the checksum, or leaves it to the device
		// (loopback's offload, which cannot be turned off) with the
		// pseudo-header's sum in its place: never none.
		field, pseudo := binary.BigEndian.Uint16(udp[6:8]), packet.PseudoHeaderChecksum(17, src, dst, len(udp))
		if s := packet.Checksum(udp, pseudo); s != 0 && uint32(field) != pseudo || field == 0 {
			t.Fatalf("datagram from %v: bad UDP checksum 0x%04x", src, binary.BigEndian.Uint16(udp[6:8]))
		}
		if sp := binary.BigEndian.Uint16(udp[0:2]); sp < DefaultSrcPortMin || sp > DefaultSrcPortMax {
			t.Fatalf("source port %d outside the default range", sp)
		}
		seen++
	}
}

// The underlay is untrusted: datagrams from an address that is not a
// remote, with bad flags, another VNI, cut short or longer than a buffer
// (the pool has no class for 4000 bytes) are counted by reason, between
// good ones that arrive.
func TestPortDropsMalformed(t *testing.T) {
	a, b, stranger := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.4")
	ns := underlay(t, a, b, stranger)
	_, c := newPoolOf(t, buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 1024}}})
	pb := openPort(t, Config{Name: "b", VNI: 42, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name})
	inner := frame(macB, macA, 1, 2, 50)
	good := datagram(0x08, 42, 0, inner)
	big := datagram(0x08, 42, 0, make([]byte, 4000))
	sendFrom(t, ns, a, b, good, datagram(0x00, 42, 0, inner), datagram(0x08, 7, 0, inner), good[:HeaderLen+10], datagram(0x08, 42, 3, inner), big, good)
	sendFrom(t, ns, stranger, b, good)
	got := receive(t, c, pb, 2)
	if !bytes.Equal(got[0], inner) || !bytes.Equal(got[1], inner) {
		t.Fatal("good frames differ")
	}
	want := drop.Counts{}
	want[drop.VXLANInvalidHdr] = 2
	want[drop.VXLANVNINotFound] = 1
	want[drop.HdrTrunc] = 1
	want[drop.PktTooBig] = 1
	want[drop.IPRPFilter] = 1
	waitStats(t, pb, c, "drops by reason", func(s Stats) bool { return s.RxDrops == want })
	if s := pb.Stats(); s.RxPackets != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// sendFrom sends each datagram with a plain UDP socket from src to dst's
// VXLAN port.
func sendFrom(t *testing.T, ns *netnstest.NS, src, dst netip.Addr, ds ...[]byte) {
	t.Helper()
	if err := ns.Do(func() error {
		conn, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, DefaultPort)))
		if err != nil {
			return err
		}
		defer conn.Close()
		for _, d := range ds {
			if _, err := conn.Write(d); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Datagrams the kernel coalesced (here sent as one with UDP_SEGMENT,
// which loopback hands to a UDP_GRO socket whole) are split again: in
// order, across Receive calls when a burst ends within one, and a last
// datagram too short for the headers is a counted drop.
func TestPortSplitsCoalesced(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	ns := underlay(t, a, b)
	_, c := newPool(t)
	pb := openPort(t, Config{Name: "b", VNI: 42, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name})
	var frames [][]byte
	var run []byte
	for i := range 40 {
		f := frame(macB, macA, uint16(1000+i), 53, 100)
		frames = append(frames, f)
		run = append(run, datagram(0x08, 42, 0, f)...)
	}
	size := len(run) / 40
	// Five, then a piece of a sixth cut within its Ethernet header.
	sendSegmented(t, ns, a, b, size, append(slices.Clone(run[:5*size]), run[5*size:5*size+HeaderLen+5]...))
	sendSegmented(t, ns, a, b, size, run)
	var got [][]byte
	bufs := make([]*buffer.Buf, 3)
	for deadline := time.Now().Add(testTimeout); len(got) < 45; {
		n, err := pb.RxQueue(0).Receive(c, bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bufs[:n] {
			got = append(got, bytes.Clone(b.Bytes()))
		}
		c.ConsumeBulk(bufs[:n])
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of 45 frames; stats %+v", len(got), pb.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i, f := range append(slices.Clone(frames[:5]), frames...) {
		if !bytes.Equal(got[i], f) {
			t.Fatalf("frame %d differs", i)
		}
	}
	s := pb.Stats()
	want := drop.Counts{}
	want[drop.HdrTrunc] = 1
	if s.RxGROBatches != 2 || s.RxPackets != 45 || s.RxDrops != want {
		t.Fatalf("want 2 coalesced datagrams, 45 frames and one cut short: %+v", s)
	}
}

// Runs of datagrams long enough to land in place (minInPlace) arrive
// intact whichever way they land: the first run copied out, the next of
// the same size one per buffer, then a run of another size and a lone
// datagram longer than that size, each spread over the buffers that
// were sized for the runs before, copied out again. A receive that
// finds nothing between two runs (a worker polls again right after a
// burst) does not make the next run of the size copied. Over either
// underlay family.
func TestPortReceivesRunsInPlace(t *testing.T) {
	for _, family := range []string{"ipv4", "ipv6"} {
		t.Run(family, func(t *testing.T) {
			a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
			if family == "ipv6" {
				a, b = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
			}
			ns := underlay(t, a, b)
			_, c := newPool(t)
			pb := openPort(t, Config{Name: "b", VNI: 42, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name})
			run := func(first, count, payload int) ([][]byte, []byte, int) {
				var frames [][]byte
				var data []byte
				for i := range count {
					f := frame(macB, macA, uint16(first+i), 53, payload)
					frames = append(frames, f)
					data = append(data, datagram(0x08, 42, 0, f)...)
				}
				return frames, data, len(data) / count
			}
			bufs := make([]*buffer.Buf, 64)
			for _, r := range []struct{ first, count, payload, copied int }{
				{1000, 30, 1350, 30}, // learns the size
				{2000, 30, 1350, 0},  // in place
				{3000, 45, 1350, 0},  // in place, more datagrams than a recvmmsg's buffers hold two messages of
				{4000, 20, 1100, 20}, // another size: copied
				{5000, 1, 1400, 1},   // one datagram over two buffers: copied
				{6000, 25, 1350, 25}, // after a burst without runs: copied
			} {
				before := pb.Stats().RxCopied
				frames, data, size := run(r.first, r.count, r.payload)
				// The last datagram of a run may be shorter (the port passes an
				// inner frame on as it came, its IP length notwithstanding).
				data = data[:len(data)-r.count/3]
				frames[r.count-1] = frames[r.count-1][:len(frames[r.count-1])-r.count/3]
				sendSegmented(t, ns, a, b, size, data)
				got := receive(t, c, pb, r.count)
				for i, f := range frames {
					if !bytes.Equal(got[i], f) {
						t.Fatalf("run from %d: frame %d of %d bytes differs (got %d bytes)", r.first, i, len(f), len(got[i]))
					}
				}
				if copied := pb.Stats().RxCopied - before; copied != uint64(r.copied) {
					t.Fatalf("run from %d: %d of %d datagrams copied out, want %d", r.first, copied, r.count, r.copied)
				}
				if n, err := pb.RxQueue(0).Receive(c, bufs); n != 0 || err != nil {
					t.Fatalf("a receive after the run: %d frames, %v", n, err)
				}
			}
			if s := pb.Stats(); s.RxPackets != 151 || s.RxDrops != (drop.Counts{}) {
				t.Fatalf("want 151 frames and no drops: %+v", s)
			}
		})
	}
}

// A UDP_SEGMENT send the kernel refuses (its datagrams do not fit the
// underlay's MTU, which shrank after the port opened) is sent again one
// datagram at a time, which the kernel fragments, and the queue sends
// no more runs: nothing is lost.
func TestPortSegmentRefused(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	ns := underlay(t, a, b)
	_, c := newPool(t)
	pa := openPort(t, Config{Name: "a", VNI: 42, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name})
	pb := openPort(t, Config{Name: "b", VNI: 42, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name})
	if out, err := ns.Exec("ip", "link", "set", "lo", "mtu", "1500"); err != nil {
		t.Fatalf("lower the MTU: %v\n%s", err, out)
	}
	var frames [][]byte
	for range 10 {
		frames = append(frames, frame(macB, macA, 1, 2, 1800))
	}
	for round := range 2 {
		if n := send(t, c, pa, frames...); n != len(frames) {
			t.Fatalf("round %d: sent %d of %d; stats %+v", round, n, len(frames), pa.Stats())
		}
		for i, f := range receive(t, c, pb, len(frames)) {
			if !bytes.Equal(f, frames[i]) {
				t.Fatalf("round %d: frame %d differs", round, i)
			}
		}
	}
	if s := pa.Stats(); s.TxGSOSends != 0 || s.TxDrops.Total() != 0 || s.TxPackets != 20 || s.TxCalls != 1+10+1 {
		t.Fatalf("want one refused run sent again one by one, then one plain sendmmsg: %+v", s)
	}
}

// sendSegmented sends payload from src to dst's VXLAN port with one
// sendmsg and UDP_SEGMENT: datagrams of size bytes, the last shorter.
func sendSegmented(t *testing.T, ns *netnstest.NS, src, dst netip.Addr, size int, payload []byte) {
	t.Helper()
	if err := ns.Do(func() error {
		family := unix.AF_INET6
		var from, to unix.Sockaddr = &unix.SockaddrInet6{Addr: src.As16()}, &unix.SockaddrInet6{Addr: dst.As16(), Port: DefaultPort}
		if src.Is4() {
			family = unix.AF_INET
			from, to = &unix.SockaddrInet4{Addr: src.As4()}, &unix.SockaddrInet4{Addr: dst.As4(), Port: DefaultPort}
		}
		fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, from); err != nil {
			return err
		}
		oob := make([]byte, unix.CmsgSpace(2))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(size))
		return unix.Sendmsg(fd, payload, oob, to, 0)
	}); err != nil {
		t.Fatalf("send with UDP_SEGMENT: %v", err)
	}
}

// A port that is closed reports itself down and drops what it is given
// as DEV_READY; a local port already in use is refused with a clear
// error.
func TestPortClosedAndBusy(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	ns := underlay(t, a, b)
	_, c := newPool(t)
	cfg := Config{Name: "a", VNI: 1, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name}
	p := openPort(t, cfg)
	if _, err := Open(cfg); err == nil {
		t.Fatal("a second port on the same local address and port opened")
	}
	if err := p.CloseInto(nil); err != nil {
		t.Fatal(err)
	}
	buf, _ := c.Get(0)
	buf.Append(60)
	if _, err := p.TxQueue(0).Transmit(c, []*buffer.Buf{buf}); err == nil {
		t.Fatal("transmit on a closed port succeeded")
	}
	if _, err := p.RxQueue(0).Receive(c, make([]*buffer.Buf, 4)); err == nil {
		t.Fatal("receive on a closed port succeeded")
	}
	if s := p.Stats(); s.TxDrops[drop.DevReady] != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A steady exchange allocates nothing per burst.
func TestPortSteadyAllocs(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	ns := underlay(t, a, b)
	_, c := newPool(t)
	pa := openPort(t, Config{Name: "a", VNI: 1, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name})
	pb := openPort(t, Config{Name: "b", VNI: 1, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name})
	// Short datagrams are copied out of their run, long ones received in
	// place (minInPlace).
	for _, payload := range []int{200, 1350} {
		steadyAllocs(t, c, pa, pb, frame(macB, macA, 1, 2, payload))
	}
}

func steadyAllocs(t *testing.T, c *buffer.Cache, pa, pb *Port, f []byte) {
	t.Helper()
	const burst = 16
	out := make([]*buffer.Buf, burst)
	in := make([]*buffer.Buf, 64)
	round := func() {
		if c.GetBulk(out, 0) != nil {
			t.Fatal("pool exhausted")
		}
		for _, b := range out {
			d, _ := b.Append(len(f))
			copy(d, f)
		}
		if _, err := pa.TxQueue(0).Transmit(c, out); err != nil {
			t.Fatal(err)
		}
		for got, polls := 0, 0; got < burst; polls++ {
			if polls > 1e6 {
				t.Fatalf("%d of %d frames arrived", got, burst)
			}
			n, err := pb.RxQueue(0).Receive(c, in)
			if err != nil {
				t.Fatal(err)
			}
			c.ConsumeBulk(in[:n])
			got += n
		}
	}
	sa0, sb0 := pa.Stats(), pb.Stats()
	round() // learn, size the tables
	if n := testing.AllocsPerRun(50, round); n != 0 {
		t.Errorf("%d-byte frames: %v allocations per burst", len(f), n)
	}
	// The path measured: each burst of one flow's equal frames is one
	// UDP_SEGMENT send, split again on receive.
	if sa, sb := pa.Stats(), pb.Stats(); sa.TxGSOSends-sa0.TxGSOSends < 50 || sb.RxGROBatches-sb0.RxGROBatches < 50 {
		t.Errorf("%d UDP_SEGMENT sends, %d coalesced receives", sa.TxGSOSends, sb.RxGROBatches)
	}
}

// Packets a guest's TAP device hands over with offloads, a TSO packet
// and one with a partial checksum (shared, as a flooded buffer is),
// leave as frames whose checksums verify on the far side; the shared
// buffer is not written to.
func TestPortFinishesOffloads(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	ns := underlay(t, a, b)
	pool, c := newPool(t)
	pa := openPort(t, Config{Name: "a", VNI: 5, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name})
	pb := openPort(t, Config{Name: "b", VNI: 5, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name})
	withHeader := func(f []byte, h vnet.Header) *buffer.Buf {
		class, _ := pool.ClassFor(len(f))
		buf, err := c.Get(class)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := buf.Append(len(f))
		copy(d, f)
		h.Encode(buf.Frame()[buf.Headroom()-vnet.HeaderLen:])
		buf.SetFlags(tun.FlagVnetHdr)
		return buf
	}
	const mss, segs = 1000, 10
	tso := withHeader(tcpFrame(mss*segs), vnet.Header{Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, HdrLen: 54, GSOSize: mss, CsumStart: 34, CsumOffset: 16})
	partial := tcpFrame(300)
	shared := withHeader(partial, vnet.Header{Flags: vnet.FlagNeedsCsum, CsumStart: 34, CsumOffset: 16})
	shared.Ref()
	if n, err := pa.TxQueue(0).Transmit(c, []*buffer.Buf{tso, shared}); err != nil || n != 2 {
		t.Fatalf("sent %d, %v", n, err)
	}
	if !bytes.Equal(shared.Bytes(), partial) {
		t.Fatal("a shared buffer was written to")
	}
	c.Consume(shared)
	got := receive(t, c, pb, segs+1)
	payload := 0
	for i, f := range got {
		var h packet.Headers
		if ok, reason := packet.Parse(f, packet.L2, &h); !ok {
			t.Fatalf("frame %d: %v", i, reason)
		}
		if !packet.TransportChecksumOK(f, &h) {
			t.Fatalf("frame %d: TCP checksum does not verify", i)
		}
		payload += h.L3Off + h.L3Len - h.L4Off - 20
	}
	if payload != mss*segs+300 {
		t.Fatalf("%d payload bytes arrived, want %d", payload, mss*segs+300)
	}
	if s := pa.Stats(); s.Segmented != 1 || s.SegmentedCopied != 1 || s.Segments != segs || s.CsumFinished != 1 || s.TxPackets != segs+1 {
		t.Fatalf("stats %+v", s)
	}
	// The TSO packet's segments, equal but for the last, left with one
	// UDP_SEGMENT send and arrived coalesced by UDP_GRO.
	if s := pa.Stats(); s.TxGSOSends != 1 {
		t.Errorf("%d UDP_SEGMENT sends, want 1", s.TxGSOSends)
	}
	if s := pb.Stats(); s.RxGROBatches != 1 || s.RxPackets != segs+1 {
		t.Errorf("%d coalesced datagrams received, want 1; stats %+v", s.RxGROBatches, s)
	}
}

// frame6 is frame over IPv6.
func frame6(dst, src [6]byte, payload int) []byte {
	b := make([]byte, 14+40+8+payload)
	n := packet.PutEthernet(b, dst, src, packet.EtherTypeIPv6)
	a, z := netip.MustParseAddr("2001:db8:9::1"), netip.MustParseAddr("2001:db8:9::2")
	packet.PutUDP(b[n:], netip.AddrPortFrom(a, 1), netip.AddrPortFrom(z, 2), b[n+48:])
	return b
}

// Over an underlay with a 1500-byte MTU, the inner MTU is 1450: a larger
// IPv4 packet with DF, or IPv6 packet, is dropped as PKT_TOO_BIG and
// its sender gets "fragmentation needed" or "packet too big" from the
// destination, through the port's own receive queue; one without DF is
// sent all the same (the outer packet fragmented), and so is one that
// fits.
func TestPortTooBig(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	ns := underlay(t, a, b)
	if out, err := ns.Exec("ip", "link", "set", "lo", "mtu", "1500"); err != nil {
		t.Fatal(err, out)
	}
	_, c := newPool(t)
	pa := openPort(t, Config{Name: "a", VNI: 9, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name})
	pb := openPort(t, Config{Name: "b", VNI: 9, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name})
	if pa.MTU() != 1450 {
		t.Fatalf("inner MTU %d, want 1450", pa.MTU())
	}
	fits := frame(macB, macA, 1, 2, 1450-28)
	big := frame(macB, macA, 1, 2, 1451-28)
	noDF := bytes.Clone(big)
	noDF[14+6] = 0
	packet.SetIPv4HeaderChecksum(noDF[14:34])
	big6 := frame6(macB, macA, 1451-48)
	if n := send(t, c, pa, big, big6, fits, noDF); n != 2 {
		t.Fatalf("sent %d of 4, want the two that fit or may be fragmented", n)
	}
	got := receive(t, c, pb, 2)
	if !bytes.Equal(got[0], fits) || !bytes.Equal(got[1], noDF) {
		t.Fatal("frames that fit or may be fragmented differ")
	}
	errs := receive(t, c, pa, 2)
	for i, e := range errs {
		var h packet.Headers
		if ok, reason := packet.Parse(e, packet.L2, &h); !ok {
			t.Fatalf("error %d: %v", i, reason)
		}
		icmp := e[h.L4Off : h.L3Off+h.L3Len]
		wantSrc, typ, mtu := "198.18.9.2", byte(3), binary.BigEndian.Uint16(icmp[6:8])
		sum := packet.Checksum(icmp, 0)
		if i == 1 {
			wantSrc, typ, mtu = "2001:db8:9::2", 2, uint16(binary.BigEndian.Uint32(icmp[4:8]))
			sum = packet.Checksum(icmp, packet.PseudoHeaderChecksum(packet.ProtoICMPv6, h.SrcIP, h.DstIP, len(icmp)))
		}
		if h.Src != macB || h.Dst != macA || h.SrcIP.String() != wantSrc || icmp[0] != typ || mtu != 1450 || sum != 0 {
			t.Errorf("error %d: %v → %v, type %d, MTU %d, checksum left %#x", i, h.SrcIP, h.DstIP, icmp[0], mtu, sum)
		}
		if quoted := icmp[8:]; !bytes.Equal(quoted[:40], [][]byte{big, big6}[i][14:54]) {
			t.Errorf("error %d does not quote the packet", i)
		}
	}
	if s := pa.Stats(); s.TxDrops[drop.PktTooBig] != 2 || s.TooBig != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// A static station's frames go to its remote only, before anything was
// learned, and never to the rest of the flood list.
func TestPortStatic(t *testing.T) {
	a, b, nowhere := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3")
	ns := underlay(t, a, b)
	_, c := newPool(t)
	macX := [6]byte{0x02, 0, 0, 0, 0, 0x42}
	pa := openPort(t, Config{Name: "a", VNI: 3, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name})
	pb := openPort(t, Config{Name: "b", VNI: 3, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{nowhere, a}, NetNS: ns.Name,
		Static: []StaticEntry{{MAC: macX, Remote: a}}})
	f := frame(macX, macB, 1, 2, 64)
	if n := send(t, c, pb, f); n != 1 {
		t.Fatalf("sent %d", n)
	}
	if got := receive(t, c, pa, 1); !bytes.Equal(got[0], f) {
		t.Fatal("frame differs")
	}
	if s := pb.Stats(); s.TxPackets != 1 || s.Flooded != 0 || s.TxDrops.Total() != 0 || s.Stations != 0 {
		t.Fatalf("stats %+v", s)
	}
	if tbl := pb.Table(); len(tbl) != 1 || !tbl[0].Static || tbl[0].Remote != a.String() || tbl[0].Age != 0 {
		t.Fatalf("table %+v", tbl)
	}
}

// ipUDP returns an IP packet carrying a UDP datagram of payload bytes.
func ipUDP(src, dst string, payload int) []byte {
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	b := make([]byte, 40+8+payload)
	hl := 20
	if s.Is6() {
		hl = 40
	}
	n := packet.PutUDP(b, netip.AddrPortFrom(s, 1000), netip.AddrPortFrom(d, 2000), b[hl+8:hl+8+payload])
	return b[:n]
}

// Two routed ports: IP packets cross to the remote their route names,
// in frames between the VTEP MACs; a packet without a route, and a
// frame to another MAC, are dropped by reason.
func TestPortRouted(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	ns := underlay(t, a, b)
	_, c := newPool(t)
	macVA, macVB := [6]byte{0x02, 0, 0, 0, 0x42, 1}, [6]byte{0x02, 0, 0, 0, 0x42, 2}
	pa := openPort(t, Config{Name: "a", VNI: 1, Local: netip.AddrPortFrom(a, 0), Remotes: []netip.Addr{b}, NetNS: ns.Name,
		L3: true, VTEPMAC: macVA, Static: []StaticEntry{{MAC: macVB, Remote: b}}})
	pb := openPort(t, Config{Name: "b", VNI: 1, Local: netip.AddrPortFrom(b, 0), Remotes: []netip.Addr{a}, NetNS: ns.Name,
		L3: true, VTEPMAC: macVB, Static: []StaticEntry{{MAC: macVA, Remote: a}}})
	if pa.Info().Layer != packet.L3 {
		t.Fatal("a routed port is not L3")
	}
	if err := pa.SetRoutes([]Route{{Prefix: netip.MustParsePrefix("198.18.22.0/24"), Via: a}}); err == nil {
		t.Fatal("a route via a non-remote was taken")
	}
	if err := pa.SetRoutes([]Route{{Prefix: netip.MustParsePrefix("198.18.22.0/24"), Via: b}, {Prefix: netip.MustParsePrefix("2001:db8:22::/64"), Via: b}}); err != nil {
		t.Fatal(err)
	}
	v4, v6 := ipUDP("198.18.21.1", "198.18.22.2", 100), ipUDP("2001:db8:21::1", "2001:db8:22::2", 333)
	if n := send(t, c, pa, v4, v6, ipUDP("198.18.21.1", "198.18.23.2", 10)); n != 2 {
		t.Fatalf("sent %d, want the two routed packets", n)
	}
	got := receive(t, c, pb, 2)
	if !bytes.Equal(got[0], v4) || !bytes.Equal(got[1], v6) {
		t.Fatal("routed packets differ")
	}
	if s := pa.Stats(); s.TxDrops[drop.NoRoute] != 1 || s.TxPackets != 2 {
		t.Fatalf("a: %+v", s)
	}
	// As the kernel's VTEP does, b takes only frames to its MAC.
	other := make([]byte, 14+len(v4))
	packet.PutEthernet(other, [6]byte{0x02, 0, 0, 0, 0, 0x99}, macVA, packet.EtherTypeIPv4)
	copy(other[14:], v4)
	arp := make([]byte, 60)
	packet.PutEthernet(arp, macVB, macVA, packet.EtherTypeARP)
	sendFrom(t, ns, a, b, datagram(0x08, 1, 0, other), datagram(0x08, 1, 0, arp))
	want := drop.Counts{}
	want[drop.OtherHost], want[drop.UnhandledProto] = 1, 1
	waitStats(t, pb, c, "drops by reason", func(s Stats) bool { return s.RxDrops == want })
	if s := pb.Stats(); s.Learned != 0 || s.Stations != 0 {
		t.Fatalf("a routed port learned: %+v", s)
	}
}

// A received TCP frame longer than a 1500-byte MTU becomes a GSO packet
// whose segments fit that MTU and carry correct checksums; other frames
// are left alone.
func TestMarkGSO(t *testing.T) {
	pool, c := newPool(t)
	put := func(f []byte) *buffer.Buf {
		class, _ := pool.ClassFor(len(f))
		b, err := c.Get(class)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := b.Append(len(f))
		copy(d, f)
		return b
	}
	b := put(tcpFrame(5000))
	defer c.Consume(b)
	if !markGSO(b, packet.L2) || b.Flags() != tun.FlagVnetHdr {
		t.Fatal("not marked")
	}
	h, _ := vnet.Decode(b.Frame()[b.Headroom()-vnet.HeaderLen:])
	if h.GSOType != vnet.GSOTCPv4 || h.GSOSize != 1460 || h.HdrLen != 54 || !h.NeedsCsum() {
		t.Fatalf("header %+v", h)
	}
	segs := make([]*buffer.Buf, vnet.MaxSegments)
	n, reason := vnet.Segment(c, h, b.Bytes(), packet.L2, segs)
	if n != 4 {
		t.Fatalf("%d segments (%v)", n, reason)
	}
	for _, s := range segs[:n] {
		var ph packet.Headers
		if ok, _ := packet.Parse(s.Bytes(), packet.L2, &ph); !ok || ph.L3Len > 1500 || !packet.TransportChecksumOK(s.Bytes(), &ph) {
			t.Fatalf("segment of %d bytes: bad", s.Len())
		}
	}
	c.ConsumeBulk(segs[:n])
	for _, f := range [][]byte{tcpFrame(1000), frame(macB, macA, 1, 2, 5000)} {
		o := put(f)
		if markGSO(o, packet.L2) || o.Flags() != 0 {
			t.Error("a frame that is no large TCP packet was marked")
		}
		c.Consume(o)
	}
}
