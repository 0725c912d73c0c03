package tun

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/vnet"
)

// offloadRig is three hosts: the sender's device A with offloads, and
// two receivers with the same addresses, B without offloads (packets
// marked for offload are segmented or checksummed in software for it) and
// C with them (the same packets pass whole, without a copy).
type offloadRig struct {
	cache            *buffer.Cache
	nsA, nsB, nsC    *netnstest.NS
	devA, devB, devC *Device
	sockB, sockC     map[bool]*net.UDPConn // by IPv6
}

func newOffloadRig(t *testing.T) *offloadRig {
	_, c := newPool(t, buffer.Config{})
	r := &offloadRig{cache: c, sockB: map[bool]*net.UDPConn{}, sockC: map[bool]*net.UDPConn{}}
	r.nsA = netnstest.New(t)
	r.nsB, r.nsC = netnstest.New(t), netnstest.New(t)
	nsB, nsC := r.nsB, r.nsC
	nameA, nameB, nameC := devName("sna"), devName("snb"), devName("snc")
	r.devA = openDev(t, Config{Name: nameA, NetNS: r.nsA.Name, Offload: true})
	r.devB = openDev(t, Config{Name: nameB, NetNS: nsB.Name})
	r.devC = openDev(t, Config{Name: nameC, NetNS: nsC.Name, Offload: true})
	addAddrs(t, r.nsA, nameA, hostV4, hostV6)
	addAddrs(t, nsB, nameB, peerV4, peerV6)
	addAddrs(t, nsC, nameC, peerV4, peerV6)
	for _, v6 := range []bool{false, true} {
		addr := peerV4
		if v6 {
			addr = peerV6
		}
		r.sockB[v6] = listenUDP(t, nsB, addr)
		// C's socket on B's port: the sender addresses both at once.
		p := r.sockB[v6].LocalAddr().(*net.UDPAddr).Port
		var conn *net.UDPConn
		if err := nsC.Do(func() (err error) {
			conn, err = net.ListenUDP("udp", &net.UDPAddr{IP: addr.AsSlice(), Port: p})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		r.sockC[v6] = conn
	}
	return r
}

func (r *offloadRig) dst(v6 bool) netip.AddrPort {
	return r.sockB[v6].LocalAddr().(*net.UDPAddr).AddrPort()
}

// header returns the vnet header a marked packet carries before its data.
func header(t *testing.T, b *buffer.Buf) vnet.Header {
	t.Helper()
	if b.Flags() != FlagVnetHdr {
		t.Fatalf("packet not marked (mark %d)", b.Flags())
	}
	h, _ := vnet.Decode(b.Frame()[b.Headroom()-vnet.HeaderLen:])
	return h
}

// expectDatagrams reads want datagrams from conn and checks them against
// the payload, split at size.
func expectDatagrams(t *testing.T, conn *net.UDPConn, payload []byte, size int) {
	t.Helper()
	buf := make([]byte, 70000)
	for off := 0; off < len(payload); off += size {
		want := payload[off:min(off+size, len(payload))]
		n, err := readUDP(t, conn, buf)
		if err != nil {
			t.Fatalf("datagram at %d: %v", off, err)
		}
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("datagram at %d: %d bytes, want %d (first bytes %q, want %q)", off, n, len(want), buf[:min(n, 8)], want[:min(len(want), 8)])
		}
	}
}

// pattern returns n bytes that differ per datagram of size bytes.
func pattern(n, size int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i/size) + byte(i%251)
	}
	return p
}

// UDP GSO: the kernel hands a 8000-byte UDP_SEGMENT send to A whole; it
// reaches B (no USO) as segments made here and C (USO) whole, and both
// sockets receive the same 8 datagrams.
func TestGSOUDP(t *testing.T) {
	r := newOffloadRig(t)
	const gsoSize, total = 1000, 8000
	uso := port.OffloadUSO4 | port.OffloadUSO6
	if r.devA.Info().Offloads&uso != uso {
		t.Skipf("the kernel refused USO (offloads %v): no UDP GSO packets to test with", r.devA.Info().Offloads)
	}
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ipv6=%v", v6), func(t *testing.T) {
			send := dialUDP(t, r.nsA, r.dst(v6))
			raw, err := send.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var serr error
			if err := raw.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, gsoSize)
			}); err != nil || serr != nil {
				t.Fatal(err, serr)
			}
			payload := pattern(total, gsoSize)
			if _, err := send.Write(payload); err != nil {
				t.Fatal(err)
			}
			got := receive(t, r.cache, r.devA.RxQueue(0), 1, isUDPTo(packet.L3, r.dst(v6)))
			b := got[0]
			h := header(t, b)
			if h.GSOType != vnet.GSOUDPL4 || h.GSOSize != gsoSize || !h.NeedsCsum() {
				t.Errorf("header %+v, want UDP_L4 GSO of %d with NEEDS_CSUM", h, gsoSize)
			}
			if n := vnet.SegmentCount(h, b.Bytes(), packet.L3); n != total/gsoSize {
				t.Errorf("SegmentCount = %d", n)
			}
			before := bytes.Clone(b.Bytes())

			// One buffer for both egresses, as a flood shares it.
			b.Ref()
			if n, err := r.devB.TxQueue(0).Transmit(r.cache, []*buffer.Buf{b}); n != 1 || err != nil {
				t.Fatalf("Transmit to B = %d, %v (stats %+v)", n, err, r.devB.Stats())
			}
			if !bytes.Equal(b.Bytes(), before) {
				t.Error("segmenting changed the shared packet")
			}
			if n, err := r.devC.TxQueue(0).Transmit(r.cache, []*buffer.Buf{b}); n != 1 || err != nil {
				t.Fatalf("Transmit to C = %d, %v (stats %+v)", n, err, r.devC.Stats())
			}
			expectDatagrams(t, r.sockB[v6], payload, gsoSize)
			expectDatagrams(t, r.sockC[v6], payload, gsoSize)
		})
	}
	sa, sb, sc := r.devA.Stats(), r.devB.Stats(), r.devC.Stats()
	if sa.GSOIn != 2 {
		t.Errorf("A: GSO in %d, want 2", sa.GSOIn)
	}
	if sb.Segmented != 2 || sb.Segments != 2*total/gsoSize || sb.TxPackets != sb.Segments || sb.TxDrops.Total() != 0 {
		t.Errorf("B: %+v, want 2 packets segmented into %d", sb, 2*total/gsoSize)
	}
	if sc.GSOOut != 2 || sc.TxPackets != 2 || sc.TxDrops.Total() != 0 {
		t.Errorf("C: %+v, want 2 GSO packets passed whole", sc)
	}
}

