package afxdp

import (
	"testing"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/port"
)

// Receiving, transmitting and flushing allocate nothing: the steady path
// of a worker forwarding from one port to another, driven here by hand
// with real frames from a guest.
func TestNoAllocations(t *testing.T) {
	r := newRig(t, 2, 0)
	pool := newPool(t)
	a := r.open(pool, r.guests[0], Config{})
	b := r.open(pool, r.guests[1], Config{})
	c, err := pool.NewCache(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.CloseInto(c)
		b.CloseInto(c)
		c.Close()
	})
	g1, g2 := r.guests[0], r.guests[1]
	// No ARP: the guest knows its peer's MAC.
	r.run(g1.ns, "ip", "neigh", "replace", g2.v4.Addr().String(), "lladdr", "02:00:00:00:00:02", "dev", "eth0", "nud", "permanent")
	var fd int
	if err := g1.ns.Do(func() error {
		var err error
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		return unix.Connect(fd, &unix.SockaddrInet4{Addr: g2.v4.Addr().As4(), Port: 9})
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	rx, tx := a.RxQueue(0), b.TxQueue(0)
	flush := tx.(port.Flusher)
	rx.Receive(c, nil) // lends the fill ring its first frames
	bufs := make([]*buffer.Buf, 64)
	payload := make([]byte, 64)
	const burst = 16
	round := func() {
		for range burst {
			if _, err := unix.Write(fd, payload); err != nil {
				t.Fatal(err)
			}
		}
		got := 0
		for try := 0; got < burst && try < 1_000_000; try++ {
			n, err := rx.Receive(c, bufs[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		if got != burst {
			t.Fatalf("received %d of %d", got, burst)
		}
		if n, err := tx.Transmit(c, bufs[:got]); err != nil || n != got {
			t.Fatalf("transmit: %d of %d, %v", n, got, err)
		}
		if _, err := flush.Flush(c, false); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		round() // the fill target settles, the caches warm up
	}
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Fatalf("%v allocations per round of %d packets", n, burst)
	}
	s := b.Stats()
	if s.TxCopied != 0 || s.TxPackets == 0 {
		t.Fatalf("transmitted %d, copied %d: frames of the UMEM's class leave from their own frame", s.TxPackets, s.TxCopied)
	}
}
