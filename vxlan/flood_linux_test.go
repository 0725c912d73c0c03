package vxlan

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/internal/netnstest"
)

// A port with 300 remotes, as an overlay of a cluster of 300 nodes has:
// a burst of two broadcast frames reaches every remote once each (600
// datagrams, more than one flush sends), every buffer comes home (the
// pool's leak check), and datagrams from any of the remotes are learned
// against the right one. The remotes are given out of order, so that a
// lookup by sorted address must map back to the configured index.
func TestPortFloodsManyRemotes(t *testing.T) {
	const remotes = 300
	a := netip.MustParseAddr("198.18.0.1")
	ns := underlay(t, a)
	// Every address of 198.18.4.0/23 is local: one socket bound to the
	// wildcard address receives what is sent to any remote.
	if out, err := ns.Exec("ip", "route", "add", "local", "198.18.4.0/23", "dev", "lo"); err != nil {
		t.Fatal(err, out)
	}
	rs := make([]netip.Addr, remotes)
	r := netip.MustParseAddr("198.18.4.1")
	for i := range rs {
		rs[i], r = r, r.Next()
	}
	rand.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
	const remotePort = 4790
	rx := openFloodReceiver(t, ns, remotePort)
	_, c := newPoolOf(t, buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 1024}}})
	p := openPort(t, Config{Name: "a", VNI: 42, Local: netip.AddrPortFrom(a, DefaultPort), Port: remotePort, Remotes: rs, NetNS: ns.Name})

	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	frames := [][]byte{frame(bcast, macA, 1000, 53, 100), frame(bcast, macA, 1001, 53, 200)}
	if n := send(t, c, p, frames...); n != len(frames) {
		t.Fatalf("sent %d of %d frames", n, len(frames))
	}
	if s := p.Stats(); s.TxPackets != remotes*uint64(len(frames)) || s.Flooded != uint64(len(frames)) || s.TxDrops.Total() != 0 {
		t.Fatalf("stats %+v", s)
	}
	got := rx.collect(t, remotes*len(frames))
	for _, dst := range rs {
		for i, f := range frames {
			if n := got[floodKey{dst, len(f)}]; n != 1 {
				t.Fatalf("remote %v got frame %d %d times", dst, i, n)
			}
		}
	}
	if len(got) != remotes*len(frames) {
		t.Fatalf("%d distinct (remote, frame) pairs, want %d", len(got), remotes*len(frames))
	}

	// Frames from three of the remotes are learned against each.
	for k, i := range []int{0, remotes / 2, remotes - 1} {
		src := [6]byte{0x02, 0, 0, 0, 0x10, byte(k)}
		sendFrom(t, ns, rs[i], a, datagram(0x08, 42, 0, frame(macA, src, 1, 2, 10)))
	}
	receive(t, c, p, 3)
	table := map[[6]byte]string{}
	for _, e := range p.Table() {
		table[e.MAC] = e.Remote
	}
	for k, i := range []int{0, remotes / 2, remotes - 1} {
		if src := [6]byte{0x02, 0, 0, 0, 0x10, byte(k)}; table[src] != rs[i].String() {
			t.Errorf("station %x learned behind %q, want %v", src, table[src], rs[i])
		}
	}
}

