package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"
)

// The overlay measurement (Options.Overlay, `softnet lab --overlay`):
// two hosts, each a namespace, joined by a veth pair (the underlay), each
// with a guest namespace behind it; iperf3 from the guest on host A to
// the guest on host B, across the hosts through VXLAN. Three
// configurations, each measured on namespaces of its own: both hosts run
// a `softnet switch` process; host A runs softnet and host B the
// kernel's vxlan device; both run the kernel's vxlan (the reference).
// Bridged (l2: TAP guests and a bridge, kernel guests behind a bridge
// with the vxlan device) or routed (l3: TUN guests and the L3
// forwarder, kernel hosts configured as Flannel's VXLAN backend
// configures them).

// OverlayKind is the overlay's kind: bridged or routed.
type OverlayKind string

const (
	OverlayL2 OverlayKind = "l2" // TAP guests, bridged; flood and learn
	OverlayL3 OverlayKind = "l3" // TUN guests, routed VTEP to VTEP, as Flannel
)

// ParseOverlay turns --overlay's value into the kinds to measure: l2,
// l3 or both.
func ParseOverlay(s string) ([]OverlayKind, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "l2":
		return []OverlayKind{OverlayL2}, nil
	case "l3":
		return []OverlayKind{OverlayL3}, nil
	case "both":
		return []OverlayKind{OverlayL2, OverlayL3}, nil
	}
	return nil, fmt.Errorf("overlay %q: want l2, l3 or both", s)
}

// Names of the overlay's configurations: host A's side, then host B's.
const (
	OverlaySoftnet = "softnet-softnet"
	OverlayMixed   = "softnet-kernel"
	OverlayKernel  = "kernel-kernel" // the reference
)

// overlayConfig is one configuration: which hosts run softnet.
type overlayConfig struct {
	name    string
	softnet [2]bool
}

var overlayConfigs = []overlayConfig{
	{OverlaySoftnet, [2]bool{true, true}},
	{OverlayMixed, [2]bool{true, false}},
	{OverlayKernel, [2]bool{false, false}},
}

// The overlay's constants, those of the root tests and docs/design.md.
const (
	overlayVNI     = 42
	overlayPort    = 4789 // the IANA port; the kernel's devices are given dstport 4789
	underlayMTU    = 1500 // the veth pair's, as a datacenter's Ethernet
	switchMetrics  = "127.0.0.1:9477"
	switchReady    = 15 * time.Second // for a switch process to answer its API
	switchStopWait = 10 * time.Second // for it to exit after SIGTERM
	pathWait       = 15 * time.Second // for the first ping across the overlay
)

// encapsulation is what VXLAN adds to a guest's packet: outer IP, UDP,
// VXLAN and the inner Ethernet header.
func encapsulation(ipv6 bool) int {
	if ipv6 {
		return 70
	}
	return 50
}

// innerMTU is the guests' MTU: the underlay's less the encapsulation, as
// docs/design.md tells operators.
func innerMTU(underlayIPv6 bool) int { return underlayMTU - encapsulation(underlayIPv6) }

// overlayPayload is the UDP payload of a full-sized datagram of the
// guests' traffic: one packet of the guests' MTU, not two fragments.
func overlayPayload(m Mode, o Options) int {
	if m == UDP64 {
		return SmallUDP
	}
	hdr := 28 // IPv4 and UDP
	if o.IPv6 {
		hdr = 48
	}
	return innerMTU(o.UnderlayIPv6) - hdr
}

// overlayHost is one host of a configuration.
type overlayHost struct {
	ns       string
	underlay string     // its end of the veth pair
	addr     netip.Addr // the underlay address
	vtepMAC  string     // l3: the VTEP's MAC
	guest    *guest
	// l3: the prefixes of the host's guests, and its VTEP's addresses on
	// the kernel's device (the prefixes' first, as Flannel gives them).
	net4, net6   netip.Prefix
	vtep4, vtep6 netip.Addr
	gw4, gw6     netip.Addr // l3 kernel hosts: the guest's gateway on the host's veth
	sw           *switchProc
}

