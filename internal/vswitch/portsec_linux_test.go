package vswitch

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
	"softnet.dev/program"
)

// inject sends packets out of dev inside g's namespace through an
// AF_PACKET socket: whole Ethernet frames on a TAP device, IP packets
// (IPv4 or IPv6 by their version) on a TUN device. That is how a guest
// with raw sockets forges what its stack would never send.
func inject(t *testing.T, g *guest, frames bool, pkts ...[]byte) {
	t.Helper()
	g.ns.Inject(t, g.dev, frames, pkts...)
}

func udpPacket(src, dst string) []byte {
	b := make([]byte, 256)
	return b[:packet.PutUDP(b, netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst), []byte("forged"))]
}

func hostPort(addr string, port int) string { return net.JoinHostPort(addr, fmt.Sprint(port)) }

// pingAll pings to with n echo requests 100 ms apart and fails unless
// every reply came back.
func pingAll(t *testing.T, from *guest, to string, n int) string {
	t.Helper()
	out, err := from.ns.ExecTimeout(time.Duration(n)*100*time.Millisecond+10*time.Second, "ping", "-c", fmt.Sprint(n), "-i", "0.1", "-W", "2", to)
	if err != nil || !strings.Contains(out, fmt.Sprintf("%d packets transmitted, %d received", n, n)) {
		t.Fatalf("ping %s from %s: %v\n%s", to, from.ns.Name, err, out)
	}
	return out
}

// A guest forging a neighbour's IPv4 and IPv6 source addresses: every
// forged packet is dropped as IP_RPFILTER on its port, nothing is
// learned, and the neighbour keeps its traffic.
func TestSwitchDropsSpoofedSources(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 3)
	attacker, victim, other := gs[0], gs[1], gs[2]
	sw, stop := startSwitchConfig(t, gs, Config{Workers: 1})
	ping(t, other, victim.v4)
	const forged = 20
	var pkts [][]byte
	for i := range forged {
		pkts = append(pkts,
			udpPacket(hostPort(victim.v4, 7000+i), hostPort(other.v4, 9)),
			udpPacket(hostPort(victim.v6, 7000+i), hostPort(other.v6, 9)))
	}
	inject(t, attacker, false, pkts...)
	ping(t, other, victim.v4)
	ping(t, other, victim.v6)
	if l := sw.Learning(); l.Hosts != 0 || l.Learned != 0 {
		t.Errorf("learned %+v from forged sources", l)
	}
	rep := stop()
	if d := rep.Ports[0].Drops[drop.IPRPFilter]; d < 2*forged {
		t.Errorf("%d of %d forged packets dropped as IP_RPFILTER on the attacker's port (drops %v)", d, 2*forged, rep.Ports[0].Drops)
	}
	if d := rep.Ports[2].Drops[drop.IPRPFilter] + rep.Ports[1].Drops[drop.IPRPFilter]; d != 0 {
		t.Errorf("%d honest packets dropped as IP_RPFILTER", d)
	}
}

