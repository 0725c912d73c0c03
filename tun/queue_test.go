package tun

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
	"softnet.dev/port"
)

// tunFile opens /dev/net/tun in ns and attaches it to the device name,
// as a program handing the file to FromFiles would; closed at cleanup
// unless FromFiles's Close did.
func tunFile(t *testing.T, ns *netnstest.NS, name string, flags uint16) *os.File {
	t.Helper()
	var f *os.File
	err := ns.Do(func() error {
		fd, err := unix.Open(devNetTun, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(name)
		if err == nil {
			ifr.SetUint16(flags)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", name, err)
		}
		f = os.NewFile(uintptr(fd), devNetTun)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// readMatching reads from q until match accepts a packet, and returns
// it; bounded in reads, which block until a packet is there.
func readMatching(t *testing.T, q *Queue, bufs [][]byte, offset int, match func([]byte) bool) []byte {
	t.Helper()
	sizes := make([]int, len(bufs))
	for range 100 {
		n, err := q.Read(bufs, sizes, offset)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		for i := range n {
			if p := bufs[i][offset : offset+sizes[i]]; match(p) {
				return p
			}
		}
	}
	t.Fatal("no matching packet in 100 reads")
	return nil
}

func udpTo(layer packet.Layer, dst netip.AddrPort) func([]byte) bool {
	return func(p []byte) bool {
		var h packet.Headers
		ok, _ := packet.Parse(p, layer, &h)
		return ok && h.IPProto == packet.ProtoUDP && h.DstIP == dst.Addr() && h.DstPort == dst.Port()
	}
}

func makeBufs(n, size int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	return bufs
}

// FromFiles takes over files the test attached itself, learns the device
// from them, and its Close closes them, which removes the device.
func TestFromFiles(t *testing.T) {
	const tunFlags, tapFlags = unix.IFF_TUN | unix.IFF_NO_PI, unix.IFF_TAP | unix.IFF_NO_PI
	for _, tc := range []struct {
		name     string
		flags    uint16
		files    int
		layer    packet.Layer
		maxFrame int
	}{
		{"tun-vnet", tunFlags | unix.IFF_VNET_HDR, 1, packet.L3, MaxMTU},
		{"tun-plain", tunFlags, 1, packet.L3, 1500}, // the MTU looked up
		{"tap-vnet", tapFlags | unix.IFF_VNET_HDR, 1, packet.L2, MaxMTU + linkOverhead(true)},
		{"multiqueue", tunFlags | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE, 2, packet.L3, MaxMTU},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := netnstest.New(t)
			name := devName("ff")
			var files []*os.File
			for range tc.files {
				files = append(files, tunFile(t, ns, name, tc.flags))
			}
			exec(t, ns, "ip", "link", "set", name, "up")
			d, err := FromFiles(FileConfig{}, files...)
			if err != nil {
				t.Fatal(err)
			}
			info := d.Info()
			if info.Name != name || info.Layer != tc.layer || info.Queues != tc.files || info.MaxFrame != tc.maxFrame || d.Created() {
				t.Errorf("Info() = %+v, Created() = %v; want %s, %v, %d queues, max frame %d, not created", info, d.Created(), name, tc.layer, tc.files, tc.maxFrame)
			}
			vnetHdr := tc.flags&unix.IFF_VNET_HDR != 0
			if base := port.OffloadCsum | port.OffloadTSO4 | port.OffloadTSO6; vnetHdr && info.Offloads&base != base || !vnetHdr && info.Offloads != 0 {
				t.Errorf("offloads %v with vnet header %v", info.Offloads, vnetHdr)
			}
			if tc.layer == packet.L3 {
				addAddrs(t, ns, name, hostV4, netip.Addr{})
				sock := dialUDP(t, ns, netip.AddrPortFrom(peerV4, 9))
				if _, err := sock.Write([]byte("from the namespace")); err != nil {
					t.Fatal(err)
				}
				// Packets of a flow go to one queue, not necessarily 0.
				p := readAny(t, d, makeBufs(4, 2048), 16, udpTo(packet.L3, netip.AddrPortFrom(peerV4, 9)))
				if !strings.HasSuffix(string(p), "from the namespace") {
					t.Errorf("read %q", p)
				}
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			for i, f := range files {
				if err := f.Close(); !errors.Is(err, os.ErrClosed) {
					t.Errorf("file %d after Close: Close = %v, want it closed already", i, err)
				}
			}
			if out, ok := linkShow(t, ns, name); ok {
				t.Errorf("device still exists after its files closed: %s", out)
			}
		})
	}
}

// readAny reads the device's queues in turn, without blocking on an idle
// one, until match accepts a packet.
func readAny(t *testing.T, d *Device, bufs [][]byte, offset int, match func([]byte) bool) []byte {
	t.Helper()
	sizes := make([]int, len(bufs))
	deadline := time.Now().Add(testTimeout)
	for time.Now().Before(deadline) {
		for i := range d.Info().Queues {
			q := d.Queue(i)
			n, err := q.readBurst(bufs, sizes, offset)
			if err != nil {
				t.Fatalf("queue %d: %v", i, err)
			}
			for j := range n {
				if p := bufs[j][offset : offset+sizes[j]]; match(p) {
					return p
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no matching packet in %v", testTimeout)
	return nil
}

func TestFromFilesErrors(t *testing.T) {
	regular, err := os.CreateTemp(t.TempDir(), "not-a-tun")
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	cases := map[string][]*os.File{
		"no files":     nil,
		"nil file":     {nil},
		"regular file": {regular},
	}
	closed, err := os.CreateTemp(t.TempDir(), "closed")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	cases["closed file"] = []*os.File{closed}
	for name, files := range cases {
		if d, err := FromFiles(FileConfig{}, files...); err == nil {
			d.Close()
			t.Errorf("%s: FromFiles succeeded", name)
		} else if !strings.HasPrefix(err.Error(), "tun") {
			t.Errorf("%s: error %q lacks context", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}

	ns := netnstest.New(t)
	unattached, err := os.OpenFile(devNetTun, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unattached.Close()
	a := tunFile(t, ns, "ffa", unix.IFF_TUN|unix.IFF_NO_PI|unix.IFF_MULTI_QUEUE)
	b := tunFile(t, ns, "ffb", unix.IFF_TUN|unix.IFF_NO_PI|unix.IFF_MULTI_QUEUE)
	plain := tunFile(t, ns, "ffplain", unix.IFF_TUN|unix.IFF_NO_PI)
	for _, tc := range []struct {
		name  string
		cfg   FileConfig
		files []*os.File
	}{
		{"unattached /dev/net/tun", FileConfig{}, []*os.File{unattached}},
		{"two devices", FileConfig{}, []*os.File{a, b}},
		{"GRO without vnet header", FileConfig{GRO: true}, []*os.File{plain}},
		{"KeepGSO without vnet header", FileConfig{KeepGSO: true}, []*os.File{plain}},
		{"MTU too small", FileConfig{MTU: 20}, []*os.File{plain}},
	} {
		if d, err := FromFiles(tc.cfg, tc.files...); err == nil {
			d.Close()
			t.Errorf("%s: FromFiles succeeded", tc.name)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	// The files stay the caller's, and usable.
	if d, err := FromFiles(FileConfig{}, a); err != nil {
		t.Errorf("a file refused alongside another is not usable alone: %v", err)
	} else if err := d.Close(); err != nil {
		t.Error(err)
	}
}

// queueRig is a device with offloads in a namespace with the host
// addresses, the namespace's traffic to the peer addresses going to it.
func queueRig(t *testing.T, cfg Config) (*netnstest.NS, *Device) {
	ns := netnstest.New(t)
	cfg.Name, cfg.NetNS = devName("q"), ns.Name
	d := openDev(t, cfg)
	addAddrs(t, ns, cfg.Name, hostV4, hostV6)
	return ns, d
}

// Read blocks until a datagram the namespace sends is there, into
// buffers of any size.
func TestQueueReadUDP(t *testing.T) {
	ns, d := queueRig(t, Config{Offload: true})
	q := d.Queue(0)
	for _, v6 := range []bool{false, true} {
		for _, size := range []int{2048, 16 + MaxMTU} {
			t.Run(fmt.Sprintf("ipv6=%v,buf=%d", v6, size), func(t *testing.T) {
				peer := peerV4
				if v6 {
					peer = peerV6
				}
				dst := netip.AddrPortFrom(peer, 4000)
				sock := dialUDP(t, ns, dst)
				msg := []byte(t.Name())
				if _, err := sock.Write(msg); err != nil {
					t.Fatal(err)
				}
				p := readMatching(t, q, makeBufs(q.BatchSize(), size), 16, udpTo(packet.L3, dst))
				var h packet.Headers
				packet.Parse(p, packet.L3, &h)
				if got := p[h.L4Off+packet.UDPHeaderLen:]; string(got) != string(msg) {
					t.Errorf("payload %q, want %q", got, msg)
				}
				if !packet.TransportChecksumOK(p, &h) {
					t.Error("the checksum is not finished")
				}
			})
		}
	}
	if s := d.Stats(); s.RxPackets == 0 || s.RxDrops.Total() != 0 {
		t.Errorf("stats %+v", s)
	}
}

// relayQueues moves packets from one device's queue 0 to the other's
// with Read and Write until Close, and returns the first error that is
// not the device closing.
func relayQueues(from, to *Device, done chan<- error) {
	src, dst := from.Queue(0), to.Queue(0)
	bufs := makeBufs(src.BatchSize(), 16+MaxMTU)
	sizes := make([]int, len(bufs))
	pkts := make([][]byte, len(bufs))
	for {
		n, err := src.Read(bufs, sizes, 16)
		if err != nil {
			if errors.Is(err, port.ErrDown) {
				err = nil
			}
			done <- err
			return
		}
		for i := range n {
			pkts[i] = bufs[i][:16+sizes[i]]
		}
		if _, err := dst.Write(pkts[:n], 16); err != nil && !errors.Is(err, port.ErrDown) {
			done <- err
			return
		}
	}
}

// A TCP stream through two Read/Write relays: TSO packets are split by
// Read and coalesced again by Write, or with KeepGSO pass whole.
func TestQueueTCPGSO(t *testing.T) {
	payload := pattern(1<<20, 1448)
	for _, keep := range []bool{false, true} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("keep=%v,ipv6=%v", keep, v6), func(t *testing.T) {
				nsA, nsB := netnstest.New(t), netnstest.New(t)
				nameA, nameB := devName("ta"), devName("tb")
				a := openDev(t, Config{Name: nameA, NetNS: nsA.Name, Offload: true, GRO: true, KeepGSO: keep})
				b := openDev(t, Config{Name: nameB, NetNS: nsB.Name, Offload: true, GRO: true, KeepGSO: keep})
				addAddrs(t, nsA, nameA, hostV4, hostV6)
				addAddrs(t, nsB, nameB, peerV4, peerV6)
				done := make(chan error, 2)
				go relayQueues(a, b, done)
				go relayQueues(b, a, done)
				peer := peerV4
				if v6 {
					peer = peerV6
				}
				streamTCP(t, nsA, nsB, peer, payload, 10*time.Second)
				a.Close()
				b.Close()
				for range 2 {
					if err := <-done; err != nil {
						t.Errorf("relay: %v", err)
					}
				}
				sa, sb := a.Stats(), b.Stats()
				if keep && (sa.GSOIn == 0 || sb.GSOOut == 0 || sa.Segmented != 0) {
					t.Errorf("TSO packets did not pass whole: A %+v, B %+v", sa, sb)
				}
				if !keep && (sa.Segmented == 0 || sa.Segments <= sa.Segmented || sb.Coalesced == 0) {
					t.Errorf("TSO packets were not split by Read and coalesced by Write: A %+v, B %+v", sa, sb)
				}
			})
		}
	}
}

// streamTCP sends payload over TCP from nsFrom to a listener on peer in
// nsTo, and checks that it arrives intact within the timeout.
func streamTCP(t *testing.T, nsFrom, nsTo *netnstest.NS, peer netip.Addr, payload []byte, timeout time.Duration) {
	t.Helper()
	var ln net.Listener
	if err := nsTo.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(peer, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	deadline := time.Now().Add(timeout)
	received := make(chan []byte, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			received <- nil
			return
		}
		defer conn.Close()
		conn.SetDeadline(deadline)
		got := make([]byte, 0, len(payload))
		buf := make([]byte, 1<<16)
		for {
			n, err := conn.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		received <- got
	}()
	var conn net.Conn
	if err := nsFrom.Do(func() (err error) {
		d := net.Dialer{Deadline: deadline}
		conn, err = d.Dial("tcp", ln.Addr().String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(deadline)
	if _, err := conn.Write(payload); err != nil {
		t.Errorf("write: %v", err)
	}
	conn.Close()
	if got := <-received; string(got) != string(payload) {
		t.Errorf("received %d bytes, want the %d sent intact", len(got), len(payload))
	}
}

// Write coalesces a burst of datagrams of one flow into one USO packet,
// and the socket behind the device receives each intact.
func TestQueueWriteCoalesces(t *testing.T) {
	ns, d := queueRig(t, Config{Offload: true, GRO: true})
	if uso := port.OffloadUSO4 | port.OffloadUSO6; d.Info().Offloads&uso != uso {
		t.Skipf("the kernel refused USO (offloads %v)", d.Info().Offloads)
	}
	const count, size, offset = 20, 1200, 16
	sock := listenUDP(t, ns, hostV4)
	dst := sock.LocalAddr().(*net.UDPAddr).AddrPort()
	src := netip.AddrPortFrom(peerV4, 5000)
	payload := pattern(count*size, size)
	bufs := make([][]byte, count)
	for i := range bufs {
		b := make([]byte, offset+packet.IPv4HeaderLen+packet.UDPHeaderLen+size)
		n := packet.PutUDP(b[offset:], src, dst, payload[i*size:(i+1)*size])
		bufs[i] = b[:offset+n]
	}
	if n, err := d.Queue(0).Write(bufs, offset); n != count || err != nil {
		t.Fatalf("Write = %d, %v (stats %+v)", n, err, d.Stats())
	}
	expectDatagrams(t, sock, payload, size)
	if s := d.Stats(); s.Coalesced != 1 || s.CoalescedSegs != count || s.TxPackets != 1 || s.TxDrops.Total() != 0 {
		t.Errorf("stats %+v: want the %d datagrams written as one packet", s, count)
	}
}

// Close ends a Read (and a Receive) blocked on an idle device with an
// error matching port.ErrDown.
func TestQueueCloseUnblocksRead(t *testing.T) {
	_, c := newPool(t, buffer.Config{})
	for _, pool := range []bool{false, true} {
		t.Run(fmt.Sprintf("pool=%v", pool), func(t *testing.T) {
			ns := netnstest.New(t)
			d, err := Open(Config{Name: devName("cl"), NetNS: ns.Name, Offload: true})
			if err != nil {
				t.Fatal(err)
			}
			// No addresses and no IPv6: next to nothing is sent to the
			// device, and whatever is, is read until Close.
			disableIPv6(t, ns, d.Info().Name)
			q := d.Queue(0)
			started, done := make(chan struct{}), make(chan error, 1)
			go func() {
				close(started)
				bufs, sizes, pbufs := makeBufs(8, 2048), make([]int, 8), make([]*buffer.Buf, 8)
				for {
					var err error
					if pool {
						var n int
						n, err = q.Receive(c, pbufs)
						c.ConsumeBulk(pbufs[:n])
					} else {
						_, err = q.Read(bufs, sizes, 16)
					}
					if err != nil {
						done <- err
						return
					}
				}
			}()
			<-started
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, port.ErrDown) {
				t.Errorf("blocked read returned %v, want port.ErrDown", err)
			}
			if _, err := q.Read(makeBufs(1, 2048), make([]int, 1), 16); !errors.Is(err, port.ErrDown) {
				t.Errorf("Read after Close = %v, want port.ErrDown", err)
			}
			if _, err := q.Write(makeBufs(1, 100), 16); !errors.Is(err, port.ErrDown) {
				t.Errorf("Write after Close = %v, want port.ErrDown", err)
			}
			b, _ := c.Get(buffer.ClassMTU)
			if _, err := q.Transmit(c, []*buffer.Buf{b}); !errors.Is(err, port.ErrDown) {
				t.Errorf("Transmit after Close = %v, want port.ErrDown", err)
			}
		})
	}
}

// Bad arguments are errors, and nothing is read or written.
func TestQueueBadInputs(t *testing.T) {
	_, plain := queueRig(t, Config{Offload: true})
	_, keep := queueRig(t, Config{Offload: true, KeepGSO: true})
	for _, tc := range []struct {
		name   string
		d      *Device
		bufs   [][]byte
		sizes  int
		offset int
	}{
		{"negative offset", plain, makeBufs(2, 2048), 2, -1},
		{"fewer sizes", plain, makeBufs(2, 2048), 1, 16},
		{"buffer no longer than offset", plain, makeBufs(2, 16), 2, 16},
		{"one short buffer", plain, append(makeBufs(1, 2048), nil), 2, 16},
		{"KeepGSO offset below the header", keep, makeBufs(2, 16+MaxMTU), 2, 4},
		{"KeepGSO short buffers", keep, makeBufs(2, 2048), 2, 16},
	} {
		n, err := tc.d.Queue(0).Read(tc.bufs, make([]int, tc.sizes), tc.offset)
		if err == nil || n != 0 || !strings.HasPrefix(err.Error(), "tun ") {
			t.Errorf("%s: Read = %d, %v; want an error with context", tc.name, n, err)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	for _, tc := range []struct {
		name   string
		d      *Device
		bufs   [][]byte
		offset int
	}{
		{"negative offset", plain, makeBufs(2, 100), -1},
		{"buffer shorter than offset", plain, makeBufs(2, 10), 16},
		{"KeepGSO offset below the header", keep, makeBufs(2, 100), 4},
	} {
		n, err := tc.d.Queue(0).Write(tc.bufs, tc.offset)
		if err == nil || n != 0 || !strings.HasPrefix(err.Error(), "tun ") {
			t.Errorf("%s: Write = %d, %v; want an error with context", tc.name, n, err)
		}
	}
	// Packets the device refuses are counted drops, not errors.
	empty, huge := make([]byte, 16), make([]byte, 16+MaxMTU+1)
	if n, err := plain.Queue(0).Write([][]byte{empty, huge}, 16); n != 0 || err != nil {
		t.Errorf("Write of an empty and a too long packet = %d, %v; want 0, nil", n, err)
	}
	if s := plain.Stats(); s.TxDrops[drop.PktTooSmall] != 1 || s.TxDrops[drop.PktTooBig] != 1 {
		t.Errorf("tx drops %v, want one PKT_TOO_SMALL and one PKT_TOO_BIG", s.TxDrops)
	}
	if plain.Queue(-1) != nil || plain.Queue(1) != nil {
		t.Error("Queue of a queue that does not exist is not nil")
	}
}

// A GSO packet Read cannot split into the caller's buffers is a counted
// drop, and one with more segments than buffers left waits for the next
// Read.
func TestQueueReadGSOBatch(t *testing.T) {
	ns, d := queueRig(t, Config{Offload: true})
	if d.Info().Offloads&port.OffloadUSO4 == 0 {
		t.Skip("the kernel refused USO: no UDP GSO packets to split")
	}
	const segs, size = 8, 1000
	dst := netip.AddrPortFrom(peerV4, 4001)
	gso := rawUDP(t, ns, netip.AddrPortFrom(hostV4, 0), dst)
	if err := unix.SetsockoptInt(gso, unix.SOL_UDP, unix.UDP_SEGMENT, size); err != nil {
		t.Fatal(err)
	}
	// Each GSO packet's payload is its number in every byte.
	sent := byte(0)
	send := func() {
		sent++
		if _, err := unix.Write(gso, bytes.Repeat([]byte{sent}, segs*size)); err != nil {
			t.Fatal(err)
		}
	}
	q := d.Queue(0)
	match := udpTo(packet.L3, dst)
	// Too few buffers for any of it: dropped as GSO_SEG. A plain
	// datagram behind it ends the Read.
	send()
	plain := rawUDP(t, ns, netip.AddrPortFrom(hostV4, 0), dst)
	if _, err := unix.Write(plain, []byte("after")); err != nil {
		t.Fatal(err)
	}
	readMatching(t, q, makeBufs(segs-1, 2048), 16, func(p []byte) bool { return match(p) && len(p) == 28+len("after") })
	if n := d.Stats().RxDrops[drop.GsoSeg]; n != 1 {
		t.Fatalf("%d GSO_SEG drops, want 1", n)
	}
	// Five datagrams and a GSO packet into 12 buffers: the GSO packet
	// waits, whole, for the next Read, also when it was read directly
	// into a buffer of the caller's.
	for _, bufSize := range []int{2048, 16 + MaxMTU} {
		for range 5 {
			if _, err := unix.Write(plain, []byte("ahead")); err != nil {
				t.Fatal(err)
			}
		}
		send()
		bufs := makeBufs(segs+4, bufSize)
		sizes := make([]int, len(bufs))
		var got []int // lengths of the matching packets, by Read
		for reads := 0; len(got) < 5+segs; reads++ {
			n, err := q.Read(bufs, sizes, 16)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				p := bufs[i][16 : 16+sizes[i]]
				if !match(p) {
					continue
				}
				var h packet.Headers
				packet.Parse(p, packet.L3, &h)
				if !packet.TransportChecksumOK(p, &h) {
					t.Fatalf("packet %d: bad checksum", len(got))
				}
				if sizes[i] > 33 && p[len(p)-1] != sent {
					t.Fatalf("segment of GSO packet %d, want %d", p[len(p)-1], sent)
				}
				got = append(got, sizes[i])
			}
		}
		want := []int{33, 33, 33, 33, 33}
		for range segs {
			want = append(want, packet.IPv4HeaderLen+packet.UDPHeaderLen+size)
		}
		if !slices.Equal(got, want) {
			t.Errorf("buffers of %d bytes: packet lengths %v, want %v", bufSize, got, want)
		}
	}
	if s := d.Stats(); s.Segmented != 2 || s.RxDrops[drop.GsoSeg] != 1 {
		t.Errorf("stats %+v", s)
	}
}

// The blocking paths allocate nothing in steady state: Write and Read
// (with a GSO packet split), Transmit and Receive.
func TestQueueAllocatesNothing(t *testing.T) {
	_, c := newPool(t, buffer.Config{})
	ns := netnstest.New(t)
	name := devName("qa")
	d := openDev(t, Config{Name: name, NetNS: ns.Name, Offload: true, GRO: true})
	addAddrs(t, ns, name, hostV4, netip.Addr{})
	disableIPv6(t, ns, name) // no link-local chatter
	q := d.Queue(0)
	toHost := echoRequest(peerV4, hostV4) // answered out of the device
	isReply := func(p []byte) bool {
		return len(p) > packet.IPv4HeaderLen && p[9] == packet.ProtoICMP && p[packet.IPv4HeaderLen] == 0
	}
	const offset = 16
	out := [][]byte{append(make([]byte, offset), toHost...)}
	bufs := makeBufs(q.BatchSize(), 2048)
	sizes := make([]int, len(bufs))
	dst := netip.AddrPortFrom(peerV4, 4002)
	gso := rawUDP(t, ns, netip.AddrPortFrom(hostV4, 0), dst)
	if err := unix.SetsockoptInt(gso, unix.SOL_UDP, unix.UDP_SEGMENT, 1000); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 8000)
	isSegment := func(p []byte) bool { return len(p) == 28+1000 && p[9] == packet.ProtoUDP }

	// readUntil reads until match has taken want packets, bounded in
	// reads rather than time to stay allocation-free.
	readUntil := func(want int, match func([]byte) bool) {
		got := 0
		for range 50 {
			n, err := q.Read(bufs, sizes, offset)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if match(bufs[i][offset : offset+sizes[i]]) {
					got++
				}
			}
			if got >= want {
				return
			}
		}
		t.Fatalf("got %d matching packets in 50 reads, want %d", got, want)
	}
	bytesPath := func() {
		if n, err := q.Write(out, offset); n != 1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		readUntil(1, isReply)
		if _, err := unix.Write(gso, payload); err != nil {
			t.Fatal(err)
		}
		readUntil(8, isSegment)
	}
	pbufs := make([]*buffer.Buf, 64)
	poolPath := func() {
		b, err := c.Get(buffer.ClassMTU)
		if err != nil {
			t.Fatal(err)
		}
		b.SetData(b.Headroom(), copy(b.Frame()[b.Headroom():], toHost))
		pbufs[0] = b
		if n, err := q.Transmit(c, pbufs[:1]); n != 1 || err != nil {
			t.Fatalf("Transmit = %d, %v", n, err)
		}
		for range 50 {
			n, err := q.Receive(c, pbufs)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, b := range pbufs[:n] {
				found = found || isReply(b.Bytes())
			}
			c.ConsumeBulk(pbufs[:n])
			if found {
				return
			}
		}
		t.Fatal("no echo reply in 50 receives")
	}
	bytesPath() // warm up: scratch, GRO state, the cache
	poolPath()
	if a := testing.AllocsPerRun(100, bytesPath); a != 0 {
		t.Errorf("Write+Read: %v allocations per run", a)
	}
	if a := testing.AllocsPerRun(100, poolPath); a != 0 {
		t.Errorf("Transmit+Receive: %v allocations per run", a)
	}
	if s := d.Stats(); s.Segmented == 0 && d.Info().Offloads&port.OffloadUSO4 != 0 {
		t.Errorf("no GSO packet was split: %+v", s)
	}
}