// overlayNet is one configuration's two hosts and guests.
type overlayNet struct {
	kind         OverlayKind
	underlayIPv6 bool
	mtu          int
	hosts        [2]*overlayHost
}

func (n *overlayNet) pair() *guestPair { return &guestPair{a: n.hosts[0].guest, b: n.hosts[1].guest} }

// newOverlayNet plans configuration number index's namespaces, devices
// and addresses: host i has 198.18.100.i+1 (2001:db8:100::i+1) on the
// underlay; the guests share 198.18.9.0/24 and 2001:db8:9::/64 on l2,
// and on l3 guest i is .2 of host i's 198.18.i+1.0/24 and
// 2001:db8:i+1::/64.
func newOverlayNet(runID string, index int, kind OverlayKind, underlayIPv6 bool) *overlayNet {
	n := &overlayNet{kind: kind, underlayIPv6: underlayIPv6, mtu: innerMTU(underlayIPv6)}
	for i, side := range []byte{'a', 'b'} {
		h := &overlayHost{
			ns:       nsName(runID, index, side+'x'-'a'), // x, y
			underlay: fmt.Sprintf("lab-u%c", side),
			addr:     netip.AddrFrom4([4]byte{198, 18, 100, byte(i + 1)}),
			vtepMAC:  fmt.Sprintf("02:00:00:00:42:%02x", i+1),
			guest:    &guest{ns: nsName(runID, index, side), dev: fmt.Sprintf("lab-%c", side)},
		}
		if underlayIPv6 {
			h.addr = netip.MustParseAddr(fmt.Sprintf("2001:db8:100::%d", i+1))
		}
		g := h.guest
		if kind == OverlayL2 {
			g.v4 = netip.MustParsePrefix(fmt.Sprintf("198.18.9.%d/24", i+1))
			g.v6 = netip.MustParsePrefix(fmt.Sprintf("2001:db8:9::%d/64", i+1))
		} else {
			h.net4 = netip.MustParsePrefix(fmt.Sprintf("198.18.%d.0/24", i+1))
			h.net6 = netip.MustParsePrefix(fmt.Sprintf("2001:db8:%d::/64", i+1))
			h.vtep4, h.vtep6 = h.net4.Addr(), h.net6.Addr()
			h.gw4, h.gw6 = h.vtep4.Next(), h.vtep6.Next()
			g.v4 = netip.PrefixFrom(h.gw4.Next(), 24)
			g.v6 = netip.PrefixFrom(h.gw6.Next(), 64)
		}
		n.hosts[i] = h
	}
	return n
}

func (n *overlayNet) peer(h *overlayHost) *overlayHost {
	if h == n.hosts[0] {
		return n.hosts[1]
	}
	return n.hosts[0]
}

func (n *overlayNet) namespaces() []string {
	var out []string
	for _, h := range n.hosts {
		out = append(out, h.guest.ns, h.ns)
	}
	return out
}

// build creates the namespaces, the underlay, and each host's side of
// configuration c (a softnet switch process, or the kernel's devices),
// registering their removal.
func (n *overlayNet) build(ctx context.Context, o Options, c overlayConfig, u *undoStack) error {
	for _, ns := range n.namespaces() {
		if err := addNamespace(ns); err != nil {
			return err
		}
		u.push("namespace "+ns, func() error { return deleteNamespace(ns) })
	}
	a, b := n.hosts[0], n.hosts[1]
	if err := ip("-n", a.ns, "link", "add", a.underlay, "mtu", fmt.Sprint(underlayMTU), "type", "veth",
		"peer", "name", b.underlay, "mtu", fmt.Sprint(underlayMTU), "netns", b.ns); err != nil {
		return err
	}
	bits := 24
	if n.underlayIPv6 {
		bits = 64
	}
	for _, h := range n.hosts {
		if err := ipBatch(h.ns, []string{
			fmt.Sprintf("addr add %s dev %s nodad", netip.PrefixFrom(h.addr, bits), h.underlay),
			fmt.Sprintf("link set %s up", h.underlay),
		}); err != nil {
			return err
		}
	}
	for i, h := range n.hosts {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var err error
		if c.softnet[i] {
			err = n.startSoftnet(ctx, o, h, u)
		} else {
			err = n.kernelHost(h)
		}
		if err != nil {
			return fmt.Errorf("host %s: %w", h.ns, err)
		}
	}
	return nil
}