// Checksum offload: a datagram the kernel left to checksum reaches B
// with its checksum finished here (in a copy while the buffer is shared,
// in place when it is not) and C as it is.
func TestChecksumOffload(t *testing.T) {
	r := newOffloadRig(t)
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ipv6=%v", v6), func(t *testing.T) {
			send := dialUDP(t, r.nsA, r.dst(v6))
			for _, shared := range []bool{true, false} {
				payload := pattern(1200, 1200)
				payload[0] = map[bool]byte{false: 'x', true: 's'}[shared]
				if _, err := send.Write(payload); err != nil {
					t.Fatal(err)
				}
				b := receive(t, r.cache, r.devA.RxQueue(0), 1, isUDPTo(packet.L3, r.dst(v6)))[0]
				if h := header(t, b); h.IsGSO() || !h.NeedsCsum() {
					t.Errorf("header %+v, want NEEDS_CSUM without GSO", h)
				}
				before := bytes.Clone(b.Bytes())
				if shared {
					b.Ref()
				}
				if n, err := r.devB.TxQueue(0).Transmit(r.cache, []*buffer.Buf{b}); n != 1 || err != nil {
					t.Fatalf("Transmit to B = %d, %v (stats %+v)", n, err, r.devB.Stats())
				}
				expectDatagrams(t, r.sockB[v6], payload, len(payload))
				if shared {
					if !bytes.Equal(b.Bytes(), before) {
						t.Error("finishing the checksum changed the shared packet")
					}
					if n, err := r.devC.TxQueue(0).Transmit(r.cache, []*buffer.Buf{b}); n != 1 || err != nil {
						t.Fatalf("Transmit to C = %d, %v", n, err)
					}
					expectDatagrams(t, r.sockC[v6], payload, len(payload))
				}
			}
		})
	}
	if s := r.devB.Stats(); s.CsumFinished != 4 || s.TxDrops.Total() != 0 {
		t.Errorf("B: %+v, want 4 checksums finished", s)
	}
}

// relay moves packets both ways between two devices until stop is
// closed, owning c meanwhile: a two-port switch for TCP tests.
func relay(c *buffer.Cache, x, y *Device, stop <-chan struct{}) error {
	bufs := make([]*buffer.Buf, 64)
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		moved := 0
		for _, dir := range [2][2]*Device{{x, y}, {y, x}} {
			n, err := dir[0].RxQueue(0).Receive(c, bufs)
			if err != nil {
				return err
			}
			if n > 0 {
				if _, err := dir[1].TxQueue(0).Transmit(c, bufs[:n]); err != nil {
					return err
				}
				moved += n
			}
		}
		if moved == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// TCP segmentation offload: a TCP stream from A's namespace through a
// relay, to B (TSO packets segmented here) and to C (passed whole).
func TestGSOTCP(t *testing.T) {
	r := newOffloadRig(t)
	payload := pattern(1<<20, 1448)
	for _, tc := range []struct {
		name string
		dev  *Device
		ns   *netnstest.NS
	}{{"segmented", r.devB, r.nsB}, {"whole", r.devC, r.nsC}} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s,ipv6=%v", tc.name, v6), func(t *testing.T) {
				peer := peerV4
				if v6 {
					peer = peerV6
				}
				streamThroughRelay(t, r.cache, r.devA, tc.dev, r.nsA, tc.ns, peer, payload, 10*time.Second)
			})
		}
	}
	sa, sb, sc := r.devA.Stats(), r.devB.Stats(), r.devC.Stats()
	t.Logf("A: GSO in %d; B: %d segmented into %d; C: GSO out %d", sa.GSOIn, sb.Segmented, sb.Segments, sc.GSOOut)
	if sa.GSOIn == 0 || sb.Segmented == 0 || sc.GSOOut == 0 {
		t.Error("no TSO packet was received, segmented or passed whole")
	}
}

// streamThroughRelay sends payload over TCP from nsFrom to a listener on
// peer in nsTo while relay moves packets between the devices from (in
// nsFrom) and to (in nsTo), and checks that it arrives intact within the
// timeout.
func streamThroughRelay(t *testing.T, c *buffer.Cache, from, to *Device, nsFrom, nsTo *netnstest.NS, peer netip.Addr, payload []byte, timeout time.Duration) {
	t.Helper()
	var ln net.Listener
	if err := nsTo.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(peer, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stop := make(chan struct{})
	relayErr := make(chan error, 1)
	go func() { relayErr <- relay(c, from, to, stop) }()
	defer func() {
		close(stop)
		if err := <-relayErr; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
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
		got, _ := io.ReadAll(conn)
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
	if got := <-received; !bytes.Equal(got, payload) {
		t.Errorf("received %d bytes, want the %d sent intact", len(got), len(payload))
	}
}
