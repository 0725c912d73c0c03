package vswitch

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/internal/vswitch/portkind/vxlankind"
	"softnet.dev/vxlan"
)

// overlayHost is one end of a test underlay: a namespace standing for a
// host, with its address on the veth pair that joins it to the other.
type overlayHost struct {
	ns   *netnstest.NS
	dev  string
	addr netip.Addr
}

// underlayMTU leaves room for a 1500-byte guest MTU and the outer
// headers over either family (70 bytes over IPv6), so nothing is
// fragmented.
const underlayMTU = "1600"

// newUnderlay makes two hosts joined by a veth pair, with addresses of
// the family asked for.
func newUnderlay(t *testing.T, ipv6 bool) (a, b overlayHost) {
	return newUnderlayMTU(t, ipv6, underlayMTU)
}

// newUnderlayMTU is newUnderlay with the veths' MTU.
func newUnderlayMTU(t *testing.T, ipv6 bool, mtu string) (a, b overlayHost) {
	t.Helper()
	a = overlayHost{ns: netnstest.New(t), dev: "ua", addr: netip.MustParseAddr("198.18.100.1")}
	b = overlayHost{ns: netnstest.New(t), dev: "ub", addr: netip.MustParseAddr("198.18.100.2")}
	bits := 24
	if ipv6 {
		a.addr, b.addr, bits = netip.MustParseAddr("2001:db8:100::1"), netip.MustParseAddr("2001:db8:100::2"), 64
	}
	mustExec(t, a.ns, "ip", "link", "add", a.dev, "mtu", mtu, "type", "veth", "peer", "name", b.dev, "mtu", mtu, "netns", b.ns.Name)
	for _, h := range []overlayHost{a, b} {
		mustExec(t, h.ns, "ip", "link", "set", h.dev, "up")
		h.ns.AddAddr(t, h.dev, netip.PrefixFrom(h.addr, bits))
	}
	return a, b
}

// newThreeHosts makes three hosts whose underlay devices share one
// bridge, with addresses 198.18.100.1 to .3.
func newThreeHosts(t *testing.T) []overlayHost {
	t.Helper()
	under := netnstest.New(t)
	mustExec(t, under, "ip", "link", "add", "br0", "type", "bridge")
	mustExec(t, under, "ip", "link", "set", "br0", "up")
	var hosts []overlayHost
	for i := range 3 {
		h := overlayHost{ns: netnstest.New(t), dev: "ua", addr: netip.MustParseAddr(fmt.Sprintf("198.18.100.%d", i+1))}
		port := fmt.Sprintf("p%d", i)
		mustExec(t, under, "ip", "link", "add", port, "mtu", underlayMTU, "type", "veth", "peer", "name", h.dev, "mtu", underlayMTU, "netns", h.ns.Name)
		mustExec(t, under, "ip", "link", "set", port, "master", "br0")
		mustExec(t, under, "ip", "link", "set", port, "up")
		mustExec(t, h.ns, "ip", "link", "set", h.dev, "up")
		h.ns.AddAddr(t, h.dev, netip.PrefixFrom(h.addr, 24))
		hosts = append(hosts, h)
	}
	return hosts
}

// overlayGuests are two guests on one L2 segment across the overlay.
func overlayGuests(t *testing.T) []*guest {
	gs := newGuests(t, 2)
	for i, g := range gs {
		g.v4, g.v6 = fmt.Sprintf("198.18.9.%d", i+1), fmt.Sprintf("2001:db8:9::%d", i+1)
	}
	return gs
}

// addAddrs gives the guest its addresses on the overlay's segment.
func (g *guest) addAddrs(t *testing.T) {
	g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(g.v4+"/24"))
	g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(g.v6+"/64"))
}

// startOverlaySwitch runs a softnet switch on host h that bridges g's
// TAP port with a VXLAN port to the peers, and gives g its addresses.
func startOverlaySwitch(t *testing.T, g *guest, h overlayHost, peers ...overlayHost) (*Switch, func() *Report) {
	t.Helper()
	sw, err := openOverlaySwitch(g, h, peers...)
	if err != nil {
		t.Fatal(err)
	}
	stop := runSwitch(t, sw, nil)
	g.addAddrs(t)
	return sw, stop
}

// openOverlaySwitch opens the switch startOverlaySwitch runs.
func openOverlaySwitch(g *guest, h overlayHost, peers ...overlayHost) (*Switch, error) {
	return openOverlaySwitchOpts(g, "", h, peers...)
}

