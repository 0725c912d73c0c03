package program

import (
	"net/netip"
	"strings"
	"testing"

	"softnet.dev/drop"
	"softnet.dev/packet"
)

func newFilter(t testing.TB, defaultAllow bool, rules ...string) *Filter {
	t.Helper()
	var rs []Rule
	for _, s := range rules {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	f, err := NewFilter(rs, defaultAllow)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

var denied = DropVerdict(drop.Filter)

func TestFilterFields(t *testing.T) {
	tcp, icmp := packet.ProtoTCP, packet.ProtoICMP
	for _, tc := range []struct {
		rule     string
		matching []func([]byte) int
		other    []func([]byte) int
	}{
		{"deny src=10.1.0.0/16",
			[]func([]byte) int{udp("10.1.2.3", "10.9.0.1"), ipPkt("10.1.0.0", "10.9.0.1", icmp, 8, 0)},
			[]func([]byte) int{udp("10.2.0.1", "10.1.0.1"), udp("fd00::1", "fd00::2")}},
		{"deny dst=2001:db8::/32",
			[]func([]byte) int{udp("fd00::1", "2001:db8:1::1")},
			[]func([]byte) int{udp("2001:db8::1", "fd00::2"), udp("10.0.0.1", "10.0.0.2")}},
		{"deny dst=10.0.0.2",
			[]func([]byte) int{udp("10.0.0.1", "10.0.0.2")},
			[]func([]byte) int{udp("10.0.0.1", "10.0.0.3")}},
		{"deny proto=icmp",
			[]func([]byte) int{ipPkt("10.0.0.1", "10.0.0.2", icmp, 8, 0)},
			[]func([]byte) int{udp("10.0.0.1", "10.0.0.2"), ipPkt("fd00::1", "fd00::2", packet.ProtoICMPv6, 128, 0)}},
		{"deny proto=tcp dport=22",
			[]func([]byte) int{ipPkt("10.0.0.1", "10.0.0.2", tcp, 40000, 22), ipPkt("fd00::1", "fd00::2", tcp, 1, 22)},
			[]func([]byte) int{ipPkt("10.0.0.1", "10.0.0.2", tcp, 22, 80), udp("10.0.0.1", "10.0.0.2"),
				ipPkt("10.0.0.1", "10.0.0.2", packet.ProtoUDP, 1, 22)}},
		{"deny proto=udp sport=1000-2000",
			[]func([]byte) int{ipPkt("10.0.0.1", "10.0.0.2", packet.ProtoUDP, 1000, 9), ipPkt("10.0.0.1", "10.0.0.2", packet.ProtoUDP, 2000, 9)},
			[]func([]byte) int{ipPkt("10.0.0.1", "10.0.0.2", packet.ProtoUDP, 999, 9), ipPkt("10.0.0.1", "10.0.0.2", packet.ProtoUDP, 2001, 9)}},
		{"deny proto=udp dst=198.18.0.0/15 dport=53",
			[]func([]byte) int{udp("10.0.0.1", "198.19.255.255")},
			[]func([]byte) int{udp("10.0.0.1", "198.20.0.1"), ipPkt("10.0.0.1", "198.18.0.1", packet.ProtoUDP, 53, 54)}},
		{"deny",
			[]func([]byte) int{udp("10.0.0.1", "10.0.0.2"), udp("fd00::1", "fd00::2")},
			nil},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			e := newPktEnv(t)
			f := newFilter(t, true, tc.rule)
			fills := append(append([]func([]byte) int{}, tc.matching...), tc.other...)
			b := e.batch(packet.L3, 1, 0, fills...)
			f.Run(b)
			for i := range fills {
				want := PassVerdict
				if i < len(tc.matching) {
					want = denied
				}
				if b.Verdicts[i] != want {
					t.Errorf("packet %d: %v, want %v", i, b.Verdicts[i], want)
				}
			}
		})
	}
}

func TestFilterOrderAndDefault(t *testing.T) {
	e := newPktEnv(t)
	rules := []string{
		"allow proto=tcp dst=10.0.0.2 dport=22",
		"deny dst=10.0.0.0/24",
		"allow proto=udp",
	}
	fills := []func([]byte) int{
		ipPkt("10.9.0.1", "10.0.0.2", packet.ProtoTCP, 5000, 22), // rule 0
		ipPkt("10.9.0.1", "10.0.0.2", packet.ProtoTCP, 5000, 23), // rule 1
		udp("10.9.0.1", "10.0.0.2"),                              // rule 1 before rule 2
		udp("10.9.0.1", "10.0.1.2"),                              // rule 2
		ipPkt("10.9.0.1", "10.0.1.2", packet.ProtoTCP, 5000, 23), // no rule
	}
	for _, tc := range []struct {
		defaultAllow bool
		last         Verdict
	}{{true, PassVerdict}, {false, denied}} {
		f := newFilter(t, tc.defaultAllow, rules...)
		b := e.batch(packet.L3, 1, 0, fills...)
		f.Run(b)
		wantVerdicts(t, b, PassVerdict, denied, denied, PassVerdict, tc.last)
	}

	// ARP is not the filter's; packets already decided are left alone;
	// a later fragment carries no ports, so no port rule matches it.
	f := newFilter(t, false, "allow proto=udp dport=53", "allow proto=udp src=10.0.0.1")
	frag := bytesOf(udp("10.0.0.3", "10.0.0.2"))
	frag[6], frag[7] = 0, 1 // fragment offset 8
	packet.SetIPv4HeaderChecksum(frag)
	b := e.batch(packet.L2, 1, 0,
		arpFrame(packet.ARPRequest, mac(1), "10.0.0.1", [6]byte{}, "10.0.0.2"),
		ether(mac(2), mac(1), packet.EtherTypeIPv4, udp("10.0.0.1", "10.0.0.2")),
		ether(mac(2), mac(1), packet.EtherTypeIPv4, udp("10.0.0.3", "10.0.0.2")),
		ether(mac(2), mac(1), packet.EtherTypeIPv4, raw(frag)),
		ether(mac(2), mac(1), packet.EtherTypeIPv4, raw(nil)),
		ether(mac(2), mac(1), packet.EtherTypeIPv4, udp("10.0.0.9", "10.0.0.2")),
	)
	b.Verdicts[5] = FloodVerdict
	f.Run(b)
	wantVerdicts(t, b, PassVerdict, PassVerdict, PassVerdict, denied, DropVerdict(drop.HdrTrunc), FloodVerdict)
}