// softnetArgs are `softnet switch`'s ports and routes for host h: the
// guest's TAP (l2) or TUN (l3) port and a VXLAN port to the peer.
func (n *overlayNet) softnetArgs(h *overlayHost) []string {
	p, g := n.peer(h), h.guest
	vx := fmt.Sprintf("vxlan:vx,vni=%d,local=%s,remote=%s,port=%d,netns=%s", overlayVNI, h.addr, p.addr, overlayPort, h.ns)
	if n.kind == OverlayL2 {
		return []string{"--port", fmt.Sprintf("tap:%s,netns=%s", g.dev, g.ns), "--port", vx}
	}
	vx += fmt.Sprintf(",mode=l3,vtep-mac=%s,fdb=%s@%s", h.vtepMAC, p.vtepMAC, p.addr)
	return []string{
		"--port", fmt.Sprintf("tun:%s,netns=%s", g.dev, g.ns), "--port", vx,
		"--route", fmt.Sprintf("%s=%s", h.net4, g.dev), "--route", fmt.Sprintf("%s=%s", h.net6, g.dev),
		"--route", fmt.Sprintf("%s=vx,via=%s", p.net4, p.addr), "--route", fmt.Sprintf("%s=vx,via=%s", p.net6, p.addr),
	}
}

// startSoftnet runs host h's switch and configures its guest's device,
// which the switch created, with the overlay's MTU.
func (n *overlayNet) startSoftnet(ctx context.Context, o Options, h *overlayHost, u *undoStack) error {
	sw, err := startSwitchProc(ctx, o.SoftnetBinary, h.ns, n.softnetArgs(h))
	if err != nil {
		return err
	}
	h.sw = sw
	u.push("switch in "+h.ns, func() error { return sw.stop() })
	g := h.guest
	cmds := []string{
		fmt.Sprintf("addr add %s dev %s", g.v4, g.dev),
		fmt.Sprintf("addr add %s dev %s nodad", g.v6, g.dev),
		fmt.Sprintf("link set %s mtu %d up", g.dev, n.mtu),
	}
	if n.kind == OverlayL3 {
		p := n.peer(h)
		cmds = append(cmds, fmt.Sprintf("route add %s dev %s", p.net4, g.dev), fmt.Sprintf("route add %s dev %s", p.net6, g.dev))
	}
	return ipBatch(g.ns, cmds)
}

// kernelHost makes host h a kernel VTEP: a vxlan device bridged with a
// veth to the guest (l2), or routed as Flannel's VXLAN backend does it
// (l3): the commands docs/design.md gives for a kernel peer.
func (n *overlayNet) kernelHost(h *overlayHost) error {
	p, g := n.peer(h), h.guest
	vx := fmt.Sprintf("link add lab-vx type vxlan id %d dstport %d local %s dev %s", overlayVNI, overlayPort, h.addr, h.underlay)
	veth := fmt.Sprintf("link add lab-g type veth peer name %s netns %s", g.dev, g.ns)
	var cmds []string
	guestCmds := []string{
		fmt.Sprintf("addr add %s dev %s", g.v4, g.dev),
		fmt.Sprintf("addr add %s dev %s nodad", g.v6, g.dev),
		fmt.Sprintf("link set %s mtu %d up", g.dev, n.mtu),
	}
	if n.kind == OverlayL2 {
		cmds = []string{
			vx + " remote " + p.addr.String(),
			"link add lab-br type bridge",
			veth,
			"link set lab-vx master lab-br",
			fmt.Sprintf("link set lab-g mtu %d master lab-br", n.mtu),
			"link set lab-vx up", "link set lab-g up", "link set lab-br up",
		}
	} else {
		cmds = []string{
			vx + " nolearning",
			"link set lab-vx address " + h.vtepMAC,
			fmt.Sprintf("addr add %s dev lab-vx", netip.PrefixFrom(h.vtep4, 32)),
			fmt.Sprintf("addr add %s dev lab-vx nodad", netip.PrefixFrom(h.vtep6, 128)),
			"link set lab-vx up",
			fmt.Sprintf("route add %s via %s dev lab-vx onlink", p.net4, p.vtep4),
			fmt.Sprintf("route add %s via %s dev lab-vx onlink", p.net6, p.vtep6),
			fmt.Sprintf("neigh add %s lladdr %s dev lab-vx nud permanent", p.vtep4, p.vtepMAC),
			fmt.Sprintf("neigh add %s lladdr %s dev lab-vx nud permanent", p.vtep6, p.vtepMAC),
			veth,
			fmt.Sprintf("addr add %s dev lab-g", netip.PrefixFrom(h.gw4, 24)),
			fmt.Sprintf("addr add %s dev lab-g nodad", netip.PrefixFrom(h.gw6, 64)),
			fmt.Sprintf("link set lab-g mtu %d up", n.mtu),
		}
		guestCmds = append(guestCmds,
			fmt.Sprintf("route add %s via %s", p.net4, h.gw4),
			fmt.Sprintf("route add %s via %s", p.net6, h.gw6))
	}
	if err := ipBatch(h.ns, cmds); err != nil {
		return err
	}
	if n.kind == OverlayL3 {
		if err := ip("netns", "exec", h.ns, "bridge", "fdb", "append", p.vtepMAC, "dev", "lab-vx", "dst", p.addr.String()); err != nil {
			return err
		}
		if err := ip("netns", "exec", h.ns, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"); err != nil {
			return err
		}
	}
	return ipBatch(g.ns, guestCmds)
}