// A port that SetRemotes grows from 10 remotes to 300, out of order: a
// flood reaches each of the new set once (more than one flush), a
// station learned behind a remote that stays is still behind it, and
// datagrams from a remote of the new set only are taken and learned
// against it (the queues look sources up in the new set's order).
func TestPortSetRemotesFloodsManyRemotes(t *testing.T) {
	const remotes = 300
	a := netip.MustParseAddr("198.18.0.1")
	ns := underlay(t, a)
	if out, err := ns.Exec("ip", "route", "add", "local", "198.18.4.0/23", "dev", "lo"); err != nil {
		t.Fatal(err, out)
	}
	rs := make([]netip.Addr, remotes)
	r := netip.MustParseAddr("198.18.4.1")
	for i := range rs {
		rs[i], r = r, r.Next()
	}
	const remotePort = 4790
	rx := openFloodReceiver(t, ns, remotePort)
	_, c := newPoolOf(t, buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 1024}}})
	p := openPort(t, Config{Name: "a", VNI: 42, Local: netip.AddrPortFrom(a, DefaultPort), Port: remotePort, Remotes: rs[:10], NetNS: ns.Name})

	kept, added := [6]byte{0x02, 0, 0, 0, 0x10, 1}, [6]byte{0x02, 0, 0, 0, 0x10, 2}
	sendFrom(t, ns, rs[5], a, datagram(0x08, 42, 0, frame(macA, kept, 1, 2, 10)))
	receive(t, c, p, 1)
	rand.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
	if err := p.SetRemotes(rs, nil); err != nil {
		t.Fatal(err)
	}

	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	if n := send(t, c, p, frame(bcast, macA, 1000, 53, 100)); n != 1 {
		t.Fatalf("sent %d frames", n)
	}
	got := rx.collect(t, remotes)
	for _, dst := range rs {
		if n := got[floodKey{dst, len(frame(bcast, macA, 1000, 53, 100))}]; n != 1 {
			t.Fatalf("remote %v got the flood %d times", dst, n)
		}
	}
	from := netip.MustParseAddr("198.18.5.40") // a remote of the new set only
	sendFrom(t, ns, from, a, datagram(0x08, 42, 0, frame(macA, added, 1, 2, 10)))
	receive(t, c, p, 1)
	table := map[[6]byte]string{}
	for _, e := range p.Table() {
		table[e.MAC] = e.Remote
	}
	if table[kept] != "198.18.4.6" || table[added] != from.String() {
		t.Errorf("table %v: want %x behind 198.18.4.6, %x behind %v", table, kept, added, from)
	}
	if s := p.Stats(); s.RxDrops.Total() != 0 || s.TxDrops.Total() != 0 {
		t.Errorf("drops: %+v", s)
	}
}

// floodReceiver is a UDP socket that receives datagrams to any local
// address and tells them apart by destination.
type floodReceiver struct{ fd int }

// floodKey is a datagram received: its destination, and its inner
// frame's length, which tells the frames of a test apart.
type floodKey struct {
	dst netip.Addr
	len int
}

func openFloodReceiver(t *testing.T, ns *netnstest.NS, port uint16) *floodReceiver {
	t.Helper()
	rx := &floodReceiver{fd: -1}
	if err := ns.Do(func() (err error) {
		rx.fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err := unix.SetsockoptInt(rx.fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1); err != nil {
			return err
		}
		// Loopback delivers during the sender's sendmmsg: the whole flood
		// waits in the receive buffer.
		if err := unix.SetsockoptInt(rx.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
			return err
		}
		return unix.Bind(rx.fd, &unix.SockaddrInet4{Port: int(port)})
	}); err != nil {
		if rx.fd >= 0 {
			unix.Close(rx.fd)
		}
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(rx.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(rx.fd) })
	return rx
}

// collect receives want datagrams, or fails after testTimeout, and
// counts them by destination and inner length.
func (rx *floodReceiver) collect(t *testing.T, want int) map[floodKey]int {
	t.Helper()
	got := map[floodKey]int{}
	buf := make([]byte, 65536)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofInet4Pktinfo))
	for n, deadline := 0, time.Now().Add(testTimeout); n < want; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d datagrams arrived", n, want)
		}
		size, oobn, _, _, err := unix.Recvmsg(rx.fd, buf, oob, 0)
		if err != nil {
			continue // the receive timeout: look at the deadline
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 || len(msgs[0].Data) < unix.SizeofInet4Pktinfo {
			t.Fatalf("no IP_PKTINFO with a datagram: %v", err)
		}
		info := (*unix.Inet4Pktinfo)(unsafe.Pointer(&msgs[0].Data[0]))
		if size < HeaderLen || binary.BigEndian.Uint32(buf[4:8])>>8 != 42 || !bytes.Equal(buf[HeaderLen:HeaderLen+6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) {
			t.Fatalf("datagram of %d bytes is not a flooded frame of VNI 42", size)
		}
		got[floodKey{netip.AddrFrom4(info.Addr), size - HeaderLen}]++
		n++
	}
	return got
}
