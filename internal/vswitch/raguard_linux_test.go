package vswitch

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
)

// Where the rogue router's attacks point: the prefixes it offers (in
// plain sight, behind a hop-by-hop options header, behind a destination
// options header), the destination it redirects, and the router B
// really uses for it, whose link-local address the attacker forges.
var (
	rogueRAPrefixes = []netip.Prefix{
		netip.MustParsePrefix("2001:db8:a1::/64"),
		netip.MustParsePrefix("2001:db8:a2::/64"),
		netip.MustParsePrefix("2001:db8:a3::/64"),
	}
	redirectedNet = netip.MustParsePrefix("2001:db8:99::/64")
	redirectedDst = netip.MustParseAddr("2001:db8:99::1")
	realRouter    = netip.MustParseAddr("fe80::1")
	allNodes      = netip.MustParseAddr("ff02::1")
)

const noExtension = -1

// ndiscPacket wraps the ICMPv6 message msg, whose checksum it fills in,
// in an IPv6 header from src to dst with the hop limit of 255 neighbour
// discovery requires, behind an 8-byte options header of type ext
// (hop-by-hop or destination options) unless ext is noExtension.
func ndiscPacket(src, dst netip.Addr, ext int, msg []byte) []byte {
	binary.BigEndian.PutUint16(msg[2:], 0)
	binary.BigEndian.PutUint16(msg[2:], packet.Checksum(msg, packet.PseudoHeaderChecksum(packet.ProtoICMPv6, src, dst, len(msg))))
	next, opts := packet.ProtoICMPv6, []byte(nil)
	if ext != noExtension {
		next = uint8(ext)
		opts = []byte{packet.ProtoICMPv6, 0, 1, 4, 0, 0, 0, 0} // a PadN option fills it
	}
	b := make([]byte, packet.IPv6HeaderLen+len(opts)+len(msg))
	n := packet.PutIPv6(b, src, dst, next, 255, len(opts)+len(msg))
	copy(b[n+copy(b[n:], opts):], msg)
	return b
}

// routerAdvert is a router advertisement that makes its sender a default
// router for 30 minutes and offers prefix for autoconfiguration, with a
// source link-layer address option if lla is set.
func routerAdvert(prefix netip.Prefix, lla *[6]byte) []byte {
	msg := make([]byte, 16, 56)
	msg[0] = 134
	msg[4] = 64                               // current hop limit
	binary.BigEndian.PutUint16(msg[6:], 1800) // router lifetime
	info := make([]byte, 32)
	info[0], info[1], info[2], info[3] = 3, 4, uint8(prefix.Bits()), 0xc0 // prefix information: on-link, autonomous
	binary.BigEndian.PutUint32(info[4:], 86400)                           // valid lifetime
	binary.BigEndian.PutUint32(info[8:], 14400)                           // preferred lifetime
	a := prefix.Addr().As16()
	copy(info[16:], a[:])
	msg = append(msg, info...)
	if lla != nil {
		msg = append(append(msg, 1, 1), lla[:]...)
	}
	return msg
}

// redirect tells its receiver that dst is better reached through target,
// with a target link-layer address option if lla is set.
func redirect(target, dst netip.Addr, lla *[6]byte) []byte {
	msg := make([]byte, 40, 48)
	msg[0] = 137
	t, d := target.As16(), dst.As16()
	copy(msg[8:], t[:])
	copy(msg[24:], d[:])
	if lla != nil {
		msg = append(append(msg, 2, 1), lla[:]...)
	}
	return msg
}

// setIPv6Conf writes net.ipv6.conf.DEV.KEY in ns.
func setIPv6Conf(t *testing.T, g *guest, key, value string) {
	t.Helper()
	if err := g.ns.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/"+g.dev+"/"+key, []byte(value), 0o644)
	}); err != nil {
		t.Fatalf("%s: %s=%s: %v", g.ns.Name, key, value, err)
	}
}

// ipv6State is what a router advertisement or redirect can change in a
// guest: its IPv6 routes, its IPv6 addresses (without their flags and
// lifetimes, which DAD and time change), and the route to redirectedDst.
type ipv6State struct {
	routes, addrs []string
	redirected    string
}