// waitPath pings the far guest from the near one, over the traffic's
// family, until it answers: ARP or neighbour discovery has crossed (l2)
// and the switches forward.
func (n *overlayNet) waitPath(ctx context.Context, ipv6 bool) error {
	a, b := n.hosts[0].guest, n.hosts[1].guest
	deadline := time.Now().Add(pathWait)
	for {
		err := ip("netns", "exec", a.ns, "ping", "-c", "1", "-W", "1", b.addr(ipv6).String())
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no path across the overlay from %s to %s: %w", a.ns, b.ns, err)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// runOverlay measures every configuration of every kind asked for,
// o.Runs times interleaved (the configurations' order rotated each
// round); it fills rep.Overlay as it goes.
func runOverlay(ctx context.Context, o Options, gen generator, rep *Report) error {
	if o.SoftnetBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("the softnet binary to run as the hosts' switch: %w", err)
		}
		o.SoftnetBinary = exe
	}
	runID := newRunID()
	var errs []error
	index := 0
	for _, kind := range o.Overlay {
		or := &OverlayResult{Kind: kind, UnderlayIPv6: o.UnderlayIPv6, UnderlayMTU: underlayMTU, InnerMTU: innerMTU(o.UnderlayIPv6)}
		rep.Overlay = append(rep.Overlay, or)
		runs := make([][]VariantResult, len(overlayConfigs))
		step, steps := 0, o.Runs*len(overlayConfigs)
	rounds:
		for round := range o.Runs {
			for _, i := range rotation(len(overlayConfigs), round) {
				if ctx.Err() != nil {
					break rounds
				}
				c := overlayConfigs[i]
				step++
				label := fmt.Sprintf("[%s %d/%d] %s", kind, step, steps, c.name)
				o.Progress(label)
				var vr *VariantResult
				var err error
				pprof.Do(ctx, pprof.Labels("overlay", string(kind)+" "+c.name), func(ctx context.Context) {
					vr, err = runOverlayConfig(ctx, o, gen, runID, index, kind, c, rep)
				})
				index++
				if vr != nil {
					runs[i] = append(runs[i], *vr)
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("%s %s: %w", kind, c.name, err))
					o.Progress(fmt.Sprintf("%s failed: %v", label, err))
				}
			}
		}
		for i := range overlayConfigs {
			if len(runs[i]) > 0 {
				or.Configs = append(or.Configs, aggregateVariant(runs[i], o.Modes))
			}
		}
		or.setRatios(o.Modes)
	}
	return errors.Join(errs...)
}

