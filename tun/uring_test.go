package tun

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/attach"
	"softnet.dev/internal/netnstest"
	"softnet.dev/internal/uring"
	"softnet.dev/packet"
)

// requireUring skips the io_uring-only tests on the system-call run of
// the suite, and on a kernel that cannot run io_uring queues.
func requireUring(t *testing.T) {
	t.Helper()
	if testIO != IOUring {
		t.Skip("io_uring-only test: runs with the io=uring suite")
	}
	if err := uringCheck(); err != nil {
		t.Skipf("kernel cannot run io_uring queues: %v", err)
	}
}

// sendUDP sends n datagrams from ns to dst.
func sendUDP(t *testing.T, ns *netnstest.NS, dst netip.AddrPort, n int) {
	t.Helper()
	conn := dialUDP(t, ns, dst)
	for i := range n {
		if _, err := conn.Write([]byte(fmt.Sprintf("datagram %d", i))); err != nil {
			t.Fatal(err)
		}
	}
}

// With a buffer ring of two, a burst of datagrams empties it: the
// multishot read ends with ENOBUFS (counted as NOMEM), is re-armed once
// buffers come back, and every datagram arrives.
func TestUringRingExhaustedRearms(t *testing.T) {
	requireUring(t)
	_, c := newPool(t, buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 64}, {Room: 65536, Count: 8}}})
	ns := netnstest.New(t)
	name := devName("snu")
	d := openDev(t, Config{Name: name, NetNS: ns.Name, Offload: true})
	addAddrs(t, ns, name, hostV4, netip.Addr{})
	dst := netip.AddrPortFrom(peerV4, 4200)
	const sent = 24
	sendUDP(t, ns, dst, sent)
	match := isUDPTo(packet.L3, dst)
	bufs := make([]*buffer.Buf, 16)
	got := 0
	for deadline := time.Now().Add(testTimeout); got < sent && time.Now().Before(deadline); {
		n, err := d.RxQueue(0).Receive(c, bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bufs[:n] {
			if match(b) {
				got++
			}
		}
		c.ConsumeBulk(bufs[:n]) // at once: the pool holds fewer buffers than datagrams
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if got != sent {
		t.Fatalf("received %d of %d datagrams", got, sent)
	}
	if s := d.Stats(); s.RxDrops[drop.NoMem] == 0 {
		t.Errorf("stats %+v: no NOMEM counted with %d datagrams for 2 buffers", s, sent)
	}
}

// Close with the read armed and packets read into lent buffers but not
// received cancels the read, drops those packets as QUEUE_PURGE and
// takes every buffer back: the pool's leak check (a cleanup) balances.
func TestUringCloseInFlight(t *testing.T) {
	requireUring(t)
	pool, c := newPool(t, buffer.Config{})
	ns := netnstest.New(t)
	name := devName("snu")
	d := openDev(t, Config{Name: name, NetNS: ns.Name, Offload: true})
	addAddrs(t, ns, name, hostV4, netip.Addr{})
	dst := netip.AddrPortFrom(peerV4, 4300)
	q := d.RxQueue(0)
	bufs := make([]*buffer.Buf, 16)
	n, err := q.Receive(c, bufs) // sets the ring up and arms the read
	if err != nil {
		t.Fatal(err)
	}
	got := bufs[:n]
	sendUDP(t, ns, dst, 4)
	// Let the kernel read them into lent buffers without Receive taking
	// them: Arm enters the ring, which runs the reads.
	deadline := time.Now().Add(testTimeout)
	for !q.Arm() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	q.Disarm()
	c.ConsumeBulk(got)
	c.Publish()
	if s := pool.Stats(); s.InUse == 0 {
		t.Fatal("no buffer lent to the kernel")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if s := d.Stats(); s.RxDrops[drop.QueuePurge] == 0 {
		t.Errorf("stats %+v: packets read but not received not purged", s)
	}
	c.Publish()
	if s := pool.Stats(); s.InUse != 0 {
		t.Fatalf("%d buffers in use after Close", s.InUse)
	}
}

// A worker attaches the queues on its locked thread: the rings are
// single-issuer (DEFER_TASKRUN), packets flow both ways, and Detach takes
// every buffer back on that thread.
func TestUringAttachDetach(t *testing.T) {
	requireUring(t)
	pool, c := newPool(t, buffer.Config{})
	ns := netnstest.New(t)
	name := devName("snu")
	d := openDev(t, Config{Name: name, NetNS: ns.Name, Offload: true, GRO: true})
	addAddrs(t, ns, name, hostV4, netip.Addr{})
	rq, tq := d.RxQueue(0), d.TxQueue(0)
	ra, ta := rq.(attach.Queue), tq.(attach.Queue)
	sock := listenUDP(t, ns, hostV4)
	to := sock.LocalAddr().(*net.UDPAddr).AddrPort()
	dst := netip.AddrPortFrom(peerV4, 4400)

	done := make(chan error, 1)
	go func() {
		var err error
		defer func() { done <- err }() // after Detach
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ra.Attach(c)
		ta.Attach(c)
		defer ta.Detach(c)
		defer ra.Detach(c)
		if !d.rx[0].m.ring.ring.SingleIssuer() || !d.tx[0].ur.single {
			err = errors.New("attached rings are not single-issuer")
			return
		}
		sendUDP(t, ns, dst, 3)
		got := receive(t, c, rq, 3, isUDPTo(packet.L3, dst))
		c.ConsumeBulk(got)
		out := []*buffer.Buf{
			putUDP(t, c, netip.AddrPortFrom(peerV4, 9), to, []byte("one")),
			putUDP(t, c, netip.AddrPortFrom(peerV4, 9), to, []byte("two")),
		}
		if n, terr := tq.Transmit(c, out); n != 2 || terr != nil {
			err = fmt.Errorf("Transmit = %d, %v", n, terr)
		}
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	for _, want := range []string{"one", "two"} {
		if n, err := readUDP(t, sock, buf); err != nil || string(buf[:n]) != want {
			t.Fatalf("read %q, %v; want %q", buf[:n], err, want)
		}
	}
	c.Publish()
	if s := pool.Stats(); s.InUse != 0 {
		t.Fatalf("%d buffers in use after Detach", s.InUse)
	}
}

// With io_uring refused (as io_uring_disabled or a seccomp policy would:
// internal/uring's TestDisabled checks that the sysctl is reported so),
// IOAuto falls back to system calls and says why, and IOUring refuses to
// open. The refusal is this process's own, so that tests running beside
// this one keep io_uring.
func TestUringRefusedFallsBack(t *testing.T) {
	requireUring(t)
	ns := netnstest.New(t)
	refusal := fmt.Errorf("%w: io_uring_setup: refused for the test", uring.ErrUnavailable)
	uringCheck = func() error { return refusal }
	defer func() { uringCheck = checkUring }()
	d, err := Open(Config{Name: devName("snu"), NetNS: ns.Name, IO: IOAuto})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := Open(Config{Name: devName("snu"), NetNS: ns.Name, IO: IOUring}); !errors.Is(err, uring.ErrUnavailable) {
		t.Errorf("Open with io=uring while refused: %v, want ErrUnavailable", err)
	}
	io, why := d.IO()
	if io != IOSyscall || !errors.Is(why, refusal) {
		t.Fatalf("IO() = %v, %v; want syscall and why", io, why)
	}
}

// The lending bookkeeping of an RX ring under random refills, takes of
// lent, unlent and out-of-range ids (as a corrupt completion would
// name) and frees: every id is lent or free, never both, and the pool
// counts exactly the lent buffers and those the test holds; Detach
// takes back every lent one.
func TestUringLendingBookkeeping(t *testing.T) {
	requireUring(t)
	pool, c := newPool(t, buffer.Config{})
	ns := netnstest.New(t)
	d := openDev(t, Config{Name: devName("snu"), NetNS: ns.Name, Offload: true})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rq := d.RxQueue(0).(attach.Queue)
	rq.Attach(c)
	q := &d.rx[0]
	if q.m == nil {
		t.Fatalf("no ring: %v", q.ringErr)
	}
	u := q.m.group
	n := len(u.lent)
	rng := rand.New(rand.NewPCG(5, 6))
	var held []*buffer.Buf
	check := func(op string) {
		t.Helper()
		lent := 0
		for _, b := range u.lent {
			if b != nil {
				lent++
			}
		}
		seen := map[uint16]bool{}
		for _, id := range u.free {
			if seen[id] || u.lent[id] != nil {
				t.Fatalf("after %s: id %d free twice or free and lent", op, id)
			}
			seen[id] = true
		}
		if len(u.free)+lent != n {
			t.Fatalf("after %s: %d free + %d lent ids of %d", op, len(u.free), lent, n)
		}
		c.Publish()
		if got := pool.Stats().InUse; got != lent+len(held) {
			t.Fatalf("after %s: pool counts %d in use, %d lent and %d held", op, got, lent, len(held))
		}
	}
	for i := range 3000 {
		switch k := rng.IntN(10); {
		case k < 2:
			u.refill(c)
			check(fmt.Sprint("refill ", i))
		case k < 8:
			id := uint16(rng.IntN(n + 4))
			if b := u.take(id); b != nil {
				held = append(held, b)
			}
			check(fmt.Sprint("take ", id))
		default:
			if len(held) > 0 {
				j := rng.IntN(len(held))
				c.Consume(held[j])
				held = append(held[:j], held[j+1:]...)
			}
			check("free")
		}
	}
	rq.Detach(c)
	c.ConsumeBulk(held)
	c.Publish()
	if s := pool.Stats(); s.InUse != 0 {
		t.Fatalf("%d buffers in use after Detach", s.InUse)
	}
}
