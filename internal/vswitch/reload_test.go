package vswitch

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A reload changes a running port in place only where its kind says the
// change is live: a vxlan port's remotes and static stations, nothing
// else of any kind, and of the options every port has only the rate
// limits, on every kind.
func TestReloadTakesLive(t *testing.T) {
	port := func(s string) PortSpec {
		p, err := ParsePort(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const vx = "vxlan:vx,vni=1,local=198.18.0.1,remote=198.18.0.2"
	if lp := (&livePort{spec: port(vx)}); lp.reloadTo(port(vx)) != kept || lp.reloadTo(port(vx+",queues=2")) != reopened {
		t.Error("a spec of its own does not keep the port, or another does not reopen it")
	}
	for from, tos := range map[string]map[string]bool{
		vx: {
			"vxlan:vx,vni=1,local=198.18.0.1,remote=198.18.0.3":                   true,
			"vxlan:vx,vni=1,local=198.18.0.1,remote=198.18.0.3,remote=198.18.0.2": true,
			vx + ",remote=198.18.0.3,fdb=02:00:00:00:00:01@198.18.0.3":            true,
			"vxlan:vx,vni=2,local=198.18.0.1,remote=198.18.0.2":                   false,
			"vxlan:vx,vni=1,local=198.18.0.9,remote=198.18.0.2":                   false,
			vx + ",port=8472":                               false,
			vx + ",srcports=1000-2000":                      false,
			vx + ",mode=l3,vtep-mac=02:00:00:00:00:09":      false,
			vx + ",netns=h1":                                false,
			vx + ",queues=2":                                false,
			vx + ",allow=any":                               false,
			vx + ",remote=198.18.0.3,mac=02:00:00:00:00:01": false,
			"tap:vx":                                 false,
			vx + ",ingress-rate=5M":                  true,
			vx + ",remote=198.18.0.3,egress-rate=5M": true,
			vx + ",vni=2,egress-rate=5M":             false,
		},
		"tun:a": {"tun:a,queues=2": false, "tun:a,offload=off": false, "tap:a": false,
			// Rate limits change live on every kind, alone.
			"tun:a,ingress-rate=10M": true, "tun:a,egress-rate=1G,egress-burst=1M": true,
			"tun:a,ingress-rate=10M,queues=2": false},
		"tun:a,ingress-rate=10M": {"tun:a": true, "tun:a,ingress-rate=20M": true},
		"vhost-user:v,socket=/a": {"vhost-user:v,socket=/b": false, "vhost-user:v,socket=/a,mode=client": false,
			"vhost-user:v,socket=/a,egress-rate=1M": true},
		"vxlan:vx,vni=1,local=198.18.0.1,remote=198.18.0.2,mode=l3,vtep-mac=02:00:00:00:00:09,fdb=02:00:00:00:00:01@198.18.0.2": {
			"vxlan:vx,vni=1,local=198.18.0.1,remote=198.18.0.2,mode=l3,vtep-mac=02:00:00:00:00:09,fdb=02:00:00:00:00:02@198.18.0.2": true,
			"vxlan:vx,vni=1,local=198.18.0.1,remote=198.18.0.2,mode=l3,vtep-mac=02:00:00:00:00:08,fdb=02:00:00:00:00:01@198.18.0.2": false,
		},
	} {
		lp := &livePort{spec: port(from)}
		for to, want := range tos {
			if got := lp.reloadTo(port(to)) == inPlace; got != want {
				t.Errorf("%s → %s: in place %v, want %v", from, to, got, want)
			}
		}
	}
}

// Merge keeps what the control API made whatever the configuration
// says, takes the rest from the configuration, and notes each item of
// the configuration it did not apply and each API route whose port the
// configuration took away.
func TestMergeKeepsTheAPIs(t *testing.T) {
	port := func(s string, o Origin) PortSpec {
		p, err := ParsePort(s)
		if err != nil {
			t.Fatal(err)
		}
		p.Origin = o
		return p
	}
	route := func(s string, o Origin) RouteSpec {
		r, err := ParseRoute(s)
		if err != nil {
			t.Fatal(err)
		}
		r.Origin = o
		return r
	}
	running := Config{
		Ports: []PortSpec{port("tun:a", FromConfig), port("tun:b", FromConfig), port("tun:c,netns=x", FromAPI), port("tun:d", FromAPI), port("tun:g", FromAgent)},
		Routes: []RouteSpec{route("198.18.1.0/24=a", FromConfig), route("198.18.3.0/24=c", FromAPI),
			route("198.18.2.0/24=b", FromAPI), route("198.18.4.0/24=a", FromAPI), route("198.18.6.0/24=g", FromAgent)},
		Workers: 1,
	}
	// The file drops b (and with it the API's route to b), names c
	// otherwise, routes to c and to the API's 198.18.4.0/24.
	file, err := ParseConfig("f", strings.NewReader("workers 2\nport tun:a\nport tun:c,netns=y\nport tun:e\nroute 198.18.1.0/24=a\nroute 198.18.5.0/24=c\nroute 198.18.4.0/24=e\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, notes := Merge(running, file)
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	var ports, routes []string
	for _, p := range got.Ports {
		ports = append(ports, p.String()+" "+p.Origin.String())
	}
	for _, r := range got.Routes {
		routes = append(routes, r.String()+" "+r.Origin.String())
	}
	if want := []string{"tun:a config", "tun:e config", "tun:c,netns=x api", "tun:d api", "tun:g agent"}; !slices.Equal(ports, want) {
		t.Errorf("ports %q, want %q", ports, want)
	}
	if want := []string{"198.18.1.0/24=a config", "198.18.3.0/24=c api", "198.18.4.0/24=a api", "198.18.6.0/24=g agent"}; !slices.Equal(routes, want) {
		t.Errorf("routes %q, want %q", routes, want)
	}
	if got.Workers != 2 {
		t.Errorf("workers %d, want the file's 2", got.Workers)
	}
	var msgs []string
	for _, n := range notes {
		msgs = append(msgs, fmt.Sprintf("%s: %s %s", n.Msg, n.Attrs[0], n.Attrs[1]))
	}
	want := []string{
		"kept the API's port, not the configuration's: port c",
		"ignored the configuration's route to the API's port: route 198.18.5.0/24=c",
		"kept the API's route, not the configuration's: route 198.18.4.0/24",
		"removing the API's route: its port is gone from the configuration: route 198.18.2.0/24=b",
	}
	if !slices.Equal(msgs, want) {
		t.Errorf("notes\n%q, want\n%q", msgs, want)
	}
}