// runOverlayConfig builds configuration c on namespaces of its own,
// runs every mode across it and takes it down again.
func runOverlayConfig(ctx context.Context, o Options, gen generator, runID string, index int, kind OverlayKind, c overlayConfig, rep *Report) (vr *VariantResult, err error) {
	u := &undoStack{}
	defer func() {
		if uerr := u.unwind(); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	n := newOverlayNet(runID, index, kind, o.UnderlayIPv6)
	rep.Namespaces = append(rep.Namespaces, n.namespaces()...)
	vr = &VariantResult{Variant: Variant{Name: c.name}}
	var sws []*switchProc
	stopped := false
	stopSwitches := func() error {
		if stopped {
			return nil
		}
		stopped = true
		var errs []error
		var leaks []string
		for _, sw := range sws {
			errs = append(errs, sw.stop())
			leaks = append(leaks, sw.leak)
		}
		if len(sws) > 0 {
			vr.Leak = "ok"
			for _, l := range leaks {
				if l != "ok" {
					vr.Leak = strings.Join(leaks, "; ")
					errs = append(errs, fmt.Errorf("leak check: %s", vr.Leak))
					break
				}
			}
		}
		return errors.Join(errs...)
	}
	if err := n.build(ctx, o, c, u); err != nil {
		return vr, err
	}
	for _, h := range n.hosts {
		if h.sw != nil {
			sws = append(sws, h.sw)
		}
	}
	u.push("switches", stopSwitches)
	if err := n.waitPath(ctx, o.IPv6); err != nil {
		return vr, err
	}
	pair := n.pair()
	gc, err := openGuestCounters(pair)
	if err != nil {
		return vr, err
	}
	u.push("netlink sockets", func() error { gc.close(); return nil })
	for _, m := range o.Modes {
		res, err := runOverlayMode(ctx, o, gen, pair, switchedPath{sws: sws, count: vxlanCounts}, gc, c.name, m, overlayPayload(m, o))
		if err != nil {
			return vr, fmt.Errorf("%s: %w", m, err)
		}
		vr.Results = append(vr.Results, res)
	}
	// Now rather than at unwind: the leak checks belong to the result.
	return vr, stopSwitches()
}

// overlaySample is one reading of a configuration's switches.
type overlaySample struct {
	at                   time.Time
	cpu                  time.Duration // the switch processes' CPU time
	packets, calls       uint64        // their measured ports' packets and system calls, both ways
	mallocs, scrapeCosts uint64        // their heaps' allocations; what reading them allocates
	ok                   bool
}

// switchedPath is what a configuration's switches are, as a transfer's
// window reads them: softnet switch processes, whose count gives the
// packets and system calls of the ports measured (their vxlan ports,
// their afxdp ports), or other processes (Open vSwitch) of which only
// the CPU time is read.
type switchedPath struct {
	sws   []*switchProc
	count func(*switchProc) (packets, calls uint64, err error)
	pids  []int
}

// vxlanCounts are a switch's vxlan port's datagrams and system calls.
func vxlanCounts(sw *switchProc) (packets, calls uint64, err error) {
	v, err := sw.vxlanStats()
	return v.RxPackets + v.TxPackets, v.RxCalls + v.TxCalls, err
}

// sampleSwitches reads every switch; at the start of a window the
// allocation counters are read last and at its end first, so that the
// lab's API requests stay outside the window (but for one scrape, which
// scrapeCosts estimates).
func sampleSwitches(path switchedPath, start bool) overlaySample {
	sws := path.sws
	s := overlaySample{at: time.Now(), ok: len(sws) > 0 || len(path.pids) > 0}
	var errs []error
	readMallocs := func() {
		for _, sw := range sws {
			m, cost, err := sw.mallocs(start)
			errs = append(errs, err)
			s.mallocs += m
			s.scrapeCosts += cost
		}
	}
	if !start {
		readMallocs()
	}
	for _, sw := range sws {
		cpu, err := sw.cpu()
		errs = append(errs, err)
		s.cpu += cpu
		if path.count != nil {
			packets, calls, err := path.count(sw)
			errs = append(errs, err)
			s.packets += packets
			s.calls += calls
		}
	}
	for _, pid := range path.pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err == nil {
			var cpu time.Duration
			cpu, err = parseStatCPU(b)
			s.cpu += cpu
		}
		errs = append(errs, err)
	}
	if start {
		readMallocs()
	}
	if errors.Join(errs...) != nil {
		s.ok = false
	}
	return s
}

