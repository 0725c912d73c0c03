package tun

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"softnet.dev/buffer"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
	"softnet.dev/port"
)

// testIO is the I/O path of the devices the tests open. TestMain runs
// every test on each path in turn.
var testIO IO

func TestMain(m *testing.M) {
	for _, mode := range []IO{IOSyscall, IOUring} {
		testIO = mode
		fmt.Printf("=== tun tests with io=%s\n", mode)
		if code := m.Run(); code != 0 {
			fmt.Printf("--- FAIL: tun tests with io=%s\n", mode)
			os.Exit(code)
		}
		if err := goleak.Find(); err != nil {
			fmt.Printf("--- FAIL: tun tests with io=%s: %v\n", mode, err)
			os.Exit(1)
		}
	}
}

// Addresses of the test hosts: the tun side is .1 / ::1 in its namespace,
// the softnet side (the "peer" the kernel routes to) .2 / ::2.
var (
	hostV4 = netip.MustParseAddr("198.18.0.1")
	peerV4 = netip.MustParseAddr("198.18.0.2")
	hostV6 = netip.MustParseAddr("2001:db8::1")
	peerV6 = netip.MustParseAddr("2001:db8::2")
)

// testTimeout bounds every wait for the kernel.
const testTimeout = 15 * time.Second

// newPool returns a pool with its leak check registered as a cleanup: it
// runs after every device of the test is closed (cleanups run last
// registered first).
func newPool(t *testing.T, cfg buffer.Config) (*buffer.Pool, *buffer.Cache) {
	t.Helper()
	pool, err := buffer.NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pool.Close(); err != nil {
			t.Errorf("pool leak check: %v", err)
		}
	})
	c, err := pool.NewCache(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pool, c
}

var devSeq atomic.Int32

// devName returns a device name unique within the test binary; names
// only need to be unique per namespace, and every test has its own.
func devName(prefix string) string {
	return fmt.Sprintf("%s%d", prefix, devSeq.Add(1))
}

// openDev opens a device and registers its Close as a cleanup.
func openDev(t *testing.T, cfg Config) *Device {
	t.Helper()
	if cfg.IO == IOAuto {
		cfg.IO = testIO
	}
	d, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close %s: %v", cfg.Name, err)
		}
	})
	return d
}

// exec runs a command in ns and fails the test if it fails.
func exec(t *testing.T, ns *netnstest.NS, args ...string) string {
	t.Helper()
	out, err := ns.Exec(args...)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return out
}

// addAddrs gives the device the host addresses (see netnstest.AddAddr).
func addAddrs(t *testing.T, ns *netnstest.NS, dev string, v4, v6 netip.Addr) {
	t.Helper()
	ns.AddAddr(t, dev, netip.PrefixFrom(v4, 24))
	if v6.IsValid() {
		ns.AddAddr(t, dev, netip.PrefixFrom(v6, 64))
	}
}

// linkShow returns `ip -d link show dev` in ns, and whether it exists.
func linkShow(t *testing.T, ns *netnstest.NS, dev string) (string, bool) {
	t.Helper()
	out, err := ns.Exec("ip", "-d", "link", "show", "dev", dev)
	if err != nil {
		if strings.Contains(out, "does not exist") {
			return out, false
		}
		t.Fatalf("%v: %s", err, out)
	}
	return out, true
}

// listenUDP opens a UDP socket bound inside ns, closed at cleanup.
func listenUDP(t *testing.T, ns *netnstest.NS, addr netip.Addr) *net.UDPConn {
	t.Helper()
	var conn *net.UDPConn
	err := ns.Do(func() (err error) {
		conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// dialUDP opens a UDP socket inside ns connected to dst, closed at
// cleanup.
func dialUDP(t *testing.T, ns *netnstest.NS, dst netip.AddrPort) *net.UDPConn {
	t.Helper()
	var conn *net.UDPConn
	err := ns.Do(func() (err error) {
		conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// readUDP reads one datagram with a deadline.
func readUDP(t *testing.T, conn *net.UDPConn, buf []byte) (int, error) {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	n, _, err := conn.ReadFromUDPAddrPort(buf)
	return n, err
}

// receive polls q until match has taken want packets or testTimeout
// passes. Packets match rejects are freed; those it takes are returned
// and the caller frees them.
func receive(t *testing.T, c *buffer.Cache, q port.RxQueue, want int, match func(*buffer.Buf) bool) []*buffer.Buf {
	t.Helper()
	var got []*buffer.Buf
	bufs := make([]*buffer.Buf, 16)
	deadline := time.Now().Add(testTimeout)
	for len(got) < want && time.Now().Before(deadline) {
		n, err := q.Receive(c, bufs)
		if err != nil {
			c.ConsumeBulk(bufs[:n])
			c.ConsumeBulk(got)
			t.Fatalf("Receive: %v", err)
		}
		for _, b := range bufs[:n] {
			if len(got) < want && match(b) {
				got = append(got, b)
			} else {
				c.Consume(b)
			}
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if len(got) < want {
		c.ConsumeBulk(got)
		t.Fatalf("received %d matching packets in %v, want %d", len(got), testTimeout, want)
	}
	return got
}

// parse parses a received packet and fails the test if it is malformed.
func parse(t *testing.T, b *buffer.Buf, layer packet.Layer) packet.Headers {
	t.Helper()
	var h packet.Headers
	if ok, reason := packet.Parse(b.Bytes(), layer, &h); !ok {
		t.Errorf("packet.Parse: %v", reason)
	}
	return h
}

// isUDPTo matches UDP packets to dst.
func isUDPTo(layer packet.Layer, dst netip.AddrPort) func(*buffer.Buf) bool {
	return func(b *buffer.Buf) bool {
		var h packet.Headers
		ok, _ := packet.Parse(b.Bytes(), layer, &h)
		return ok && h.IPProto == packet.ProtoUDP && h.DstIP == dst.Addr() && h.DstPort == dst.Port()
	}
}

// putUDP fills a fresh buffer with a UDP packet.
func putUDP(t *testing.T, c *buffer.Cache, src, dst netip.AddrPort, payload []byte) *buffer.Buf {
	t.Helper()
	b, err := c.Get(buffer.ClassMTU)
	if err != nil {
		t.Fatal(err)
	}
	n := packet.PutUDP(b.Frame()[b.Headroom():], src, dst, payload)
	b.SetData(b.Headroom(), n)
	return b
}

// icmpEcho returns an ICMP (or ICMPv6) echo request body: the checksum of
// ICMPv6 is the kernel's to fill in on a raw socket.
func icmpEcho(v6 bool, id, seq uint16, data []byte) []byte {
	msg := make([]byte, 8+len(data))
	msg[0] = 8
	if v6 {
		msg[0] = 128
	}
	binary.BigEndian.PutUint16(msg[4:], id)
	binary.BigEndian.PutUint16(msg[6:], seq)
	copy(msg[8:], data)
	if !v6 {
		binary.BigEndian.PutUint16(msg[2:], packet.Checksum(msg, 0))
	}
	return msg
}