func TestFilterConfigErrors(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		rule Rule
		err  string
	}{
		{Rule{DstPorts: PortRange{53, 53}}, "ports need proto tcp or udp"},
		{Rule{Proto: packet.ProtoICMP, SrcPorts: PortRange{1, 2}}, "ports need proto tcp or udp"},
		{Rule{Proto: packet.ProtoTCP, DstPorts: PortRange{80, 79}}, "port range 80-79 is empty"},
		{Rule{Src: netip.PrefixFrom(netip.MustParseAddr("10.0.0.1"), 33)}, "invalid prefix"},
	} {
		_, err := NewFilter([]Rule{{Allow: true}, tc.rule}, true)
		if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "rule 1") {
			t.Errorf("NewFilter(%v): %v, want an error about rule 1 mentioning %q", tc.rule, err, tc.err)
		}
	}
	f, err := NewFilter([]Rule{{Src: p("10.1.2.3/8"), Proto: packet.ProtoTCP, DstPorts: PortRange{1, 1023}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Rules()[0].String(); got != "deny proto=tcp src=10.0.0.0/8 dport=1-1023" {
		t.Errorf("normalized rule %q", got)
	}
}

func TestParseRule(t *testing.T) {
	p := netip.MustParsePrefix
	good := []struct {
		in   string
		want Rule
		text string // String of the result, if not in
	}{
		{"deny proto=udp dst=198.18.0.0/15 dport=53",
			Rule{Dst: p("198.18.0.0/15"), Proto: packet.ProtoUDP, DstPorts: PortRange{53, 53}}, ""},
		{"allow src=2001:db8::/32", Rule{Src: p("2001:db8::/32"), Allow: true}, ""},
		{"allow", Rule{Allow: true}, ""},
		{"  deny   dport=1024-65535 proto=tcp  sport=0-1023 src=10.0.0.1 ",
			Rule{Src: p("10.0.0.1/32"), Proto: packet.ProtoTCP, SrcPorts: PortRange{0, 1023}, DstPorts: PortRange{1024, 65535}},
			"deny proto=tcp src=10.0.0.1/32 sport=0-1023 dport=1024-65535"},
		{"allow proto=icmpv6 dst=fe80::1", Rule{Dst: p("fe80::1/128"), Proto: packet.ProtoICMPv6, Allow: true},
			"allow proto=icmpv6 dst=fe80::1/128"},
		{"deny proto=47 dst=10.1.2.3/8", Rule{Dst: p("10.0.0.0/8"), Proto: 47}, "deny proto=47 dst=10.0.0.0/8"},
		{"allow proto=icmp", Rule{Proto: packet.ProtoICMP, Allow: true}, ""},
	}
	for _, tc := range good {
		r, err := ParseRule(tc.in)
		if err != nil || r != tc.want {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", tc.in, r, err, tc.want)
			continue
		}
		text := tc.text
		if text == "" {
			text = tc.in
		}
		if r.String() != text {
			t.Errorf("ParseRule(%q).String() = %q, want %q", tc.in, r.String(), text)
		}
		if again, err := ParseRule(r.String()); err != nil || again != r {
			t.Errorf("round trip of %q: %+v, %v", r.String(), again, err)
		}
	}

	bad := []struct{ in, token string }{
		{"", "empty"},
		{"permit src=10.0.0.0/8", `"permit"`},
		{"deny src", `"src"`},
		{"deny src=", `"src="`},
		{"deny src=10.0.0.0/33", `"src=10.0.0.0/33"`},
		{"deny dst=10.0.0.256", `"dst=10.0.0.256"`},
		{"deny dst=fe80::1%eth0", `"dst=fe80::1%eth0"`},
		{"deny proto=sctp", `"proto=sctp"`},
		{"deny proto=0", `"proto=0"`},
		{"deny proto=256", `"proto=256"`},
		{"deny proto=tcp dport=http", `"dport=http"`},
		{"deny proto=tcp dport=0", `"dport=0"`},
		{"deny proto=tcp dport=70000", `"dport=70000"`},
		{"deny proto=tcp sport=20-10", `"sport=20-10"`},
		{"deny proto=tcp sport=10-", `"sport=10-"`},
		{"deny dport=53", `"dport=53"`},
		{"deny proto=icmp sport=1", `"sport=1"`},
		{"deny src=10.0.0.0/8 src=10.0.0.0/16", `"src=10.0.0.0/16"`},
		{"deny port=22", `"port=22"`},
	}
	for _, tc := range bad {
		_, err := ParseRule(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.token) {
			t.Errorf("ParseRule(%q): %v, want an error naming %s", tc.in, err, tc.token)
		}
	}
}
