package lab

import (
	"net/netip"
	"reflect"
	"testing"

	"softnet.dev/internal/vswitch"
	"softnet.dev/internal/vswitch/portkind/tunkind"
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
	got, err := def.softnet.plan(switchConfig(pair, def.softnet, false))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || def.softnet.wrap() != nil {
		t.Errorf("lab's default variant:\n%+v\n`softnet switch`:\n%+v", got, want)
	}
	// And the ladder's steps differ from it, each as it says.
	for _, v := range Variants(Options{Ladder: true}) {
		p, err := v.softnet.plan(switchConfig(pair, v.softnet, false))
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		if same := reflect.DeepEqual(p, want) && v.softnet.wrap() == nil; same != (v.softnet == defaultSoftnet) {
			t.Errorf("%s: same switch as `softnet switch`: %v", v.Name, same)
		}
		c := v.softnet
		if p.Pool.Knobs.Uncached() != c.Uncached || p.Ports[0].Options.(*tunkind.Options).Knobs.SingleGets() != c.SingleGets ||
			(c.Batch != 0) != (p.Engine.Batch == c.Batch && p.Engine.Batch != want.Engine.Batch) ||
			p.Ports[0].IO != c.IO || (v.softnet.wrap() != nil) != c.DeferTX {
			t.Errorf("%s: plan %+v for %+v", v.Name, p, c)
		}
	}
}
