package lab

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"softnet.dev/tun"
)

func TestValidate(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero options: %v", err)
	}
	for _, o := range []Options{
		{Duration: 1500 * time.Millisecond},
		{Duration: 500 * time.Millisecond},
		{Duration: 2 * time.Hour},
		{Modes: []Mode{"sctp"}},
		{Modes: []Mode{UDP, UDP}},
		{Traffic: "netperf"},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

func TestVariants(t *testing.T) {
	names := func(o Options) []string {
		var out []string
		for _, v := range Variants(o) {
			out = append(out, v.Name)
		}
		return out
	}
	if got := names(Options{Peers: true}); !slices.Equal(got, []string{KernelVeth, WireguardGo, SoftnetTUN, Softnet}) {
		t.Errorf("default variants %v", got)
	}
	// wireguard-go's tun package has no TAP devices.
	if got := names(Options{Peers: true, TAP: true}); !slices.Equal(got, []string{KernelVeth, SoftnetTUN, Softnet}) {
		t.Errorf("TAP variants %v", got)
	}
	want := []string{KernelVeth, WireguardGo, SoftnetTUN, "no-cache/batch-1", "napi-cache", "+bulk", "+gro", "uring", "+busy-poll", "2-workers", "+defer", "offload-off", OffloadOn}
	if got := names(Options{Peers: true, Ladder: true}); !slices.Equal(got, want) {
		t.Errorf("ladder %v", got)
	}
	// The ladder adds one thing at a time.
	vs := Variants(Options{Ladder: true})
	c := func(name string) softnetConfig {
		for _, v := range vs {
			if v.Name == name {
				return v.softnet
			}
		}
		t.Fatalf("no %s", name)
		return softnetConfig{}
	}
	if nc := c("no-cache/batch-1"); !nc.Uncached || nc.Batch != 1 || !nc.Offload || !nc.SingleGets {
		t.Errorf("no-cache/batch-1: %+v", nc)
	}
	if g := c("+gro"); g.IO != tun.IOSyscall || !g.GRO || c("uring").IO != tun.IOUring || c("uring").BusyPoll >= 0 {
		t.Errorf("+gro %+v, uring %+v", g, c("uring"))
	}
	if b, w := c("+busy-poll"), c("2-workers"); b.BusyPoll == 0 || b.Workers > 1 || w.Workers != 2 || w.IO != b.IO || w.BusyPoll != b.BusyPoll {
		t.Errorf("+busy-poll %+v, 2-workers %+v", b, w)
	}
	if c(OffloadOn) != defaultSoftnet || c("+bulk").GRO || !c("+defer").DeferTX || !c("napi-cache").SingleGets || c("+bulk").SingleGets || !c("+defer").GRO || c("offload-off").Offload || c("offload-off").GRO {
		t.Errorf("ladder steps: %+v", vs)
	}
	if reference(Options{Ladder: true}) != OffloadOn || reference(Options{}) != Softnet {
		t.Error("reference variant")
	}
}

func TestUndoStack(t *testing.T) {
	var order []string
	u := &undoStack{}
	fail := errors.New("busy")
	u.push("first", func() error { order = append(order, "first"); return nil })
	u.push("second", func() error { order = append(order, "second"); return fail })
	u.push("third", func() error { order = append(order, "third"); return nil })
	err := u.unwind()
	if !slices.Equal(order, []string{"third", "second", "first"}) {
		t.Errorf("order %v", order)
	}
	if !errors.Is(err, fail) || err.Error() != "remove second: busy" {
		t.Errorf("error %v", err)
	}
	if err := u.unwind(); err != nil || len(order) != 3 {
		t.Errorf("second unwind ran steps again: %v %v", err, order)
	}
}

func TestValidatePorts(t *testing.T) {
	for _, o := range []Options{{Ports: MinPorts}, {Ports: MaxPorts, Workers: 2, IO: tun.IOSyscall, PortsIdle: time.Second, PortsChurn: 1}} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for _, o := range []Options{
		{Ports: MinPorts - 1},
		{Ports: MaxPorts + 1},
		{Ports: 8, Workers: -1},
		{Ports: 8, Workers: maxWorkers + 1},
		{Ports: 8, PortsIdle: 500 * time.Millisecond},
		{Ports: 8, PortsChurn: -1},
		{Ports: 8, Ladder: true},
		{Ports: 8, IO: tun.IOUring + 1},
		// What only --ports uses is an error without it.
		{Workers: 2},
		{IO: tun.IOSyscall},
		{PortsIdle: time.Second},
		{PortsChurn: 3},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// A vhost-user run is asked for alone, once.
func TestValidateVhost(t *testing.T) {
	if err := (Options{Vhost: true, Duration: time.Second}).Validate(); err != nil {
		t.Errorf("vhost: %v", err)
	}
	if err := (Options{Vhost: true, VhostBackends: []string{VhostOVS, VhostSoftnet}}).Validate(); err != nil {
		t.Errorf("vhost with two back-ends: %v", err)
	}
	for _, o := range []Options{{Vhost: true, Ports: 8}, {Vhost: true, Ladder: true}, {Vhost: true, Runs: 2},
		{Vhost: true, VhostBackends: []string{"vpp"}}, {Vhost: true, VhostBackends: []string{VhostDPDK, VhostDPDK}},
		{VhostBackends: []string{VhostOVS}}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

func TestValidateAFXDPMTU(t *testing.T) {
	for _, mtu := range []int{0, 1280, 9000} {
		if err := (Options{AFXDP: true, AFXDPMTU: mtu}).Validate(); err != nil {
			t.Errorf("afxdp, MTU %d: %v", mtu, err)
		}
	}
	for _, o := range []Options{{AFXDPMTU: 9000}, {AFXDP: true, AFXDPMTU: 1000}, {AFXDP: true, AFXDPMTU: 70000}, {AFXDP: true, AFXDPMTU: -1}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// Without Open vSwitch with DPDK (here: without its tools on PATH) a
// --vhost run skips that back-end, saying why and naming the package to
// install, unless it was asked for by name: then the run stops before it
// changes anything.
func TestVhostSkipsOVS(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var progress []string
	o := Options{Vhost: true, Progress: func(msg string) { progress = append(progress, msg) }}
	v := &VhostResult{}
	got, err := v.backends(o)
	if err != nil || !slices.Equal(got, []string{VhostSoftnet, VhostDPDK}) {
		t.Fatalf("back-ends %v, %v; want softnet and dpdk-vhost", got, err)
	}
	if len(v.Skipped) != 1 || !strings.Contains(v.Skipped[0], "Debian package openvswitch-switch-dpdk") ||
		len(progress) != 1 || !strings.Contains(progress[0], "openvswitch-switch-dpdk") {
		t.Errorf("skipped %q, progress %q: want the package named", v.Skipped, progress)
	}
	if !slices.Equal(VhostBackends, []string{VhostSoftnet, VhostDPDK, VhostOVS}) {
		t.Errorf("VhostBackends changed to %v", VhostBackends)
	}
	o.VhostBackends = []string{VhostSoftnet, VhostOVS}
	if got, err := (&VhostResult{}).backends(o); err == nil || !strings.Contains(err.Error(), "openvswitch-switch-dpdk") {
		t.Errorf("ovs-dpdk asked for by name: %v, %v", got, err)
	}
	o.VhostBackends = []string{VhostDPDK}
	if got, err := (&VhostResult{}).backends(o); err != nil || !slices.Equal(got, o.VhostBackends) {
		t.Errorf("dpdk-vhost alone: %v, %v", got, err)
	}
}

// Without DPDK a --vhost run stops before it changes anything, naming
// the package to install.
func TestVhostNeedsDPDK(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	rep := &Report{}
	err := runVhost(context.Background(), Options{Vhost: true}, nil, rep)
	if err == nil || !strings.Contains(err.Error(), "dpdk-dev") || rep.Vhost != nil {
		t.Fatalf("runVhost without testpmd: %v, report %+v", err, rep.Vhost)
	}
}

// Every guest of the largest run, and the churned one, has addresses of
// its own inside the test ranges, and its own port name.
func TestPortGuestAddresses(t *testing.T) {
	v4Range, v6Range := netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("2001:db8::/32")
	for _, tap := range []bool{false, true} {
		seen := map[netip.Addr]bool{}
		devs := map[string]bool{}
		for i := 1; i <= MaxPorts+1; i++ {
			g := portGuest("softnet-lab-1-abcdef", i, tap)
			for _, a := range []netip.Prefix{g.v4, g.v6} {
				if !v4Range.Contains(a.Addr()) && !v6Range.Contains(a.Addr()) {
					t.Fatalf("tap=%v guest %d: %v outside the test ranges", tap, i, a)
				}
				if seen[a.Addr()] {
					t.Fatalf("tap=%v guest %d: %v taken twice", tap, i, a)
				}
				seen[a.Addr()] = true
			}
			if a := g.v4.Addr(); a == g.v4.Masked().Addr() || a.As4()[3] == 255 && g.v4.Bits() == 24 {
				t.Fatalf("tap=%v guest %d: %v is its subnet's network or broadcast address", tap, i, g.v4)
			}
			if devs[g.dev] || len(g.dev) > 15 {
				t.Fatalf("tap=%v guest %d: device name %q taken or too long", tap, i, g.dev)
			}
			devs[g.dev] = true
			// On TAP every guest shares the first's subnet; on TUN each has its own.
			first := portGuest("x", 1, tap)
			if same := g.v4.Masked() == first.v4.Masked() && g.v6.Masked() == first.v6.Masked(); same != (tap || i == 1) {
				t.Fatalf("tap=%v guest %d: subnets %v %v against guest 1's %v %v", tap, i, g.v4, g.v6, first.v4, first.v6)
			}
		}
	}
}

func TestPercentile(t *testing.T) {
	vs := make([]float64, 20)
	for i := range vs {
		vs[i] = float64(20 - i) // 20 … 1
	}
	if p := percentile(vs, 0.5); p != 10 {
		t.Errorf("p50 of 1…20: %v, want 10", p)
	}
	if p := percentile(vs, 0.99); p != 20 {
		t.Errorf("p99 of 1…20: %v, want 20", p)
	}
	if p := percentile([]float64{3}, 0.99); p != 3 {
		t.Errorf("p99 of one: %v", p)
	}
}