// openOverlaySwitchOpts is openOverlaySwitch with options for the
// guest's TAP port (",offload=off").
func openOverlaySwitchOpts(g *guest, tapOpts string, h overlayHost, peers ...overlayHost) (*Switch, error) {
	cfg := Config{Workers: 1}
	vx := fmt.Sprintf("vxlan:vx,vni=42,local=%s,netns=%s", h.addr, h.ns.Name)
	for _, p := range peers {
		vx += ",remote=" + p.addr.String()
	}
	for _, spec := range []string{"tap:" + g.dev + ",netns=" + g.ns.Name + tapOpts, vx} {
		p, err := ParsePort(spec)
		if err != nil {
			return nil, err
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	return Open(cfg, Tuning{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// vxlanStatsOf returns the counters of the switch's vxlan port.
func vxlanStatsOf(t *testing.T, rep *Report) vxlan.Stats {
	t.Helper()
	if rep == nil {
		t.Fatal("no report")
	}
	for _, d := range rep.Devices {
		if v, ok := d.Own.(*vxlankind.Counters); ok {
			return v.Stats
		}
	}
	t.Fatal("no vxlan port in the report")
	return vxlan.Stats{}
}

// Two hosts, each with a softnet switch bridging a TAP guest onto a
// VXLAN port: ARP and neighbour discovery cross (flooded, then learned),
// ping over IPv4 and IPv6 and TCP both ways arrive intact, over an IPv4
// and an IPv6 underlay, and every buffer comes home.
func TestVXLANSoftnetToSoftnet(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	for _, family := range []string{"ipv4", "ipv6"} {
		t.Run(family, func(t *testing.T) {
			ha, hb := newUnderlay(t, family == "ipv6")
			gs := overlayGuests(t)
			_, stopA := startOverlaySwitch(t, gs[0], ha, hb)
			_, stopB := startOverlaySwitch(t, gs[1], hb, ha)
			ping(t, gs[0], gs[1].v4)
			ping(t, gs[1], gs[0].v6)
			transfer(t, gs[0], gs[1], gs[1].v4, 5005, 16<<20)
			transfer(t, gs[1], gs[0], gs[0].v6, 5006, 16<<20)
			udpExchange(t, gs[0], gs[1], 50)
			for _, rep := range []*Report{stopA(), stopB()} {
				v := vxlanStatsOf(t, rep)
				if v.Learned == 0 || v.RxPackets == 0 || v.TxPackets == 0 {
					t.Errorf("vxlan port learned nothing or moved nothing: %+v", v)
				}
				if v.RxDrops.Total() != 0 {
					t.Errorf("good traffic dropped on receive: %v", v.RxDrops)
				}
				if v.Segmented == 0 {
					t.Errorf("no TSO packet from the TAP guest was segmented: %+v", v)
				}
			}
		})
	}
}

// Over an underlay with a 1500-byte MTU, guests with the usual 1500
// find the overlay's smaller MTU: their too-big packets are dropped as
// PKT_TOO_BIG and answered with "fragmentation needed" or "packet too
// big", and TCP transfers adapt and complete.
func TestVXLANPathMTU(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	for _, family := range []string{"ipv4", "ipv6"} {
		t.Run(family, func(t *testing.T) {
			ha, hb := newUnderlayMTU(t, family == "ipv6", "1500")
			inner := map[string]string{"ipv4": "1450", "ipv6": "1430"}[family]
			gs := overlayGuests(t)
			_, stopA := startOverlaySwitch(t, gs[0], ha, hb)
			_, stopB := startOverlaySwitch(t, gs[1], hb, ha)
			ping(t, gs[0], gs[1].v4)
			out, _ := gs[0].ns.Exec("ping", "-c", "1", "-M", "do", "-s", "1472", "-W", "2", gs[1].v4)
			if !strings.Contains(out, "mtu = "+inner) {
				t.Errorf("a 1500-byte ping with DF was not told the MTU %s:\n%s", inner, out)
			}
			transfer(t, gs[0], gs[1], gs[1].v4, 5005, 8<<20)
			transfer(t, gs[1], gs[0], gs[0].v6, 5006, 8<<20)
			for _, rep := range []*Report{stopA(), stopB()} {
				v := vxlanStatsOf(t, rep)
				if v.TooBig == 0 || v.TxDrops[drop.PktTooBig] < v.TooBig {
					t.Errorf("no too-big errors, or fewer drops than errors: %+v", v)
				}
			}
		})
	}
}

// Three hosts on one underlay segment (a bridge in a namespace of its
// own), each with a softnet switch whose VXLAN port has the other two as
// remotes: the first ARP request is flooded to both, so the third host
// learns the guest that asked, but once the two talking hosts learned
// each other, their transfer goes to each other only and the third
// sees none of it.
func TestVXLANThreeHosts(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	hosts := newThreeHosts(t)
	gs := newGuests(t, 3)
	var sws []*Switch
	for i, g := range gs {
		g.v4, g.v6 = fmt.Sprintf("198.18.9.%d", i+1), fmt.Sprintf("2001:db8:9::%d", i+1)
		var others []overlayHost
		for j, h := range hosts {
			if j != i {
				others = append(others, h)
			}
		}
		sw, _ := startOverlaySwitch(t, g, hosts[i], others...)
		sws = append(sws, sw)
	}
	ping(t, gs[0], gs[1].v4)
	third := func() vxlan.Stats { return vxlanStatsOf(t, sws[2].Stats()) }
	waitFor(t, 15*time.Second, "the flooded ARP request at the third host", func() bool { return third().Learned >= 1 })
	if s := vxlanStatsOf(t, sws[0].Stats()); s.Flooded == 0 || s.TxPackets < 2*s.Flooded {
		t.Errorf("host 1 did not flood to both remotes: %+v", s)
	}
	before := third().RxPackets
	transfer(t, gs[0], gs[1], gs[1].v4, 5005, 8<<20)
	if s := vxlanStatsOf(t, sws[1].Stats()); s.RxPackets < 1000 {
		t.Fatalf("the transfer did not cross: %+v", s)
	}
	// Now and then a frame may still be flooded (a neighbour probe to a
	// MAC not learned yet): a handful, not the transfer's thousands.
	if got := third().RxPackets - before; got > 20 {
		t.Errorf("the third host received %d frames of a transfer between the other two", got)
	}
}

// The remote host's switch stops in the middle of a transfer and
// starts again: the local one keeps running, and the transfer resumes
// through the new switch and arrives intact. The guests' TAP devices
// are the test's, so that they outlive the switch.
func TestVXLANRemoteRestart(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	ha, hb := newUnderlay(t, false)
	gs := overlayGuests(t)
	for _, g := range gs {
		mustExec(t, g.ns, "ip", "tuntap", "add", "dev", g.dev, "mode", "tap")
		mustExec(t, g.ns, "ip", "link", "set", g.dev, "up")
	}
	startOverlaySwitch(t, gs[0], ha, hb)
	swB, stopB := startOverlaySwitch(t, gs[1], hb, ha)
	ping(t, gs[0], gs[1].v4)
	var restarted *Switch
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(30 * time.Second)
		for vxlanCounters(swB.Stats()).RxPackets < 2000 {
			if time.Now().After(deadline) {
				t.Error("the transfer never got going")
				return
			}
			time.Sleep(time.Millisecond)
		}
		stopB()
		time.Sleep(300 * time.Millisecond) // a gap the sender must retransmit across
		sw, err := openOverlaySwitch(gs[1], hb, ha)
		if err != nil {
			t.Errorf("restart: %v", err)
			return
		}
		runSwitch(t, sw, nil)
		restarted = sw
	}()
	transfer(t, gs[0], gs[1], gs[1].v4, 5005, 128<<20)
	<-done
	if restarted == nil {
		t.Fatal("the remote switch was not restarted")
	}
	if rx := vxlanCounters(restarted.Stats()).RxPackets; rx < 1000 {
		t.Errorf("the restarted switch received only %d frames: the transfer did not resume through it", rx)
	}
}

// vxlanCounters returns the counters of the report's vxlan port, or
// zero: vxlanStatsOf for other goroutines than the test's.
func vxlanCounters(rep *Report) vxlan.Stats {
	for _, d := range rep.Devices {
		if v, ok := d.Own.(*vxlankind.Counters); ok {
			return v.Stats
		}
	}
	return vxlan.Stats{}
}

// kernelPeer makes host h a kernel VXLAN VTEP toward peer, as an
// operator would: a vxlan device on the IANA port bridged with a veth
// into the guest's namespace, with its transmit checksum offload and TSO
// on (the kernel's defaults) or off.
//
// With checksum offload on, a guest's TCP segment leaves the vxlan
// device with its checksum still to be finished, and over a veth
// underlay nothing finishes it: softnet's socket gets the inner frame
// with only the pseudo-header sum in its checksum field (a physical NIC
// would have finished it on the way out), and must finish it before a
// guest sees it. Flannel's users met that trap with their own kernel
// peers (and turned the offload off: ethtool -K flannel.1
// tx-checksum-ip-generic off). With TSO on as well, a veth hands the
// far socket whole GSO datagrams of up to 64 KiB: the port copies each
// from its spill area into a large buffer and hands it on as a GSO
// packet. vxlanOpts are more options of the device (udpcsum).
func kernelPeer(t *testing.T, h, peer overlayHost, g *guest, txCsum, tso bool, vxlanOpts ...string) {
	t.Helper()
	mustExec(t, h.ns, append([]string{"ip", "link", "add", "vx0", "type", "vxlan", "id", "42", "dstport", "4789",
		"local", h.addr.String(), "remote", peer.addr.String(), "dev", h.dev}, vxlanOpts...)...)
	if !tso {
		mustExec(t, h.ns, "ethtool", "-K", "vx0", "tso", "off")
	}
	if !txCsum {
		mustExec(t, h.ns, "ethtool", "-K", "vx0", "tx", "off")
	}
	mustExec(t, h.ns, "ip", "link", "add", "br0", "type", "bridge")
	mustExec(t, h.ns, "ip", "link", "add", "gb", "type", "veth", "peer", "name", g.dev, "netns", g.ns.Name)
	for _, dev := range []string{"vx0", "gb"} {
		mustExec(t, h.ns, "ip", "link", "set", dev, "master", "br0")
		mustExec(t, h.ns, "ip", "link", "set", dev, "up")
	}
	mustExec(t, h.ns, "ip", "link", "set", "br0", "up")
	mustExec(t, g.ns, "ip", "link", "set", g.dev, "up")
	g.addAddrs(t)
}

// One host runs softnet, the other the kernel's vxlan: the two speak
// the same VXLAN. While a guest pings across, datagrams that are not
// from the remote, with bad flags, another VNI or cut short are
// injected on the underlay: each is counted by its reason and the ping
// loses nothing.
func TestVXLANKernelPeer(t *testing.T) {
	netnstest.RequireTools(t, "ping", "ethtool")
	for _, tc := range []struct {
		name              string
		ipv6, txCsum, tso bool
	}{{"ipv4", false, true, false}, {"ipv6", true, true, false}, {"ipv4,tx-csum-off", false, false, false}, {"ipv4,tso", false, true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ipv6 := tc.ipv6
			ha, hb := newUnderlay(t, ipv6)
			gs := overlayGuests(t)
			kernelPeer(t, hb, ha, gs[1], tc.txCsum, tc.tso)
			sw, stop := startOverlaySwitch(t, gs[0], ha, hb)
			ping(t, gs[0], gs[1].v4)
			ping(t, gs[1], gs[0].v4)
			ping(t, gs[0], gs[1].v6)
			ping(t, gs[1], gs[0].v6)
			transfer(t, gs[0], gs[1], gs[1].v6, 5005, 16<<20)
			transfer(t, gs[1], gs[0], gs[0].v4, 5006, 16<<20)

			stranger := netip.MustParseAddr("198.18.100.9")
			bits := 24
			if ipv6 {
				stranger, bits = netip.MustParseAddr("2001:db8:100::9"), 64
			}
			hb.ns.AddAddr(t, hb.dev, netip.PrefixFrom(stranger, bits))
			inner := make([]byte, 60)
			copy(inner, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x77, 0x08, 0x06})
			dgram := func(flags byte, vni uint32, reserved byte, inner []byte) []byte {
				d := make([]byte, 8+len(inner))
				d[0] = flags
				binary.BigEndian.PutUint32(d[4:], vni<<8|uint32(reserved))
				copy(d[8:], inner)
				return d
			}
			before := vxlanStatsOf(t, sw.Stats()).RxDrops
			var wg sync.WaitGroup
			wg.Go(func() {
				// A ping that loses a packet fails: -c 20 with -W waiting.
				out, err := gs[1].ns.Exec("ping", "-c", "20", "-i", "0.05", "-W", "2", gs[0].v4)
				if err != nil {
					t.Errorf("ping during the injection: %v\n%s", err, out)
				}
			})
			for range 5 {
				sendUDP(t, hb, hb.addr, netip.AddrPortFrom(ha.addr, vxlan.DefaultPort), dgram(0x00, 42, 0, inner), dgram(0x08, 7, 0, inner), dgram(0x08, 42, 0, inner)[:12], dgram(0x08, 42, 1, inner))
				sendUDP(t, hb, stranger, netip.AddrPortFrom(ha.addr, vxlan.DefaultPort), dgram(0x08, 42, 0, inner))
			}
			wg.Wait()
			want := drop.Counts{}
			want[drop.VXLANInvalidHdr] = 10
			want[drop.VXLANVNINotFound] = 5
			want[drop.HdrTrunc] = 5
			want[drop.IPRPFilter] = 5
			waitFor(t, 15*time.Second, "injected datagrams counted by reason", func() bool {
				got := vxlanStatsOf(t, sw.Stats()).RxDrops
				for r := range got {
					got[r] -= before[r]
				}
				return got == want
			})
			v := vxlanStatsOf(t, stop())
			if v.Learned == 0 {
				t.Errorf("nothing learned from the kernel peer: %+v", v)
			}
			// Received checksums are finished here when the peer left
			// them to its offload: every segment of the 16 MiB it sent.
			// Without, only a frame whose final checksum happens to equal
			// its pseudo-header sum is (one in 65536; it keeps its value).
			if tc.tso {
				t.Logf("GSO datagrams received whole: %d; too big for a buffer: %d", v.RxGSO, v.RxDrops[drop.PktTooBig])
				if v.RxGSO == 0 {
					t.Errorf("peer's TSO on, yet no GSO datagram received: %+v", v)
				}
			} else if finished := v.RxCsumFinished > 1000; finished != tc.txCsum || !tc.txCsum && v.RxCsumFinished > 10 {
				t.Errorf("peer's checksum offload %v, yet %d received checksums finished: %+v", tc.txCsum, v.RxCsumFinished, v)
			}
		})
	}
}

// sendUDP sends each datagram from src in h's namespace to dst, as
// anyone on the underlay could.
func sendUDP(t *testing.T, h overlayHost, src netip.Addr, dst netip.AddrPort, ds ...[]byte) {
	t.Helper()
	if err := h.ns.Do(func() error {
		conn, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), net.UDPAddrFromAddrPort(dst))
		if err != nil {
			return err
		}
		defer conn.Close()
		for _, d := range ds {
			if _, err := conn.Write(d); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Routed overlay (mode=l3): each host's switch routes its TUN guest's
// prefixes to the guest and the other host's to a routed vxlan port,
// via the other host's VTEP, as Flannel's and Calico's VXLAN backends
// build it.
var (
	vtepMAC = [2]string{"02:00:00:00:42:01", "02:00:00:00:42:02"}
	l3net4  = [2]string{"198.18.21.0/24", "198.18.22.0/24"}
	l3net6  = [2]string{"2001:db8:21::/64", "2001:db8:22::/64"}
)

// routedGuests are a TUN guest per host, on host i's prefixes.
func routedGuests(t *testing.T) []*guest {
	gs := newGuests(t, 2)
	for i, g := range gs {
		g.v4, g.v6 = fmt.Sprintf("198.18.2%d.%d", i+1, i+1), fmt.Sprintf("2001:db8:2%d::%d", i+1, i+1)
		g.net4, g.net6 = l3net4[i], l3net6[i]
	}
	return gs
}

// startRoutedSwitch runs host i's switch: g's TUN port and a routed
// vxlan port to the other host, whose VTEP MAC is vtepMAC[1-i], with
// opts added to its spec (",port=8472").
func startRoutedSwitch(t *testing.T, i int, g *guest, h, peer overlayHost, opts string) (*Switch, func() *Report) {
	t.Helper()
	return startRoutedSwitchOpts(t, i, g, "", h, peer, opts)
}

// startRoutedSwitchOpts is startRoutedSwitch with options for the
// guest's TUN port (",offload=off").
func startRoutedSwitchOpts(t *testing.T, i int, g *guest, tunOpts string, h, peer overlayHost, opts string) (*Switch, func() *Report) {
	t.Helper()
	cfg := Config{Workers: 1}
	for _, spec := range []string{
		"tun:" + g.dev + ",netns=" + g.ns.Name + tunOpts,
		fmt.Sprintf("vxlan:vx,vni=42,local=%s,remote=%s,mode=l3,vtep-mac=%s,fdb=%s@%s,netns=%s%s", h.addr, peer.addr, vtepMAC[i], vtepMAC[1-i], peer.addr, h.ns.Name, opts),
	} {
		p, err := ParsePort(spec)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	for _, r := range []string{
		g.net4 + "=" + g.dev, g.net6 + "=" + g.dev,
		l3net4[1-i] + "=vx,via=" + peer.addr.String(), l3net6[1-i] + "=vx,via=" + peer.addr.String(),
	} {
		rt, err := ParseRoute(r)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Routes = append(cfg.Routes, rt)
	}
	sw, err := Open(cfg, Tuning{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop := runSwitch(t, sw, nil)
	g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(g.v4+"/24"))
	g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(g.v6+"/64"))
	mustExec(t, g.ns, "ip", "route", "add", l3net4[1-i], "dev", g.dev)
	mustExec(t, g.ns, "ip", "-6", "route", "add", l3net6[1-i], "dev", g.dev)
	return sw, stop
}

// Two softnet hosts with routed vxlan ports: ping and TCP over IPv4 and
// IPv6 cross between their TUN guests, over an underlay with room for
// the guests' 1500-byte MTU and over one without, where the guests'
// path MTU adapts to the ICMP errors the ports send.
func TestVXLANRoutedSoftnet(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	for _, mtu := range []string{underlayMTU, "1500"} {
		t.Run("mtu"+mtu, func(t *testing.T) {
			ha, hb := newUnderlayMTU(t, false, mtu)
			gs := routedGuests(t)
			_, stopA := startRoutedSwitch(t, 0, gs[0], ha, hb, "")
			_, stopB := startRoutedSwitch(t, 1, gs[1], hb, ha, "")
			ping(t, gs[0], gs[1].v4)
			ping(t, gs[1], gs[0].v6)
			transfer(t, gs[0], gs[1], gs[1].v4, 5005, 16<<20)
			transfer(t, gs[1], gs[0], gs[0].v6, 5006, 16<<20)
			for _, rep := range []*Report{stopA(), stopB()} {
				v := vxlanStatsOf(t, rep)
				if v.RxPackets == 0 || v.RxDrops.Total() != 0 || v.Learned != 0 || v.Flooded != 0 {
					t.Errorf("routed port: %+v", v)
				}
				if tooBig := v.TooBig > 0; tooBig != (mtu == "1500") {
					t.Errorf("underlay MTU %s, %d too-big errors: %+v", mtu, v.TooBig, v)
				}
			}
		})
	}
}

// A softnet host with a routed vxlan port and a kernel host configured
// as Flannel configures one (an address on the vxlan device, an onlink
// route to the other host's prefix through its VTEP's address, static
// neighbour and fdb entries) route between their guests, over IPv4 and
// IPv6, across an IPv4 underlay with the kernel on the IANA port and an
// IPv6 underlay with the kernel on Flannel's 8472, configured as
// Flannel's IPv6 backend (flannel-v6.VNI) configures its device: the
// commands docs/design.md gives.
func TestVXLANRoutedKernelPeer(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	for _, tc := range []struct {
		name string
		ipv6 bool
		port int
	}{{"ipv4", false, vxlan.DefaultPort}, {"ipv6,port8472", true, 8472}} {
		t.Run(tc.name, func(t *testing.T) {
			ha, hb := newUnderlay(t, tc.ipv6)
			gs := routedGuests(t)
			g := gs[1]
			routedKernelPeer(t, hb, ha, g, tc.port)
			sw, stop := startRoutedSwitch(t, 0, gs[0], ha, hb, fmt.Sprintf(",port=%d", tc.port))
			ping(t, gs[0], g.v4)
			ping(t, g, gs[0].v4)
			ping(t, gs[0], g.v6)
			ping(t, g, gs[0].v6)
			transfer(t, gs[0], g, g.v4, 5005, 16<<20)
			transfer(t, g, gs[0], gs[0].v4, 5006, 16<<20)
			transfer(t, gs[0], g, g.v6, 5007, 16<<20)
			transfer(t, g, gs[0], gs[0].v6, 5008, 16<<20)
			udpExchange(t, g, gs[0], 50)
			// A frame to another MAC than the VTEP's is not taken.
			inner := make([]byte, 14+20)
			copy(inner, []byte{0x02, 0, 0, 0, 0, 0x99, 0x02, 0, 0, 0, 0x42, 0x02, 0x08, 0x00})
			d := make([]byte, 8+len(inner))
			d[0] = 0x08
			binary.BigEndian.PutUint32(d[4:], 42<<8)
			copy(d[8:], inner)
			sendUDP(t, hb, hb.addr, netip.AddrPortFrom(ha.addr, uint16(tc.port)), d)
			waitFor(t, 15*time.Second, "the frame to another MAC counted", func() bool {
				return vxlanStatsOf(t, sw.Stats()).RxDrops[drop.OtherHost] == 1
			})
			// The kernel's offloads are on, as Flannel leaves them: over the
			// veth, its TCP segments arrive as whole GSO datagrams.
			if v := vxlanStatsOf(t, stop()); v.RxPackets < 100 || v.RxGSO == 0 {
				t.Errorf("routed port: %+v", v)
			}
		})
	}
}

// flannelPeer are the commands that make host h the kernel peer of
// startRoutedSwitch's host 0 as Flannel's VXLAN backend configures a
// node (its IPv6 backend, flannel-v6.VNI, over an IPv6 underlay): the
// device without learning on the underlay address, the VTEP MAC, the
// first address of each of the node's prefixes on it (/32 and /128), an
// onlink route to each of the other node's prefixes through its first
// address, a permanent neighbour entry giving that address the other
// VTEP's MAC and an fdb entry giving that MAC the other node's underlay
// address; then forwarding. Each family's guests cross the one device.
func flannelPeer(h, peer overlayHost, port int, vxlanOpts ...string) [][]string {
	return [][]string{
		append([]string{"ip", "link", "add", "vx0", "type", "vxlan", "id", "42", "dstport", fmt.Sprint(port), "local", h.addr.String(), "dev", h.dev, "nolearning"}, vxlanOpts...),
		{"ip", "link", "set", "vx0", "address", vtepMAC[1]},
		{"ip", "addr", "add", "198.18.22.0/32", "dev", "vx0"},
		{"ip", "addr", "add", "2001:db8:22::/128", "dev", "vx0", "nodad"},
		{"ip", "link", "set", "vx0", "up"},
		{"ip", "route", "add", l3net4[0], "via", "198.18.21.0", "dev", "vx0", "onlink"},
		{"ip", "route", "add", l3net6[0], "via", "2001:db8:21::", "dev", "vx0", "onlink"},
		{"ip", "neigh", "add", "198.18.21.0", "lladdr", vtepMAC[0], "dev", "vx0", "nud", "permanent"},
		{"ip", "neigh", "add", "2001:db8:21::", "lladdr", vtepMAC[0], "dev", "vx0", "nud", "permanent"},
		{"bridge", "fdb", "append", vtepMAC[0], "dev", "vx0", "dst", peer.addr.String()},
		{"sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"},
	}
}

// routedKernelPeer makes host hb a kernel VTEP configured as Flannel
// configures one (flannelPeer, with vxlanOpts added to its device),
// routing for guest g (on host 1's prefixes) toward host ha's softnet
// VTEP.
func routedKernelPeer(t *testing.T, hb, ha overlayHost, g *guest, port int, vxlanOpts ...string) {
	t.Helper()
	netnstest.RequireTools(t, "sysctl")
	for _, args := range flannelPeer(hb, ha, port, vxlanOpts...) {
		mustExec(t, hb.ns, args...)
	}
	mustExec(t, hb.ns, "ip", "link", "add", "gb", "type", "veth", "peer", "name", g.dev, "netns", g.ns.Name)
	mustExec(t, hb.ns, "ip", "addr", "add", "198.18.22.1/24", "dev", "gb")
	mustExec(t, hb.ns, "ip", "addr", "add", "2001:db8:22::1/64", "dev", "gb", "nodad")
	mustExec(t, hb.ns, "ip", "link", "set", "gb", "up")
	mustExec(t, g.ns, "ip", "link", "set", g.dev, "up")
	g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(g.v4+"/24"))
	g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(g.v6+"/64"))
	mustExec(t, g.ns, "ip", "route", "add", "default", "via", "198.18.22.1")
	mustExec(t, g.ns, "ip", "-6", "route", "add", "default", "via", "2001:db8:22::1")
}

// bulkSize is the bulk overlay transfers': enough for thousands of
// UDP_SEGMENT sends and coalesced receives, a few seconds over a veth.
const bulkSize = 256 << 20

// A 256 MiB TCP transfer between guests on two hosts arrives intact
// (SHA-256; the receiving guest's TCP drops a segment whose inner
// checksum is wrong, so corruption would stall it or show in the sum),
// bridged (L2) and routed (L3), softnet to softnet and softnet to the
// kernel's vxlan (and 64 MiB back), with the guests' offloads on (TSO packets
// segmented in software, segments coalesced again for the guest) and
// off. The sending port sends runs of one flow's equal datagrams with
// UDP_SEGMENT, and the receiving port gets them coalesced by UDP_GRO:
// from a softnet peer always, from a kernel peer when it segments
// itself (offloads off; with them on, its TSO packets arrive whole over
// the veth), the underlay device does GRO and the peer sends outer UDP
// checksums (the kernel's GRO leaves datagrams without alone, and
// noudpcsum is its vxlan's default over IPv4).
func TestVXLANBulk(t *testing.T) {
	netnstest.RequireTools(t, "ping", "ethtool")
	for _, tc := range []struct {
		name                 string
		l3, kernel, offloads bool
	}{
		{"l2,softnet,offloads", false, false, true},
		{"l2,softnet,no-offloads", false, false, false},
		{"l2,kernel,offloads", false, true, true},
		{"l2,kernel,no-offloads", false, true, false},
		{"l3,softnet,offloads", true, false, true},
		{"l3,softnet,no-offloads", true, false, false},
		{"l3,kernel,offloads", true, true, true},
		{"l3,kernel,no-offloads", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ha, hb := newUnderlay(t, false)
			opts := ""
			if !tc.offloads {
				opts = ",offload=off"
			}
			var gs []*guest
			var stopA, stopB func() *Report
			switch {
			case tc.l3:
				gs = routedGuests(t)
				_, stopA = startRoutedSwitchOpts(t, 0, gs[0], opts, ha, hb, "")
				if tc.kernel {
					routedKernelPeer(t, hb, ha, gs[1], vxlan.DefaultPort, "udpcsum")
					if !tc.offloads {
						mustExec(t, hb.ns, "ethtool", "-K", "vx0", "tso", "off", "tx", "off")
					}
				} else {
					_, stopB = startRoutedSwitchOpts(t, 1, gs[1], opts, hb, ha, "")
				}
			default:
				gs = overlayGuests(t)
				sw, err := openOverlaySwitchOpts(gs[0], opts, ha, hb)
				if err != nil {
					t.Fatal(err)
				}
				stopA = runSwitch(t, sw, nil)
				gs[0].addAddrs(t)
				if tc.kernel {
					kernelPeer(t, hb, ha, gs[1], tc.offloads, tc.offloads, "udpcsum")
				} else {
					sw, err := openOverlaySwitchOpts(gs[1], opts, hb, ha)
					if err != nil {
						t.Fatal(err)
					}
					stopB = runSwitch(t, sw, nil)
					gs[1].addAddrs(t)
				}
			}
			if tc.kernel {
				// NAPI GRO on the veth, as a NIC's: the kernel peer's
				// datagrams of a flow reach the port's socket coalesced.
				// A veth passes its GRO by while the sending end has TSO
				// on, which only the peer's own TSO packets need.
				mustExec(t, ha.ns, "ethtool", "-K", ha.dev, "gro", "on")
				if !tc.offloads {
					mustExec(t, hb.ns, "ethtool", "-K", hb.dev, "tso", "off")
				}
			}
			ping(t, gs[0], gs[1].v4)
			transfer(t, gs[0], gs[1], gs[1].v4, 5005, bulkSize)
			if tc.kernel {
				// And back, for the port's receive side: a quarter, as
				// the test's time is the suite's.
				transfer(t, gs[1], gs[0], gs[0].v4, 5006, bulkSize/4)
			}
			va := vxlanStatsOf(t, stopA())
			t.Logf("softnet host: sent %d datagrams in %d calls (%d UDP_SEGMENT sends), received %d frames in %d calls (%d coalesced datagrams, %d whole GSO)",
				va.TxPackets, va.TxCalls, va.TxGSOSends, va.RxPackets, va.RxCalls, va.RxGROBatches, va.RxGSO)
			if va.TxGSOSends < 1000 {
				t.Errorf("%d UDP_SEGMENT sends for 256 MiB: %+v", va.TxGSOSends, va)
			}
			// The guest's TSO packets to the learned station (or the
			// route) left without their payloads copied (vnet.Split).
			if tc.offloads && (va.Segmented < 100 || va.SegmentedCopied > va.Segmented/100) {
				t.Errorf("%d of %d TSO packets copied into segments", va.SegmentedCopied, va.Segmented)
			}
			if va.RxDrops.Total() != 0 {
				t.Errorf("good traffic dropped on receive: %v", va.RxDrops)
			}
			switch {
			case !tc.kernel:
				rb := stopB()
				vb := vxlanStatsOf(t, rb)
				if vb.RxGROBatches < 1000 || vb.RxDrops.Total() != 0 {
					t.Errorf("receiving softnet host: %d coalesced datagrams for 256 MiB, drops %v", vb.RxGROBatches, vb.RxDrops)
				}
				// The split datagrams' TCP segments, coalesced once more
				// for a guest that takes GSO packets.
				for _, d := range rb.Devices {
					if d.Port == gs[1].dev && tc.offloads && d.Coalesced < 100 {
						t.Errorf("the receiving guest's port built %d GSO packets", d.Coalesced)
					}
				}
			case tc.offloads:
				if va.RxGSO == 0 {
					t.Errorf("the kernel peer's TSO packets did not arrive whole: %+v", va)
				}
			default:
				if va.RxGROBatches < 100 {
					t.Errorf("%d coalesced datagrams from the kernel peer for 64 MiB: %+v", va.RxGROBatches, va)
				}
			}
		})
	}
}

// Over an underlay device without transmit checksum offload, the
// kernel computes the outer UDP checksum of each datagram of a
// UDP_SEGMENT send itself (older kernels refuse such sends, and the
// port then sends the datagrams one by one); the far kernel verifies
// them, and the transfer arrives whole.
func TestVXLANUnderlayWithoutChecksumOffload(t *testing.T) {
	netnstest.RequireTools(t, "ping", "ethtool")
	ha, hb := newUnderlay(t, false)
	mustExec(t, ha.ns, "ethtool", "-K", ha.dev, "tx", "off")
	gs := overlayGuests(t)
	_, stopA := startOverlaySwitch(t, gs[0], ha, hb)
	_, stopB := startOverlaySwitch(t, gs[1], hb, ha)
	ping(t, gs[0], gs[1].v4)
	transfer(t, gs[0], gs[1], gs[1].v4, 5005, 16<<20)
	va, vb := vxlanStatsOf(t, stopA()), vxlanStatsOf(t, stopB())
	t.Logf("without checksum offload: %d UDP_SEGMENT sends; the peer received %d coalesced datagrams", va.TxGSOSends, vb.RxGROBatches)
	if va.TxDrops.Total() != 0 || vb.RxDrops.Total() != 0 {
		t.Errorf("datagrams dropped: sending %v, receiving %v", va.TxDrops, vb.RxDrops)
	}
}
