package vswitch

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
)

// Every port of the golden file goes through JSON and back unchanged,
// as it goes through its text form: the kind's options and those every
// port has, whichever kind.
func TestPortSpecJSON(t *testing.T) {
	n := 0
	for _, c := range readGolden(t, "ports.txt") {
		p, err := ParsePort(unescape(c.in))
		if err != nil {
			continue
		}
		// The spec as it prints: what a state file keeps.
		p, err = ParsePort(p.String())
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		var back PortSpec
		if err := json.Unmarshal(b, &back); err != nil {
			t.Errorf("%s: %s does not read back: %v", p, b, err)
			continue
		}
		if !reflect.DeepEqual(back, p) || back.String() != p.String() {
			t.Errorf("%s: %s reads back as %s (%+v)", p, b, back, back)
		}
		n++
	}
	if n < 50 {
		t.Fatalf("only %d ports of the golden file parsed", n)
	}
	p, err := ParsePort("vxlan:vx,vni=7,local=198.18.0.1,remote=198.18.0.2,remote=198.18.0.3,netns=h1,allow=any")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(p)
	if want := `{"kind":"vxlan","name":"vx","options":{"vni":"7","local":"198.18.0.1","remote":["198.18.0.2","198.18.0.3"],"netns":"h1","allow":"any"}}`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	for _, bad := range []string{
		`{"kind":"veth","name":"x"}`,
		`{"kind":"tun","name":"x","options":{"queues":"0"}}`,
		`{"kind":"tun","name":"x","options":{"queues":2}}`,
		`{"kind":"tun","name":"x","options":{"colour":"blue"}}`,
		`{"kind":"tun","name":"x","options":{"netns":""}}`,
		`{"kind":"vhost-user","name":"x"}`,
		`{"kind":"tun","name":"x","options":{"mac":"02:00:00:00:00:01"}}`,
		`[]`,
	} {
		var p PortSpec
		if err := json.Unmarshal([]byte(bad), &p); err == nil {
			t.Errorf("%s read as %s", bad, p)
		}
	}
}

// A change lists a port's old and new routes together; a prefix in both
// must count once toward the policy's bound, or a port with more than
// half of program.MaxAllowPrefixes routes could never change one.
func TestPolicyCountsAPrefixOnce(t *testing.T) {
	spec, err := ParsePort("tun:ov0")
	if err != nil {
		t.Fatal(err)
	}
	var old, next []RouteSpec
	for i := range 600 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), 32)
		old = append(old, RouteSpec{Prefix: p, Port: "ov0"})
		next = append(next, RouteSpec{Prefix: p, Port: "ov0", Via: netip.MustParseAddr("198.18.0.9")})
	}
	next = append(next, RouteSpec{Prefix: netip.MustParsePrefix("198.18.200.0/24"), Port: "ov0"}, RouteSpec{Prefix: netip.MustParsePrefix("198.18.201.0/24"), Port: "other"})
	pol := spec.policy(append(old, next...))
	if got := len(pol.Allow.Prefixes); got != 601 || pol.Allow.Any {
		t.Fatalf("policy of 600 routes changed and one added: %d prefixes (any %v), want 601", got, pol.Allow.Any)
	}
}
