package lab

import (
	"context"
	"errors"
	"math"
	"net"
	"net/netip"
	"testing"
	"time"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T, network string) netip.AddrPort {
	t.Helper()
	switch network {
	case "udp":
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).AddrPort()
	default:
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).AddrPort()
	}
}

// The built-in generator over loopback, in the test's own namespace: no
// root needed.
func TestBuiltinUDP(t *testing.T) {
	f, err := startUDP("", "", freePort(t, "udp"), newTransfer(UDP, 300*time.Millisecond, false))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.threads()) == 0 {
		time.Sleep(10 * time.Millisecond) // the goroutines record their threads as they start
	}
	res, err := f.wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.packets == 0 || res.bitsPerSecond <= 0 || !res.hasLoss || res.lossPct < 0 || res.lossPct > 100 {
		t.Fatalf("result %+v", res)
	}
	if res.seconds < 0.29 || res.seconds > 2 {
		t.Errorf("sent for %v s, want about 0.3", res.seconds)
	}
	if n := len(f.threads()); n != 2 {
		t.Errorf("%d generator threads recorded, want 2", n)
	}
}

func TestBuiltinTCP(t *testing.T) {
	f, err := startTCP("", "", freePort(t, "tcp"), 300*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.bitsPerSecond <= 0 || !res.hasRetransmits || res.retransmits < 0 || res.hasLoss {
		t.Fatalf("result %+v", res)
	}
}

// A cancelled transfer stops at once and reports the cancellation.
func TestBuiltinCancel(t *testing.T) {
	for _, c := range []struct {
		network string
		start   func(string, string, netip.AddrPort, time.Duration) (flow, error)
	}{{"udp", func(a, b string, dst netip.AddrPort, d time.Duration) (flow, error) {
		return startUDP(a, b, dst, newTransfer(UDP, d, false))
	}}, {"tcp", func(a, b string, dst netip.AddrPort, d time.Duration) (flow, error) {
		return startTCP(a, b, dst, d, 1)
	}}} {
		f, err := c.start("", "", freePort(t, c.network), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		begin := time.Now()
		_, err = f.wait(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(begin) > 5*time.Second {
			t.Fatalf("%s: wait after cancel: %v after %v", c.network, err, time.Since(begin))
		}
	}
}

// The UDP_SEGMENT sender over loopback: each send is split into
// datagrams of the segment size, every one carrying its own sequence
// number, and the receiver counts them one by one.
func TestBuiltinUDPSegment(t *testing.T) {
	tr := newTransfer(UDPGSO, 300*time.Millisecond, false)
	f, err := startUDP("", "", freePort(t, "udp"), tr)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	segs := uint64(gsoSegments(tr.payload))
	if res.packets < segs || !res.hasLoss || res.lossPct < 0 || res.lossPct > 100 {
		t.Fatalf("result %+v", res)
	}
	// Every datagram received is one segment (no 64 KiB datagrams), and
	// the sender counted whole sends.
	if got := res.bitsPerSecond * res.seconds / 8; math.Abs(got-float64(res.packets*uint64(tr.payload))) > 1 {
		t.Errorf("%.0f bytes received in %d datagrams, want %d each", got, res.packets, tr.payload)
	}
	if total := res.packets + res.lost; total%segs != 0 {
		t.Errorf("%d datagrams sent, not a multiple of %d per send", total, segs)
	}
}

// A paced sender keeps to its rate.
func TestBuiltinUDPRate(t *testing.T) {
	tr := newTransfer(PDR, 500*time.Millisecond, false)
	tr.rate = 50e6
	f, err := startUDP("", "", freePort(t, "udp"), tr)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sent := float64(res.packets+res.lost) * float64(tr.payload) * 8 / res.seconds
	if sent < 0.8*tr.rate || sent > 1.2*tr.rate {
		t.Errorf("sent %.1f Mbit/s, asked for %.1f", sent/1e6, tr.rate/1e6)
	}
}
