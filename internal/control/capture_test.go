package control

import (
	"net/netip"
	"strings"
	"testing"

	"softnet.dev/packet"
)

func udpPacket(t testing.TB, src, dst string) []byte {
	t.Helper()
	b := make([]byte, 128)
	s, d := netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst)
	payload := []byte("payload")
	return b[:packet.PutUDP(b, s, d, payload)]
}

func TestCaptureFilter(t *testing.T) {
	pkt := udpPacket(t, "198.18.1.1:1000", "198.18.2.1:53")
	var h packet.Headers
	if ok, r := packet.Parse(pkt, packet.L3, &h); !ok {
		t.Fatal(r)
	}
	for expr, want := range map[string]bool{
		"":                              true,
		"host 198.18.1.1":               true,
		"host 198.18.9.9":               false,
		"net 198.18.2.0/24":             true,
		"proto udp and port 53":         true,
		"proto tcp":                     false,
		"proto arp":                     false,
		"host 198.18.1.1 and port 1000": true,
		"host 198.18.1.1 and port 54":   false,
		"net 2001:db8::/32":             false,
		"proto udp and host 198.18.2.1 and net 198.18.0.0/15": true,
	} {
		f, err := parseCaptureFilter(expr)
		if err != nil {
			t.Errorf("%q: %v", expr, err)
			continue
		}
		if got := f.matches(&h); got != want {
			t.Errorf("%q matches %v, want %v", expr, got, want)
		}
	}
	for _, bad := range []string{"host", "host x", "net 198.18.0.0", "proto sctp", "port 70000", "port 53 or port 54", "colour blue", "proto udp and proto tcp", "host 198.18.1.1 and"} {
		if _, err := parseCaptureFilter(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzCaptureFilter(f *testing.F) {
	for _, s := range []string{"", "host 198.18.1.1 and proto udp", "net 2001:db8::/32 and port 53", "proto arp"} {
		f.Add(s)
	}
	pkt := udpPacket(f, "198.18.1.1:1000", "198.18.2.1:53")
	var h packet.Headers
	packet.Parse(pkt, packet.L3, &h)
	f.Fuzz(func(t *testing.T, expr string) {
		flt, err := parseCaptureFilter(expr)
		if err != nil {
			return
		}
		flt.matches(&h) // must not panic
	})
}

func TestSummary(t *testing.T) {
	pkt := udpPacket(t, "198.18.1.1:1000", "198.18.2.1:53")
	if got, want := Summary(pkt, packet.L3, len(pkt)), "IP 198.18.1.1.1000 > 198.18.2.1.53: UDP, length 7"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
	if got := Summary(pkt[:10], packet.L3, len(pkt)); got != "IP [|ip], length 35" {
		t.Errorf("truncated: %q", got)
	}
	if got := Summary(nil, packet.L2, 0); !strings.Contains(got, "not parsed") {
		t.Errorf("empty: %q", got)
	}
}