// A router guest (allow=any) sending from random sources for a while:
// the learned table stays within its bound, the excess is counted, and
// the other guests keep forwarding.
func TestSwitchRandomSourceFlood(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 3)
	flooder, a, b := gs[0], gs[1], gs[2]
	sw, stop := startSwitchConfig(t, gs, Config{Workers: 1}, "allow=any")
	// Until the table is full (a few seconds; longer under the race
	// detector), at most 10 million packets or 60 s.
	const most, duration = 10_000_000, 60 * time.Second
	sent := 0
	if err := flooder.ns.Do(func() error {
		ifi, err := net.InterfaceByName(flooder.dev)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		to4 := &unix.SockaddrLinklayer{Ifindex: ifi.Index, Protocol: htons(unix.ETH_P_IP)}
		to6 := &unix.SockaddrLinklayer{Ifindex: ifi.Index, Protocol: htons(unix.ETH_P_IPV6)}
		rng := rand.New(rand.NewPCG(1, 2))
		buf := make([]byte, 256)
		// Sources in 198.19.0.0/16 and 2001:db8:ff00::/40, which no route
		// covers, towards a destination with no route (dropped there).
		for deadline := time.Now().Add(duration); sent < most && time.Now().Before(deadline); sent++ {
			if sent%1000 == 0 && sw.Learning().Full > 0 {
				break
			}
			var src, dst netip.Addr
			to := to4
			if sent%2 == 0 {
				src = netip.AddrFrom4([4]byte{198, 19, byte(rng.Uint32()), byte(rng.Uint32())})
				dst = netip.MustParseAddr("198.18.200.1")
			} else {
				var a16 [16]byte
				binary.BigEndian.PutUint64(a16[0:], 0x20010db8ff000000|rng.Uint64()&0xffffff)
				binary.BigEndian.PutUint64(a16[8:], rng.Uint64())
				src, dst, to = netip.AddrFrom16(a16), netip.MustParseAddr("2001:db8:200::1"), to6
			}
			n := packet.PutUDP(buf, netip.AddrPortFrom(src, 1000), netip.AddrPortFrom(dst, 9), []byte("flood"))
			if err := unix.Sendto(fd, buf[:n], 0, to); err != nil && err != unix.ENOBUFS && err != unix.EAGAIN {
				return fmt.Errorf("sendto: %w", err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ping(t, a, b.v4)
	ping(t, b, a.v6)
	l := sw.Learning()
	t.Logf("sent %d packets from random sources; learning %+v", sent, *l)
	if l.Hosts > program.DefaultMaxLearned {
		t.Errorf("%d hosts learned, over the bound of %d", l.Hosts, program.DefaultMaxLearned)
	}
	if l.Full == 0 {
		t.Errorf("%d packets from random sources and the table was never full", sent)
	}
	rep := stop()
	if rep.Learning == nil || rep.Learning.Hosts > program.DefaultMaxLearned {
		t.Errorf("report learning %+v", rep.Learning)
	}
}

// tapGuest is a guest behind a TAP port whose device the test creates
// with a MAC of its choosing before the switch attaches to it, so that
// the port's mac= lock and the guest's EUI-64 link-local address agree.
type tapGuest struct {
	*guest
	mac [6]byte
}

func newTAPGuests(t *testing.T, n int) []*tapGuest {
	var out []*tapGuest
	for i, g := range newGuests(t, n) {
		tg := &tapGuest{guest: g, mac: [6]byte{0x02, 0x53, 0x4e, 0, 0, byte(i + 1)}}
		g.v4, g.v6 = fmt.Sprintf("198.18.9.%d", i+1), fmt.Sprintf("2001:db8:9::%d", i+1)
		g.run(t, "ip", "tuntap", "add", "dev", g.dev, "mode", "tap")
		g.run(t, "ip", "link", "set", "dev", g.dev, "address", net.HardwareAddr(tg.mac[:]).String())
		out = append(out, tg)
	}
	return out
}

// startTAPSwitch bridges the guests' TAP ports, port i with opts[i], and
// gives each guest its addresses.
func startTAPSwitch(t *testing.T, gs []*tapGuest, opts ...string) (*Switch, func() *Report) {
	t.Helper()
	cfg := Config{Workers: 1}
	for i, g := range gs {
		spec := "tap:" + g.dev + ",netns=" + g.ns.Name
		if i < len(opts) && opts[i] != "" {
			spec += "," + opts[i]
		}
		p, err := ParsePort(spec)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	sw, err := Open(cfg, Tuning{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *Report, 1)
	go func() {
		rep, err := sw.Run(ctx)
		if err != nil {
			t.Errorf("switch: %v", err)
		}
		done <- rep
	}()
	var once sync.Once
	var rep *Report
	stop := func() *Report {
		once.Do(func() {
			cancel()
			select {
			case rep = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("switch did not stop")
			}
			if rep == nil || rep.Leak != "ok" {
				t.Errorf("report %+v", rep)
			}
		})
		return rep
	}
	t.Cleanup(func() { stop() })
	for _, g := range gs {
		g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(g.v4+"/24"))
		g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(g.v6+"/64"))
	}
	return sw, stop
}

// lockedPort is the port options that lock g to its MAC and addresses.
func (g *tapGuest) lockedPort() string {
	return fmt.Sprintf("mac=%s,allow=%s/32+%s/128", net.HardwareAddr(g.mac[:]), g.v4, g.v6)
}

// neighbour returns the MAC of addr in g's neighbour cache, or "".
func (g *tapGuest) neighbour(t *testing.T, addr string) string {
	t.Helper()
	f := strings.Fields(g.run(t, "ip", "neigh", "show", addr, "dev", g.dev))
	for i, w := range f {
		if w == "lladdr" && i+1 < len(f) {
			return f[i+1]
		}
	}
	return ""
}

func ether(dst, src [6]byte, etherType uint16, inner []byte) []byte {
	b := make([]byte, packet.EthernetHeaderLen+len(inner))
	n := packet.PutEthernet(b, dst, src, etherType)
	copy(b[n:], inner)
	return b
}

func arpReply(senderMAC [6]byte, senderIP string, targetMAC [6]byte, targetIP string) []byte {
	b := make([]byte, packet.ARPLen)
	packet.PutARP(b, packet.ARPReply, senderMAC, netip.MustParseAddr(senderIP), targetMAC, netip.MustParseAddr(targetIP))
	return b
}

// neighbourAdvert is an unsolicited neighbour advertisement (override
// flag set) from src claiming that target is at lla.
func neighbourAdvert(src, dst, target string, lla [6]byte) []byte {
	s, d, tg := netip.MustParseAddr(src), netip.MustParseAddr(dst), netip.MustParseAddr(target)
	const icmpLen = 32
	b := make([]byte, packet.IPv6HeaderLen+icmpLen)
	n := packet.PutIPv6(b, s, d, 58, 255, icmpLen)
	icmp := b[n:]
	icmp[0] = 136  // neighbour advertisement
	icmp[4] = 0x20 // override
	a := tg.As16()
	copy(icmp[8:24], a[:])
	icmp[24], icmp[25] = 2, 1 // target link-layer address
	copy(icmp[26:32], lla[:])
	binary.BigEndian.PutUint16(icmp[2:], packet.Checksum(icmp, packet.PseudoHeaderChecksum(58, s, d, icmpLen)))
	return b
}

// A TAP guest locked to its MAC and addresses spoofs its neighbour's MAC
// and sends forged ARP replies and neighbour advertisements for the
// neighbour's addresses: all dropped, counted by reason on its port, and
// a third guest's neighbour cache keeps the neighbour's real MAC. Its
// DHCP server messages are dropped too.
func TestSwitchTAPPortSecurity(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newTAPGuests(t, 3)
	attacker, victim, other := gs[0], gs[1], gs[2]
	_, stop := startTAPSwitch(t, gs, attacker.lockedPort(), victim.lockedPort(), other.lockedPort())
	ping(t, other.guest, victim.v4)
	ping(t, other.guest, victim.v6)
	ping(t, attacker.guest, victim.v4) // the attacker's own traffic passes
	real := net.HardwareAddr(victim.mac[:]).String()
	if got := other.neighbour(t, victim.v4); got != real {
		t.Fatalf("before the attack, %s is at %q, want %s", victim.v4, got, real)
	}
	const rounds = 12
	for range rounds {
		inject(t, attacker.guest, true,
			// The victim's MAC as source.
			ether(other.mac, victim.mac, packet.EtherTypeARP, arpReply(victim.mac, victim.v4, other.mac, other.v4)),
			// The attacker's MAC, claiming the victim's addresses.
			ether(other.mac, attacker.mac, packet.EtherTypeARP, arpReply(attacker.mac, victim.v4, other.mac, other.v4)),
			ether(packet.Broadcast, attacker.mac, packet.EtherTypeARP, arpReply(attacker.mac, victim.v4, packet.Broadcast, victim.v4)),
			ether(other.mac, attacker.mac, packet.EtherTypeIPv6, neighbourAdvert(attacker.v6, other.v6, victim.v6, attacker.mac)),
			ether(packet.MulticastMAC(netip.MustParseAddr("ff02::1")), attacker.mac, packet.EtherTypeIPv6,
				neighbourAdvert(attacker.v6, "ff02::1", victim.v6, attacker.mac)))
		// The kernel ignores a second update of an entry within its
		// locktime (1 s): spread the forgeries over more than that.
		time.Sleep(150 * time.Millisecond)
	}
	for _, addr := range []string{victim.v4, victim.v6} {
		if got := other.neighbour(t, addr); got != "" && got != real {
			t.Errorf("%s's neighbour cache poisoned: %s is at %s, not %s", other.ns.Name, addr, got, real)
		}
	}
	ping(t, other.guest, victim.v4)
	ping(t, other.guest, victim.v6)

	// A DHCP server on the attacker: its offers do not reach the others,
	// while the same datagram from another port does.
	var rx *net.UDPConn
	if err := other.ns.Do(func() (err error) {
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 68})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	for _, from := range []int{67, 1067} {
		inject(t, attacker.guest, true, ether(other.mac, attacker.mac, packet.EtherTypeIPv4,
			udpPacket(hostPort(attacker.v4, from), hostPort(other.v4, 68))))
	}
	buf := make([]byte, 512)
	rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, src, err := rx.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("the control datagram did not arrive: %v", err)
	}
	if src.Port != 1067 {
		t.Errorf("a datagram from %v, the DHCP server port, arrived", src)
	}

	rep := stop()
	d := rep.Ports[0].Drops
	for _, want := range []struct {
		r drop.Reason
		n uint64
	}{{drop.MACSpoof, rounds}, {drop.ARPSpoof, 2 * rounds}, {drop.NDiscSpoof, 2 * rounds}, {drop.DHCPServer, 1}} {
		if d[want.r] < want.n {
			t.Errorf("%d %s drops on the attacker's port, want %d (drops %v)", d[want.r], want.r, want.n, d)
		}
	}
	for _, p := range rep.Ports[1:] {
		for _, r := range []drop.Reason{drop.MACSpoof, drop.ARPSpoof, drop.NDiscSpoof, drop.IPRPFilter, drop.DHCPServer} {
			if p.Drops[r] != 0 {
				t.Errorf("honest port %s: %d %s drops", p.Name, p.Drops[r], r)
			}
		}
	}
}

// A TAP guest flooding random source MACs fills its share of the
// bridge's table and no more: the others' stations stay and they keep
// talking.
func TestSwitchMACFlood(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newTAPGuests(t, 3)
	flooder, a, b := gs[0], gs[1], gs[2]
	sw, stop := startTAPSwitch(t, gs)
	ping(t, a.guest, b.v4)
	// The TAP queue drops what a slow switch (the race detector) does
	// not read in time, so flood until the share is full, bounded by
	// count.
	const bursts, burstLen = 200, 1000
	rng := rand.New(rand.NewPCG(3, 4))
	pkt := udpPacket(hostPort(flooder.v4, 1000), hostPort("198.18.9.250", 9))
	burst := make([][]byte, burstLen)
	for n := 0; n < bursts; n++ {
		for i := range burst {
			src := [6]byte{0x02, byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}
			burst[i] = ether(a.mac, src, packet.EtherTypeIPv4, pkt)
		}
		inject(t, flooder.guest, true, burst...)
		if b := sw.Stats().Bridge; b != nil && b.Full > 0 {
			break
		}
	}
	ping(t, a.guest, b.v4)
	ping(t, b.guest, a.v6)
	share := program.DefaultMaxEntries / len(gs)
	on := map[int]int{}
	seen := map[[6]byte]int{}
	for _, e := range sw.chain.bridge.Table() {
		on[e.Port]++
		seen[e.MAC] = e.Port
	}
	if on[0] > share {
		t.Errorf("%d stations learned on the flooding port, over its share of %d", on[0], share)
	}
	if p, ok := seen[a.mac]; !ok || p != 1 {
		t.Errorf("guest a's station lost: %v", ok)
	}
	if p, ok := seen[b.mac]; !ok || p != 2 {
		t.Errorf("guest b's station lost: %v", ok)
	}
	rep := stop()
	if rep.Bridge == nil || rep.Bridge.Full == 0 {
		t.Errorf("the flood's refused stations are not counted: %+v", rep.Bridge)
	}
}

// One guest floods UDP at full rate through the switch while another
// pings a third: every ping comes back.
func TestSwitchFloodDoesNotStarvePings(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 4)
	flooder, sink, pinger, target := gs[0], gs[1], gs[2], gs[3]
	_, stop := startSwitchConfig(t, gs, Config{Workers: 1})
	ping(t, pinger, target.v4)
	var tx net.Conn
	if err := flooder.ns.Do(func() (err error) {
		tx, err = net.Dial("udp", hostPort(sink.v4, 9))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	stopFlood := make(chan struct{})
	flooded := make(chan int, 1)
	go func() {
		payload := make([]byte, 1200)
		n := 0
		// Bounded by count as well as by the pings' end.
		for ; n < 5_000_000; n++ {
			select {
			case <-stopFlood:
				flooded <- n
				return
			default:
			}
			_, _ = tx.Write(payload) // ECONNREFUSED from the sink's ICMP is expected
		}
		flooded <- n
	}()
	out := pingAll(t, pinger, target.v4, 30)
	close(stopFlood)
	n := <-flooded
	t.Logf("flooded %d datagrams during the pings:\n%s", n, out[strings.LastIndex(out, "\n---"):])
	rep := stop()
	if rep.Ports[0].RxPackets < 1000 {
		t.Errorf("the flood reached the switch with only %d packets", rep.Ports[0].RxPackets)
	}
}

// Two router guests (allow=any) claim one address in turn: the host
// moves at most once per hold time, the refused moves are counted, and a
// third guest's traffic is untouched.
func TestSwitchFlappingSource(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	gs := newGuests(t, 3)
	sw, stop := startSwitchConfig(t, gs, Config{Workers: 1}, "allow=any", "allow=any")
	pkt := udpPacket("198.19.0.1:1000", hostPort(gs[2].v4, 9))
	const rounds = 40 // each takes tens of milliseconds: two namespace switches
	start := time.Now()
	for range rounds {
		inject(t, gs[0], false, pkt)
		inject(t, gs[1], false, pkt)
	}
	elapsed := time.Since(start)
	pingAll(t, gs[2], gs[0].v4, 5)
	l := sw.Learning()
	t.Logf("%v of flapping: %+v", elapsed, *l)
	// One move per hold time at most, plus the first learning.
	if most := uint64(elapsed/program.DefaultMoveHold) + 1; l.Moved > most {
		t.Errorf("%d moves in %v, want at most %d", l.Moved, elapsed, most)
	}
	if l.MovesRefused < rounds/2 {
		t.Errorf("%d moves refused of %d attempts", l.MovesRefused, 2*rounds)
	}
	stop()
}
