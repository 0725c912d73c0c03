package lab

import (
	"net/netip"
	"reflect"
	"testing"

	"softnet.dev/internal/vswitch"
)

// The lab's default variant is `softnet switch` as an operator would run
// it between the two guests: the same devices, pool, engine, routes.
func TestDefaultVariantIsTheSwitch(t *testing.T) {
	pair := &guestPair{
		a: &guest{ns: "lab-x-1a", dev: "lab-a", v4: netip.MustParsePrefix("198.18.1.1/24"), v6: netip.MustParsePrefix("2001:db8:1::1/64")},
		b: &guest{ns: "lab-x-1b", dev: "lab-b", v4: netip.MustParsePrefix("198.18.2.1/24"), v6: netip.MustParsePrefix("2001:db8:2::1/64")},
	}
	var cli vswitch.Config
	for _, s := range []string{"tun:lab-a,netns=lab-x-1a", "tun:lab-b,netns=lab-x-1b"} {
		p, err := vswitch.ParsePort(s)
		if err != nil {
			t.Fatal(err)
		}
		cli.Ports = append(cli.Ports, p)
	}
	for _, s := range []string{"198.18.1.0/24=lab-a", "2001:db8:1::/64=lab-a", "198.18.2.0/24=lab-b", "2001:db8:2::/64=lab-b"} {
		r, err := vswitch.ParseRoute(s)
		if err != nil {
			t.Fatal(err)
		}
		cli.Routes = append(cli.Routes, r)
	}
	cli.Workers = 1 // the --workers default
	want, err := vswitch.NewPlan(cli, vswitch.Tuning{})
	if err != nil {
		t.Fatal(err)
	}
	var def Variant
	for _, v := range Variants(Options{}) {
		if v.Name == Softnet {
			def = v
		}
	}
	got, err := vswitch.NewPlan(switchConfig(pair, def.softnet, false), def.softnet.Tuning)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lab's default variant:\n%+v\n`softnet switch`:\n%+v", got, want)
	}
	// And the ladder's steps differ from it.
	for _, v := range Variants(Options{Ladder: true}) {
		p, err := vswitch.NewPlan(switchConfig(pair, v.softnet, false), v.softnet.Tuning)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		if same := reflect.DeepEqual(p, want); same != (v.softnet == defaultSoftnet) {
			t.Errorf("%s: same plan as the switch: %v", v.Name, same)
		}
	}
}
