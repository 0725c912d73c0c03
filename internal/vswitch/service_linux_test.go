package vswitch

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// A guest sends UDP to the echo service's address through its TUN port
// and gets every datagram back; another guest's datagrams to the sink are
// counted. Every lent buffer comes home (the leak check in stop, and the
// endpoint counters).
func TestSwitchEchoService(t *testing.T) {
	gs := newGuests(t, 2)
	echo, err := ParseService("udp-echo:198.18.1.254:7")
	if err != nil {
		t.Fatal(err)
	}
	echo6, err := ParseService("udp-echo:[2001:db8:2::fe]:7")
	if err != nil {
		t.Fatal(err)
	}
	sink, err := ParseService("udp-sink:198.18.2.254:9")
	if err != nil {
		t.Fatal(err)
	}
	sw, stop := startSwitchServices(t, gs, 2, []ServiceSpec{echo, echo6, sink}, "queues=2", "queues=2")
	const n = 200
	defer func() {
		if t.Failed() {
			rep := stop()
			t.Logf("ports %+v\nservices %+v\ndrops %v", rep.Ports, rep.Services, rep.Drops)
		}
	}()
	echoFrom(t, gs[0], "198.18.1.254:7", n)
	echoFrom(t, gs[1], "[2001:db8:2::fe]:7", n)
	if err := gs[1].ns.Do(func() error {
		c, err := net.Dial("udp", "198.18.2.254:9")
		if err != nil {
			return err
		}
		defer c.Close()
		for i := range n {
			if _, err := c.Write([]byte(fmt.Sprint("sink ", i))); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The sink's datagrams are not answered: wait until it has counted
	// them all.
	for deadline := time.Now().Add(10 * time.Second); sw.svcs[2].stats().Packets < n; {
		if time.Now().After(deadline) {
			t.Fatalf("sink counted %d of %d datagrams", sw.svcs[2].stats().Packets, n)
		}
		time.Sleep(time.Millisecond)
	}
	rep := stop()
	if len(rep.Services) != 3 {
		t.Fatalf("services %+v", rep.Services)
	}
	for _, s := range rep.Services {
		e := s.Endpoint
		if s.Packets < n || e.Lent != e.Refilled+e.Reclaimed || e.Rejected != 0 || e.BadReleases != 0 {
			t.Errorf("%s: %+v", s.Service, s)
		}
	}
	if rep.Services[0].Echoed < n {
		t.Errorf("echoed %d of %d", rep.Services[0].Echoed, n)
	}
}

// echoFrom sends n datagrams of growing size to an echo service and
// checks that each comes back intact.
func echoFrom(t *testing.T, g *guest, addr string, n int) {
	t.Helper()
	if err := g.ns.Do(func() error {
		c, err := net.Dial("udp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 2048)
		for i := range n {
			msg := make([]byte, 1+i*7%1400)
			for j := range msg {
				msg[j] = byte(i + j)
			}
			if _, err := c.Write(msg); err != nil {
				return err
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			k, err := c.Read(buf)
			if err != nil {
				return fmt.Errorf("datagram %d: %w", i, err)
			}
			if string(buf[:k]) != string(msg) {
				return fmt.Errorf("datagram %d: echo of %d bytes differs (%d back)", i, len(msg), k)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
