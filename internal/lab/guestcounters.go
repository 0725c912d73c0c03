package lab

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"softnet.dev/internal/linkstats"
	"softnet.dev/internal/netns"
)

// udpStats are a guest's UDP counters, IPv4 and IPv6 together.
type udpStats struct {
	// rcvbufErrors are the datagrams dropped because the receiving
	// socket's buffer was full.
	rcvbufErrors uint64
	// reached are the datagrams that reached the UDP layer: delivered to
	// a socket (InDatagrams) or dropped there (InErrors, which include
	// RcvbufErrors). A GSO packet counts as the datagrams it carries.
	reached uint64
}

// readUDPStats reads the guest's UDP counters. They are the namespace's,
// read from /proc/thread-self/net on a thread switched into it.
func readUDPStats(ns string) (udpStats, error) {
	var v4, v6 []byte
	err := netns.Do(ns, func() (err error) {
		if v4, err = os.ReadFile("/proc/thread-self/net/snmp"); err != nil {
			return err
		}
		v6, err = os.ReadFile("/proc/thread-self/net/snmp6")
		return err
	})
	if err != nil {
		return udpStats{}, err
	}
	var s udpStats
	for _, c := range []struct {
		v6   bool
		name string
		into *uint64
	}{
		{false, "RcvbufErrors", &s.rcvbufErrors},
		{false, "InDatagrams", &s.reached},
		{false, "InErrors", &s.reached},
		{true, "Udp6RcvbufErrors", &s.rcvbufErrors},
		{true, "Udp6InDatagrams", &s.reached},
		{true, "Udp6InErrors", &s.reached},
	} {
		var n uint64
		var err error
		if c.v6 {
			n, err = parseSNMP6(v6, c.name)
		} else {
			n, err = parseSNMP(v4, "Udp", c.name)
		}
		if err != nil {
			return udpStats{}, err
		}
		*c.into += n
	}
	return s, nil
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
// the receiving sockets had no room for. The devices' counters are read
// as the switch reports them (package linkstats, the numbers of
// tun.Device.KernelStats), on veth and TUN/TAP guests alike: on the
// guest's side, RX is what the datapath delivered to the guest and TX
// dropped what the guest sent that the datapath did not take in time.
type guestCounters struct {
	a, b *linkstats.Reader
	bNS  string
}

func openGuestCounters(p *guestPair) (*guestCounters, error) {
	a, err := linkstats.Open(p.a.ns, p.a.dev)
	if err != nil {
		return nil, err
	}
	b, err := linkstats.Open(p.b.ns, p.b.dev)
	if err != nil {
		a.Close()
		return nil, err
	}
	return &guestCounters{a: a, b: b, bNS: p.b.ns}, nil
}

func (g *guestCounters) close() {
	g.a.Close()
	g.b.Close()
}

// guestSample is one reading of guestCounters; ok is false if any read
// failed.
type guestSample struct {
	rxB, txDroppedA, rcvbufB uint64
	reachedB                 uint64 // datagrams that reached b's UDP layer
	ok                       bool
}

func (g *guestCounters) sample() guestSample {
	sa, errA := g.a.Read()
	sb, errB := g.b.Read()
	udp, errR := readUDPStats(g.bNS)
	if errA != nil || errB != nil || errR != nil {
		return guestSample{}
	}
	return guestSample{rxB: sb.RxPackets, txDroppedA: sa.TxDropped, rcvbufB: udp.rcvbufErrors, reachedB: udp.reached, ok: true}
}
