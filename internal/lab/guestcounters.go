package lab

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"softnet.dev/internal/netns"
)

// devCounter reads a device's kernel counters in a guest's namespace,
// through a netlink socket opened there once.
type devCounter struct {
	h   *netlink.Handle
	dev string
}

func openDevCounter(g *guest) (*devCounter, error) {
	nsh, err := vnetns.GetFromName(g.ns)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", g.ns, err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", g.ns, err)
	}
	return &devCounter{h: h, dev: g.dev}, nil
}

// stats returns the device's counters. On the guest's side of a veth or
// a TUN/TAP device, RX is what the datapath delivered to the guest and TX
// dropped what the guest sent that the datapath did not take in time.
func (c *devCounter) stats() (*netlink.LinkStatistics, error) {
	l, err := c.h.LinkByName(c.dev)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.dev, err)
	}
	st := l.Attrs().Statistics
	if st == nil {
		return nil, fmt.Errorf("%s: no statistics", c.dev)
	}
	return st, nil
}

func (c *devCounter) close() { c.h.Close() }

// udpRcvbufErrors returns the UDP datagrams (IPv4 and IPv6) the guest's
// kernel dropped because the receiving socket's buffer was full. The
// counters are the namespace's, read from /proc/thread-self/net on a
// thread switched into it.
func udpRcvbufErrors(ns string) (uint64, error) {
	var v4, v6 []byte
	err := netns.Do(ns, func() (err error) {
		if v4, err = os.ReadFile("/proc/thread-self/net/snmp"); err != nil {
			return err
		}
		v6, err = os.ReadFile("/proc/thread-self/net/snmp6")
		return err
	})
	if err != nil {
		return 0, err
	}
	a, err := parseSNMP(v4, "Udp", "RcvbufErrors")
	if err != nil {
		return 0, err
	}
	b, err := parseSNMP6(v6, "Udp6RcvbufErrors")
	if err != nil {
		return 0, err
	}
	return a + b, nil
}

// parseSNMP returns one counter of /proc/net/snmp, where each protocol
// has a line of names followed by a line of values, both starting with
// "Proto:".
func parseSNMP(data []byte, proto, name string) (uint64, error) {
	prefix := proto + ":"
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != prefix {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == name && i < len(f) {
				return strconv.ParseUint(f[i], 10, 64)
			}
		}
		return 0, fmt.Errorf("snmp: no %s %s", proto, name)
	}
	return 0, fmt.Errorf("snmp: no %s values", proto)
}

// parseSNMP6 returns one counter of /proc/net/snmp6: "Name value" lines.
func parseSNMP6(data []byte, name string) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			return strconv.ParseUint(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("snmp6: no %s", name)
}

// guestCounters are the guests' own view of a transfer: what reached the
// receiving device, what the sending device could not hand on, and what
// the receiving sockets had no room for.
type guestCounters struct {
	a, b *devCounter
	bNS  string
}

func openGuestCounters(p *guestPair) (*guestCounters, error) {
	a, err := openDevCounter(p.a)
	if err != nil {
		return nil, err
	}
	b, err := openDevCounter(p.b)
	if err != nil {
		a.close()
		return nil, err
	}
	return &guestCounters{a: a, b: b, bNS: p.b.ns}, nil
}

func (g *guestCounters) close() {
	g.a.close()
	g.b.close()
}

// guestSample is one reading of guestCounters; ok is false if any read
// failed.
type guestSample struct {
	rxB, txDroppedA, rcvbufB uint64
	ok                       bool
}

func (g *guestCounters) sample() guestSample {
	sa, errA := g.a.stats()
	sb, errB := g.b.stats()
	rcv, errR := udpRcvbufErrors(g.bNS)
	if errA != nil || errB != nil || errR != nil {
		return guestSample{}
	}
	return guestSample{rxB: sb.RxPackets, txDroppedA: sa.TxDropped, rcvbufB: rcv, ok: true}
}