func (g *guest) ipv6State(t *testing.T) ipv6State {
	t.Helper()
	var s ipv6State
	for _, l := range strings.Split(strings.TrimSpace(g.run(t, "ip", "-6", "route", "show")), "\n") {
		s.routes = append(s.routes, strings.TrimSpace(l))
	}
	f := strings.Fields(g.run(t, "ip", "-6", "-o", "addr", "show"))
	for i, w := range f {
		if w == "inet6" && i+1 < len(f) {
			s.addrs = append(s.addrs, f[i+1])
		}
	}
	slices.Sort(s.routes)
	slices.Sort(s.addrs)
	s.redirected = strings.TrimSpace(g.run(t, "ip", "-6", "route", "get", redirectedDst.String()))
	return s
}

// linkLocal returns g's link-local address on its device.
func (g *guest) linkLocal(t *testing.T) netip.Addr {
	t.Helper()
	f := strings.Fields(g.run(t, "ip", "-6", "-o", "addr", "show", "dev", g.dev, "scope", "link"))
	for i, w := range f {
		if w == "inet6" && i+1 < len(f) {
			if p, err := netip.ParsePrefix(f[i+1]); err == nil {
				return p.Addr()
			}
		}
	}
	t.Fatalf("%s: no link-local address on %s", g.ns.Name, g.dev)
	return netip.Addr{}
}

// waitNoTentative waits until DAD has settled on g's addresses.
func (g *guest) waitNoTentative(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); strings.Contains(g.run(t, "ip", "-6", "addr", "show", "dev", g.dev), "tentative"); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: addresses still tentative", g.ns.Name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A rogue router on a guest port (TAP or TUN): guest A sends router
// advertisements offering a prefix and itself as default router to
// ff02::1, in plain sight and behind extension headers, and a redirect
// forged as from B's real router. B accepts router advertisements and
// redirects (accept_ra=2, forwarding off), yet its routes and addresses
// stay as they were, and A's port counts the drops as IPV6_RA_GUARD.
// With router=on on A's port, the same packets do change B: the attack
// is real and the test can fail.
func TestSwitchRAGuard(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	for _, tap := range []bool{true, false} {
		for _, router := range []bool{false, true} {
			kind := map[bool]string{true: "tap", false: "tun"}[tap]
			t.Run(fmt.Sprintf("%s,router=%v", kind, router), func(t *testing.T) { testRAGuard(t, tap, router) })
		}
	}
}

