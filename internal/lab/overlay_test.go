package lab

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseOverlay(t *testing.T) {
	for in, want := range map[string][]OverlayKind{"l2": {OverlayL2}, " L3 ": {OverlayL3}, "both": {OverlayL2, OverlayL3}} {
		got, err := ParseOverlay(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseOverlay(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "l4", "l2,l3"} {
		if _, err := ParseOverlay(in); err == nil {
			t.Errorf("ParseOverlay(%q): no error", in)
		}
	}
}

func TestValidateOverlay(t *testing.T) {
	for _, o := range []Options{
		{Overlay: []OverlayKind{OverlayL2}},
		{Overlay: []OverlayKind{OverlayL2, OverlayL3}, UnderlayIPv6: true, SoftnetBinary: "/usr/bin/softnet", Modes: []Mode{UDP, UDP64, TCP, TCP4}},
	} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for _, o := range []Options{
		{Overlay: []OverlayKind{"l4"}},
		{Overlay: []OverlayKind{OverlayL3, OverlayL3}},
		{Overlay: []OverlayKind{OverlayL2}, Ports: 8},
		{Overlay: []OverlayKind{OverlayL2}, Ladder: true},
		{Overlay: []OverlayKind{OverlayL2}, TAP: true},
		{Overlay: []OverlayKind{OverlayL2}, Modes: []Mode{UDPGSO}},
		{Overlay: []OverlayKind{OverlayL2}, Modes: []Mode{LatencyTCP}},
		{Overlay: []OverlayKind{OverlayL2}, Modes: []Mode{PDR}},
		// What only --overlay uses is an error without it.
		{UnderlayIPv6: true},
		{SoftnetBinary: "/usr/bin/softnet"},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// The overlay's hosts and guests have addresses of their own in the test
// ranges, names that fit, and on l3 prefixes whose first address is the
// VTEP's, its second the gateway's and its third the guest's, as
// Flannel gives them; the softnet hosts' switch arguments name them.
func TestOverlayNet(t *testing.T) {
	v4Range, v6Range := netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("2001:db8::/32")
	for _, kind := range []OverlayKind{OverlayL2, OverlayL3} {
		for _, v6 := range []bool{false, true} {
			n := newOverlayNet("softnet-lab-1-abcdef", 7, kind, v6)
			if want := map[bool]int{false: 1450, true: 1430}[v6]; n.mtu != want {
				t.Errorf("%s underlay-ipv6=%v: MTU %d, want %d", kind, v6, n.mtu, want)
			}
			seen := map[string]bool{}
			for _, ns := range n.namespaces() {
				if seen[ns] {
					t.Fatalf("namespace %s twice", ns)
				}
				seen[ns] = true
			}
			for i, h := range n.hosts {
				g := h.guest
				addrs := []netip.Addr{h.addr, g.v4.Addr(), g.v6.Addr()}
				if kind == OverlayL3 {
					addrs = append(addrs, h.vtep4, h.vtep6, h.gw4, h.gw6)
					if !h.net4.Contains(g.v4.Addr()) || !h.net6.Contains(g.v6.Addr()) || h.vtep4 != h.net4.Addr() || h.gw4 == g.v4.Addr() {
						t.Errorf("%s host %d: guest %v %v, prefixes %v %v, VTEP %v, gateway %v", kind, i, g.v4, g.v6, h.net4, h.net6, h.vtep4, h.gw4)
					}
				}
				for _, a := range addrs {
					if !v4Range.Contains(a) && !v6Range.Contains(a) {
						t.Errorf("%s host %d: %v outside the test ranges", kind, i, a)
					}
				}
				if h.addr.Is6() != v6 {
					t.Errorf("underlay-ipv6=%v: host %d's underlay address %v", v6, i, h.addr)
				}
				args := strings.Join(n.softnetArgs(h), " ")
				p := n.peer(h)
				for _, want := range []string{"local=" + h.addr.String(), "remote=" + p.addr.String(), "netns=" + h.ns, "netns=" + g.ns} {
					if !strings.Contains(args, want) {
						t.Errorf("%s host %d: switch args %q lack %q", kind, i, args, want)
					}
				}
				if l3 := strings.Contains(args, "mode=l3,vtep-mac="+h.vtepMAC+",fdb="+p.vtepMAC+"@"+p.addr.String()); l3 != (kind == OverlayL3) {
					t.Errorf("%s host %d: switch args %q", kind, i, args)
				}
			}
			if n.hosts[0].guest.v4 == n.hosts[1].guest.v4 || n.hosts[0].addr == n.hosts[1].addr {
				t.Errorf("%s: the hosts share addresses", kind)
			}
		}
	}
}

// overlayPayload fills the guests' MTU: one packet per datagram.
func TestOverlayPayload(t *testing.T) {
	for _, c := range []struct {
		o    Options
		m    Mode
		want int
	}{
		{Options{}, UDP, 1422},
		{Options{IPv6: true}, UDP, 1402},
		{Options{UnderlayIPv6: true}, UDP, 1402},
		{Options{UnderlayIPv6: true, IPv6: true}, UDP, 1382},
		{Options{UnderlayIPv6: true}, UDP64, SmallUDP},
	} {
		if got := overlayPayload(c.m, c.o); got != c.want {
			t.Errorf("%+v %s: %d, want %d", c.o, c.m, got, c.want)
		}
	}
}
