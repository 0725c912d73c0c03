package tun_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"softnet.dev/internal/netnstest"
)

// TestExampleBridge runs the Example's bridge between two namespaces and
// sends a datagram each way through it.
func TestExampleBridge(t *testing.T) {
	nsA, nsB := netnstest.New(t), netnstest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bridge(ctx, nsA.Name, nsB.Name) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { stop() })

	// The bridge opens B's device last.
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, err := nsB.Exec("ip", "link", "show", "sn0")
		if err == nil {
			break
		}
		if !strings.Contains(out, "does not exist") || time.Now().After(deadline) {
			t.Fatalf("device sn0 in %s: %v: %s", nsB.Name, err, out)
		}
		time.Sleep(5 * time.Millisecond)
	}
	a, b := netip.MustParsePrefix("198.18.0.1/24"), netip.MustParsePrefix("198.18.0.2/24")
	nsA.AddAddr(t, "sn0", a)
	nsB.AddAddr(t, "sn0", b)

	for _, dir := range []struct {
		from, to *netnstest.NS
		dst      netip.Addr
	}{{nsA, nsB, b.Addr()}, {nsB, nsA, a.Addr()}} {
		var recv, send *net.UDPConn
		if err := dir.to.Do(func() (err error) {
			recv, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(dir.dst, 0)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer recv.Close()
		if err := dir.from.Do(func() (err error) {
			send, err = net.DialUDP("udp", nil, recv.LocalAddr().(*net.UDPAddr))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer send.Close()
		if _, err := send.Write([]byte("across the bridge")); err != nil {
			t.Fatal(err)
		}
		recv.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 100)
		n, err := recv.Read(buf)
		if err != nil || string(buf[:n]) != "across the bridge" {
			t.Fatalf("to %v: read %q, %v", dir.dst, buf[:n], err)
		}
	}
	if err := stop(); err != nil {
		t.Errorf("bridge: %v", err)
	}
}