// runOverlayMode runs one transfer from guest a to guest b and measures
// it: the receiver's figures for every configuration, and for the
// softnet hosts their switches' CPU time, system calls and allocations
// per packet over the window.
func runOverlayMode(ctx context.Context, o Options, gen generator, pair *guestPair, sws switchedPath, gc *guestCounters, name string, m Mode, payload int) (Result, error) {
	res := Result{Mode: m, Variant: name}
	o.Progress(fmt.Sprintf("      %s: %s for %v", name, m, o.Duration))
	t := newTransfer(m, o.Duration, o.IPv6)
	if payload > 0 {
		t.payload = payload
	}
	g0 := gc.sample()
	fl, err := gen.start(ctx, pair, t)
	if err != nil {
		return res, err
	}
	var w0, w1 overlaySample
	var gw0, gw1 guestSample
	measured := window(ctx, o.Duration, func() {
		gw0 = gc.sample()
		w0 = sampleSwitches(sws, true)
	}, func() {
		w1 = sampleSwitches(sws, false)
		gw1 = gc.sample()
	})
	fr, err := fl.wait(ctx)
	if err != nil {
		return res, err
	}
	if !measured {
		return res, ctx.Err()
	}
	g1 := gc.sample()
	res.Gbps, res.Duration = fr.bitsPerSecond/1e9, fr.seconds
	switch {
	case m.kind() == kindUDP && fr.seconds > 0:
		res.PPS = float64(fr.packets) / fr.seconds
	case m.kind() == kindTCP && g0.ok && g1.ok && fr.seconds > 0:
		res.PPS = float64(g1.rxB-g0.rxB) / fr.seconds
	}
	if g0.ok && g1.ok {
		res.SenderDevDrops = ptr(g1.txDroppedA - g0.txDroppedA)
		res.ReceiverSocketDrops = ptr(g1.rcvbufB - g0.rcvbufB)
	}
	if fr.hasLoss {
		res.LossPct = ptr(fr.lossPct)
	}
	if fr.hasRetransmits {
		res.Retransmits = ptr(fr.retransmits)
	}
	if m.kind() == kindUDP {
		lostWhere(&res)
	}
	window := w1.at.Sub(w0.at).Seconds()
	datagrams := float64(0)
	if m.kind() == kindUDP && gw0.ok && gw1.ok && window > 0 {
		datagrams = float64(gw1.reachedB - gw0.reachedB)
		res.ForwardedPPS = ptr(datagrams / window)
	}
	if w0.ok && w1.ok && window > 0 {
		cpu := (w1.cpu - w0.cpu).Seconds()
		if gbit := res.Gbps * window; gbit > 0 {
			res.CPUPerGbit = ptr(cpu / gbit)
		}
		if datagrams > 0 {
			res.CPUPerPacketUS = ptr(cpu / datagrams * 1e6)
		}
		if n := w1.packets - w0.packets; n > 0 {
			res.SyscallsPerPacket = ptr(float64(w1.calls-w0.calls) / float64(n))
			allocs := float64(w1.mallocs-w0.mallocs) - float64(w0.scrapeCosts)
			res.AllocsPerPacket = ptr(max(0, allocs) / float64(n))
			res.Forwarded = ptr(n)
		}
	}
	o.Progress(fmt.Sprintf("      %s: %s %.2f Gbit/s, %.0f kpps", name, m, res.Gbps, res.PPS/1e3))
	return res, nil
}

// overlayDir holds a switch process's socket, statistics and log.
func overlayDir() (string, error) {
	return os.MkdirTemp("", "softnet-lab-switch-")
}

// switchFiles are the files of a switch process in its directory.
func switchFiles(dir string) (socket, stats, out string) {
	return filepath.Join(dir, "control.sock"), filepath.Join(dir, "stats.json"), filepath.Join(dir, "switch.log")
}