func testRAGuard(t *testing.T, tap, router bool) {
	var a, b *guest
	var stop func() *Report
	var aMAC *[6]byte // A's MAC for link-layer options, on TAP
	var frame func(pkt []byte) []byte
	aLL := netip.MustParseAddr("fe80::a") // any link-local source reaches ff02::1 from a TUN port
	routerOpt := ""
	if router {
		routerOpt = ",router=on"
	}
	if tap {
		gs := newTAPGuests(t, 2)
		ta, tb := gs[0], gs[1]
		a, b, aMAC = ta.guest, tb.guest, &ta.mac
		// Locked as in the field: its addresses, and all of fe80::/64 so
		// that it may use any link-local address.
		lockA := fmt.Sprintf("mac=%s,allow=%s/32+fe80::/64+%s/128", net.HardwareAddr(ta.mac[:]), a.v4, a.v6)
		_, stop = startTAPSwitch(t, gs, lockA+routerOpt, tb.lockedPort())
		group := packet.MulticastMAC(allNodes)
		frame = func(pkt []byte) []byte { return ether(group, ta.mac, packet.EtherTypeIPv6, pkt) }
	} else {
		gs := newGuests(t, 2)
		a, b = gs[0], gs[1]
		_, stop = startSwitchConfig(t, gs, Config{Workers: 1}, strings.TrimPrefix(routerOpt, ","))
		frame = func(pkt []byte) []byte { return pkt }
	}
	setIPv6Conf(t, b, "forwarding", "0")
	setIPv6Conf(t, b, "accept_ra", "2")
	setIPv6Conf(t, b, "accept_redirects", "1")
	b.run(t, "ip", "-6", "route", "add", redirectedNet.String(), "via", realRouter.String(), "dev", b.dev)
	b.waitNoTentative(t)
	if tap {
		a.waitNoTentative(t)
		aLL = a.linkLocal(t) // the one its kernel formed from its MAC
	}
	ping(t, a, b.v6)
	before := b.ipv6State(t)
	if !strings.Contains(before.redirected, "via "+realRouter.String()) {
		t.Fatalf("before the attack, %s goes %q, not via %s", redirectedDst, before.redirected, realRouter)
	}

	var pkts [][]byte
	const rounds = 3
	for range rounds {
		for i, ext := range []int{noExtension, 0, 60} { // plain, hop-by-hop, destination options
			pkts = append(pkts, frame(ndiscPacket(aLL, allNodes, ext, routerAdvert(rogueRAPrefixes[i], aMAC))))
		}
		pkts = append(pkts, frame(ndiscPacket(realRouter, allNodes, noExtension, redirect(aLL, redirectedDst, aMAC))))
	}
	guardedPkts := len(pkts)
	// A DHCPv6 reply, which dhcp-server=off stops whether A is a router
	// or not.
	for range rounds {
		pkts = append(pkts, frame(udpPacket(hostPort(a.v6, 547), hostPort(b.v6, 546))))
	}
	inject(t, a, tap, pkts...)
	// B's echo replies follow the attack through the switch's one
	// worker: once they are back, B has had every packet that passed.
	ping(t, a, b.v6)
	after := b.ipv6State(t)

	if !router {
		if !slices.Equal(after.routes, before.routes) {
			t.Errorf("B's routes changed:\n%s\nwas\n%s", strings.Join(after.routes, "\n"), strings.Join(before.routes, "\n"))
		}
		if !slices.Equal(after.addrs, before.addrs) {
			t.Errorf("B's addresses changed: %v, was %v", after.addrs, before.addrs)
		}
		if after.redirected != before.redirected {
			t.Errorf("B redirected: %s goes %q, was %q", redirectedDst, after.redirected, before.redirected)
		}
	} else {
		// The kernel applies what passed as it arrives; give the address
		// table a moment all the same.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !rogueApplied(after, aLL); {
			time.Sleep(100 * time.Millisecond)
			after = b.ipv6State(t)
		}
		if !rogueApplied(after, aLL) {
			t.Errorf("with router=on, B did not take A's advertisements and redirect:\nroutes %v\naddrs %v\n%s goes %q",
				after.routes, after.addrs, redirectedDst, after.redirected)
		}
	}

	rep := stop()
	guarded := rep.Ports[0].Drops[drop.RAGuard]
	if router && guarded != 0 || !router && guarded < uint64(guardedPkts) {
		t.Errorf("A's port counted %d IPV6_RA_GUARD drops for %d packets (router=%v; drops %v)", guarded, guardedPkts, router, rep.Ports[0].Drops)
	}
	if d := rep.Ports[0].Drops[drop.DHCPServer]; d < rounds {
		t.Errorf("A's port counted %d DHCP_SERVER drops for %d DHCPv6 replies", d, rounds)
	}
	if d := rep.Ports[1].Drops[drop.RAGuard]; d != 0 {
		t.Errorf("B's port counted %d IPV6_RA_GUARD drops", d)
	}
}

// rogueApplied reports whether s shows every attack having worked: a
// default route via from, a route and an address in each offered
// prefix, and redirectedDst redirected to from.
func rogueApplied(s ipv6State, from netip.Addr) bool {
	has := func(list []string, pred func(string) bool) bool { return slices.ContainsFunc(list, pred) }
	if !has(s.routes, func(r string) bool { return strings.HasPrefix(r, "default via "+from.String()+" ") }) {
		return false
	}
	for _, p := range rogueRAPrefixes {
		if !has(s.routes, func(r string) bool { return strings.HasPrefix(r, p.String()+" ") }) ||
			!has(s.addrs, func(a string) bool { pfx, err := netip.ParsePrefix(a); return err == nil && p.Contains(pfx.Addr()) }) {
			return false
		}
	}
	return strings.Contains(s.redirected, "via "+from.String()+" ")
}
