package vswitch

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"softnet.dev/internal/vswitch/portkind/vhostkind"
	"softnet.dev/internal/vswitch/portkind/vxlankind"
)

func TestParsePort(t *testing.T) {
	p, err := ParsePort("tun:sn0,netns=guest1,queues=2,offload=off")
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != "tun" || p.Name != "sn0" || p.NetNS != "guest1" || p.Queues != 2 || p.Offload {
		t.Fatalf("%+v", p)
	}
	if p.String() != "tun:sn0,netns=guest1,queues=2,offload=off" {
		t.Fatalf("String = %s", p)
	}
	if p, err := ParsePort("tap:t0"); err != nil || p.Kind != "tap" || p.Routed() || !p.Offload || !p.GRO || p.Queues != 0 {
		t.Fatalf("%+v %v", p, err)
	}
	// GRO follows offload unless set, and cannot go without it.
	for in, want := range map[string]string{
		"tun:g,gro=off":             "tun:g,gro=off",
		"tun:g,gro=on":              "tun:g",
		"tun:g,offload=off":         "tun:g,offload=off",
		"tun:g,offload=off,gro=off": "tun:g,offload=off",
		// Port security, normalized.
		"tun:g,allow=198.18.1.0/24+2001:db8:1::1+198.18.1.0/24":                   "tun:g,allow=198.18.1.0/24+2001:db8:1::1/128",
		"tun:g,allow=any,dhcp-server=off":                                         "tun:g,allow=any",
		"tap:g,mac=02-00-00-00-00-01+02:00:00:00:00:02,dhcp-server=on,allow=none": "tap:g,allow=none,mac=02:00:00:00:00:01+02:00:00:00:00:02,dhcp-server=on",
		"tap:g,router=on,dhcp-server=on":                                          "tap:g,dhcp-server=on,router=on",
		"tun:g,router=off":                                                        "tun:g",
		// A namespace by the path a container runtime hands over, and a
		// device named apart from its port.
		"tun:cn0123456789abc,netns=/proc/4242/ns/net,dev=eth0":   "tun:cn0123456789abc,netns=/proc/4242/ns/net,dev=eth0",
		"tap:p1,dev=eth1,netns=/var/run/netns/cni-1f2e,queues=2": "tap:p1,netns=/var/run/netns/cni-1f2e,dev=eth1,queues=2",
		// softnet switch --help's example of a locked TAP port.
		"tap:vm1,mac=02:00:00:00:00:07,allow=198.18.7.1+2001:db8:7::1": "tap:vm1,allow=198.18.7.1/32+2001:db8:7::1/128,mac=02:00:00:00:00:07",
	} {
		p, err := ParsePort(in)
		if err != nil || p.String() != want || p.GRO != (p.Offload && !strings.Contains(in, "gro=off")) {
			t.Errorf("ParsePort(%q) = %+v (%s), %v; want %s", in, p, p, err, want)
		}
	}
	for _, bad := range []string{"", "sn0", "veth:x", "tun:", "tun:this-name-is-too-long", "tun:a/b",
		"tun:x,queues=0", "tun:x,queues=many", "tun:x,offload=maybe", "tun:x,netns=", "tun:x,netns=../etc",
		"tun:x,colour=blue", "tun:x,queues", "tun:x,gro=yes", "tun:x,offload=off,gro=on",
		"tun:x,mac=02:00:00:00:00:01", "tap:x,mac=ff:ff:ff:ff:ff:ff", "tap:x,mac=02:00:00:00:00", "tun:x,allow=",
		"tun:x,allow=198.18.1.0/33", "tun:x,allow=bogus", "tun:x,dhcp-server=yes", "tun:x,router=yes", "tun:x,router=",
		"tun:x,netns=/proc/1/ns/../ns/net", "tun:x,dev=", "tun:x,dev=this-name-is-too-long", "tun:x,dev=a/b",
		"tun:this-name-is-too-long,dev=eth0", "tun:a/b,dev=eth0"} {
		if _, err := ParsePort(bad); err == nil {
			t.Errorf("ParsePort(%q) accepted", bad)
		}
	}
}

func TestParseVhostUserPort(t *testing.T) {
	p, err := ParsePort("vhost-user:vm1,socket=/run/softnet/vm1.sock,mac=02:00:00:00:00:07,queues=2,offload=off")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := p.Options.(*vhostkind.Options); !ok || p.Routed() || o.Socket != "/run/softnet/vm1.sock" || p.Queues != 2 || p.Offload || len(p.MACs) != 1 {
		t.Fatalf("%+v", p)
	}
	if want := "vhost-user:vm1,socket=/run/softnet/vm1.sock,queues=2,offload=off,mac=02:00:00:00:00:07"; p.String() != want {
		t.Fatalf("String = %s, want %s", p, want)
	}
	if again, err := ParsePort(p.String()); err != nil || again.String() != p.String() {
		t.Fatalf("round trip: %+v %v", again, err)
	}
	for in, want := range map[string]string{
		"vhost-user:vm1,socket=/a,mode=client": "vhost-user:vm1,socket=/a,mode=client",
		"vhost-user:vm1,mode=server,socket=/a": "vhost-user:vm1,socket=/a",
	} {
		if p, err := ParsePort(in); err != nil || p.String() != want || p.Options.(*vhostkind.Options).Client != strings.Contains(want, "client") {
			t.Errorf("ParsePort(%q) = %s, %v; want %s", in, p, err, want)
		}
	}
	for _, bad := range []string{"vhost-user:vm1", "vhost-user:vm1,socket=", "vhost-user:vm1,socket=/a,netns=g",
		"vhost-user:vm1,socket=/a,gro=on", "vhost-user:vm1,socket=/a,io=uring", "tap:t0,socket=/a",
		"vhost-user:vm1,socket=/a#b", "vhost-user:vm1,socket=/a,mode=both", "tap:t0,mode=client", "vhost-user:a/b,socket=/a", "vhost-user:vm1,socket=/" + strings.Repeat("x", 120)} {
		if _, err := ParsePort(bad); err == nil {
			t.Errorf("ParsePort(%q) accepted", bad)
		}
	}
	// Bridged with TAP ports, one socket each, and never mixed with TUN.
	cfg := Config{}
	for _, s := range []string{"tap:t0", "vhost-user:vm1,socket=/run/a.sock", "vhost-user:vm2,socket=/run/a.sock"} {
		p, err := ParsePort(s)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "socket /run/a.sock already") {
		t.Errorf("two ports on one socket: %v", err)
	}
	cfg.Ports[2].Options = &vhostkind.Options{Socket: "/run/b.sock"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("tap and vhost-user ports: %v", err)
	}
	tun, _ := ParsePort("tun:sn0")
	cfg.Ports = append(cfg.Ports, tun)
	if err := cfg.Validate(); err == nil {
		t.Error("a vhost-user port mixed with a tun port accepted")
	}
}

func TestParseRoute(t *testing.T) {
	r, err := ParseRoute("198.18.1.0/24=sn0")
	if err != nil || r.Prefix.String() != "198.18.1.0/24" || r.Port != "sn0" {
		t.Fatalf("%+v %v", r, err)
	}
	// As ip-route(8): host bits set is an error, with the prefix meant.
	if _, err := ParseRoute("198.18.1.7/24=sn0"); err == nil || !strings.Contains(err.Error(), "host bits set: the prefix is 198.18.1.0/24") {
		t.Errorf("host bits: %v", err)
	}
	for _, bad := range []string{"198.18.1.0/24", "nonsense=sn0", "198.18.1.0/33=sn0", "2001:db8::/32=", "2001:db8::1/32=sn0"} {
		if _, err := ParseRoute(bad); err == nil {
			t.Errorf("ParseRoute(%q) accepted", bad)
		}
	}
}

func TestParseConfigNamesTheBadLine(t *testing.T) {
	good := `# two guests
port tun:sn0,netns=g1
port tun:sn1,netns=g2   # second
route 198.18.1.0/24=sn0

workers 2
`
	cfg, err := ParseConfig("sw.conf", strings.NewReader(good))
	if err != nil || len(cfg.Ports) != 2 || len(cfg.Routes) != 1 || cfg.Workers != 2 {
		t.Fatalf("%+v %v", cfg, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]string{
		"port tun:a\nprot tun:b\n":       "sw.conf:2: unknown directive",
		"workers zero\n":                 "sw.conf:1: workers",
		"port tun:a\nport tun:b extra\n": "sw.conf:2: port: want one value",
		"\n\nroute 198.18.0.0/15\n":      "sw.conf:3: route",
		"port tun:a,offload=sometimes\n": "sw.conf:1: port",
	} {
		_, err := ParseConfig("sw.conf", strings.NewReader(text))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", text, err, want)
		}
	}
}

func TestParseConfigReportsEveryBadLine(t *testing.T) {
	text := "port tun:a\nprot tun:b\nworkers 0\nport tun:b\nroute 198.18.1.1/24=a\nfilter deny proto=nope\n"
	_, err := ParseConfig("sw.conf", strings.NewReader(text))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"sw.conf:2: unknown directive", "sw.conf:3: workers", "sw.conf:5: route", "sw.conf:6: program: rule"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "sw.conf:1") || strings.Contains(err.Error(), "sw.conf:4") {
		t.Errorf("good lines reported: %v", err)
	}
	// A file of garbage is reported in a bounded number of lines.
	_, err = ParseConfig("junk", strings.NewReader(strings.Repeat("x y z\n", 1000)))
	if n := strings.Count(err.Error(), "\n") + 1; n != maxConfigErrors {
		t.Errorf("%d errors reported for a junk file, want %d", n, maxConfigErrors)
	}
}

// Validate's errors about a directive of a file name its line.
func TestValidateNamesTheLine(t *testing.T) {
	for text, want := range map[string]string{
		"port tun:a\nport tun:b\nroute 198.18.1.0/24=nosuch\n":                                   "sw.conf:3: route 198.18.1.0/24=nosuch: no such port",
		"port tun:a\nport tun:a,netns=x\n":                                                       "sw.conf:2: port",
		"port tun:a\nport tun:b\nroute 198.18.1.0/24=a\nroute 198.18.1.0/24=b\n":                 "sw.conf:4: route 198.18.1.0/24=b: 198.18.1.0/24 is already routed to a",
		"port tun:a\nport tun:b\nservice udp-echo:198.18.0.9:7\nservice udp-echo:198.18.0.9:7\n": "sw.conf:4: service",
	} {
		cfg, err := ParseConfig("sw.conf", strings.NewReader(text))
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}

func TestParseConfigFilter(t *testing.T) {
	cfg, err := ParseConfig("sw.conf", strings.NewReader("filter deny proto=udp dport=53 # DNS\nfilter allow src=198.18.0.0/15\nfilter deny\n"))
	if err != nil || len(cfg.Filters) != 3 {
		t.Fatalf("%+v %v", cfg.Filters, err)
	}
	if got := cfg.Filters[0].String(); got != "deny proto=udp dport=53" {
		t.Errorf("first rule %q", got)
	}
	if cfg.Filters[1].Allow != true || cfg.Filters[2].Allow {
		t.Errorf("rules %v", cfg.Filters)
	}
}

func TestValidate(t *testing.T) {
	port := func(s string) PortSpec {
		p, err := ParsePort(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, cfg := range map[string]Config{
		"mixed":           {Ports: []PortSpec{port("tun:a"), port("tap:b")}},
		"duplicate":       {Ports: []PortSpec{port("tun:a,netns=x"), port("tun:a,netns=y")}},
		"route to nobody": {Ports: []PortSpec{port("tun:a"), port("tun:b")}, Routes: []RouteSpec{{Port: "c"}}},
		"route on tap":    {Ports: []PortSpec{port("tap:a"), port("tap:b")}, Routes: []RouteSpec{{Port: "a"}}},
		"few queues":      {Ports: []PortSpec{port("tun:a,queues=1"), port("tun:b")}, Workers: 2},
		"workers":         {Ports: []PortSpec{port("tun:a"), port("tun:b")}, Workers: 1000},
		"many queues":     {Ports: []PortSpec{withQueues(port("tun:a"), 1000), port("tun:b")}},
		"duplicate route": {Ports: []PortSpec{port("tun:a"), port("tun:b")}, Routes: []RouteSpec{{Prefix: netip.MustParsePrefix("198.18.1.0/24"), Port: "a"}, {Prefix: netip.MustParsePrefix("198.18.1.0/24"), Port: "b"}}},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// withQueues is p with q queues, which its spec could not give.
func withQueues(p PortSpec, q int) PortSpec {
	p.Queues = q
	return p
}

func TestParseService(t *testing.T) {
	s, err := ParseService("udp-echo:198.18.0.9:7")
	if err != nil || s.Kind != "udp-echo" || s.String() != "udp-echo:198.18.0.9:7" {
		t.Fatalf("%+v %v", s, err)
	}
	if s, err := ParseService("udp-sink:[2001:db8::9]:9"); err != nil || s.Kind != "udp-sink" {
		t.Fatalf("%+v %v", s, err)
	}
	for _, bad := range []string{"", "udp-echo", "tcp-echo:198.18.0.9:7", "udp-echo:198.18.0.9", "udp-echo:nowhere:7", "udp-sink:198.18.0.9:0"} {
		if _, err := ParseService(bad); err == nil {
			t.Errorf("ParseService(%q) accepted", bad)
		}
	}
	cfg, err := ParseConfig("sw.conf", strings.NewReader("port tun:a\nport tun:b\nservice udp-echo:198.18.0.9:7\n"))
	if err != nil || len(cfg.Services) != 1 {
		t.Fatalf("%+v %v", cfg, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	dup := cfg
	dup.Services = append(dup.Services, cfg.Services[0])
	if err := dup.Validate(); err == nil {
		t.Error("a service address given twice was accepted")
	}
	if _, err := ParseConfig("sw.conf", strings.NewReader("service udp-echo:198.18.0.9\n")); err == nil || !strings.Contains(err.Error(), "sw.conf:1:") {
		t.Errorf("bad service line: %v", err)
	}
}

// A TUN port may send from the prefixes routed to it unless allow= says
// otherwise; a TAP port from any address, with its MAC lock if given.
func TestPlanPolicies(t *testing.T) {
	port := func(s string) PortSpec {
		p, err := ParsePort(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	route := func(s string) RouteSpec {
		r, err := ParseRoute(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	p, err := NewPlan(Config{
		Ports:  []PortSpec{port("tun:a"), port("tun:b,allow=any"), port("tun:c"), port("tun:d,allow=198.18.4.0/24,dhcp-server=on,router=on")},
		Routes: []RouteSpec{route("198.18.1.0/24=a"), route("2001:db8:1::/64=a"), route("198.18.2.0/24=b"), route("198.18.9.0/24=d")},
	}, Tuning{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"198.18.1.0/24+2001:db8:1::/64", "any", "none", "198.18.4.0/24"} {
		if got := p.Policies[i].Allow.String(); got != want {
			t.Errorf("port %d: allow %s, want %s", i, got, want)
		}
	}
	if !p.Policies[3].DHCPServer || p.Policies[0].DHCPServer {
		t.Errorf("dhcp-server: %+v", p.Policies)
	}
	if !p.Policies[3].Router || p.Policies[0].Router || p.Policies[1].Router {
		t.Errorf("router: %+v", p.Policies)
	}
	p, err = NewPlan(Config{Ports: []PortSpec{port("tap:a,mac=02:00:00:00:00:01"), port("tap:b")}}, Tuning{})
	if err != nil {
		t.Fatal(err)
	}
	if a := p.Policies[0]; !a.Allow.Any || len(a.MACs) != 1 || a.MACs[0] != [6]byte{2, 0, 0, 0, 0, 1} {
		t.Errorf("tap port policy %+v", a)
	}
}

// Text writes what ParseConfig reads back as the same configuration.
func TestConfigTextRoundTrips(t *testing.T) {
	text := "workers 2\nport tun:a,netns=g1,queues=2,offload=off\nport tun:b,gro=off\nroute 198.18.1.0/24=a\nroute 2001:db8:2::/64=b\nservice udp-echo:198.18.0.9:7\nfilter deny proto=udp dport=53\nfilter allow src=198.18.0.0/15\n"
	cfg, err := ParseConfig("a.conf", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Text(); got != text {
		t.Errorf("Text:\n%s\nwant:\n%s", got, text)
	}
	again, err := ParseConfig("b.conf", strings.NewReader(cfg.Text()))
	if err != nil || again.Text() != text {
		t.Errorf("read back: %v\n%s", err, again.Text())
	}
}

// Port security options survive the running configuration's text.
func TestConfigTextKeepsPortSecurity(t *testing.T) {
	text := "port tun:a,allow=198.18.1.0/24+2001:db8:1::/64,dhcp-server=on\nport tun:b,allow=any,router=on\nport tap:c,mac=02:00:00:00:00:01\n"
	cfg, err := ParseConfig("a.conf", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Text(); got != text {
		t.Errorf("Text:\n%s\nwant:\n%s", got, text)
	}
}

func TestParsePortVXLAN(t *testing.T) {
	p, err := ParsePort("vxlan:vx0,vni=42,local=198.18.100.1,remote=198.18.100.2,remote=198.18.100.3,netns=host1,port=8472,queues=2")
	if err != nil {
		t.Fatal(err)
	}
	o, ok := p.Options.(*vxlankind.Options)
	if !ok || p.Routed() || o.VNI != 42 || o.Local != netip.MustParseAddrPort("198.18.100.1:0") || len(o.Remotes) != 2 ||
		o.DstPort != 8472 || p.NetNS != "host1" || p.Queues != 2 {
		t.Fatalf("%+v", p)
	}
	if cfg := o.Config(p.Name, p.Common, 2); cfg.Port != 8472 || cfg.Remotes[1] != netip.MustParseAddr("198.18.100.3") || cfg.SrcPortMin != 0 {
		t.Fatalf("%+v", cfg)
	}
	for in, want := range map[string]string{
		"vxlan:vx0,vni=42,local=198.18.100.1,remote=198.18.100.2,remote=198.18.100.3,netns=host1,port=8472,queues=2": "vxlan:vx0,vni=42,local=198.18.100.1,remote=198.18.100.2,remote=198.18.100.3,port=8472,netns=host1,queues=2",
		"vxlan:v,remote=2001:db8::2,local=[2001:db8::1]:4790,vni=007":                                                "vxlan:v,vni=7,local=[2001:db8::1]:4790,remote=2001:db8::2",
		"vxlan:v,vni=1,srcports=49152-49407,local=198.18.0.1,remote=198.18.0.2":                                      "vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.2,srcports=49152-49407",
		"vxlan:v,vni=1,fdb=02-00-00-00-00-0A@2001:db8::2,local=2001:db8::1,remote=2001:db8::2":                       "vxlan:v,vni=1,local=2001:db8::1,remote=2001:db8::2,fdb=02:00:00:00:00:0a@2001:db8::2",
		"vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.2,mac=02:00:00:00:00:01,allow=198.18.9.0/24":                 "vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.2,allow=198.18.9.0/24,mac=02:00:00:00:00:01",
	} {
		p, err := ParsePort(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePort(%q) = %s, %v; want %s", in, p, err, want)
			continue
		}
		if again, err := ParsePort(p.String()); err != nil || again.String() != want {
			t.Errorf("ParsePort(%q) = %s, %v: does not round-trip", want, again, err)
		}
	}
	for _, bad := range []string{
		"vxlan:v,local=198.18.0.1,remote=198.18.0.2",
		"vxlan:v,vni=1,remote=198.18.0.2",
		"vxlan:v,vni=1,local=198.18.0.1",
		"vxlan:v,vni=16777216,local=198.18.0.1,remote=198.18.0.2",
		"vxlan:v,vni=1,local=198.18.0.1,remote=2001:db8::2",
		"vxlan:v,vni=1,local=0.0.0.0,remote=198.18.0.2",
		"vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.1",
		"vxlan:v,vni=1,local=198.18.0.1,remote=239.0.0.1",
		"vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.2,port=0",
		"vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.2,port=65536",
		"vxlan:v,vni=1,local=bogus,remote=198.18.0.2",
		"vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.2,fdb=02:00:00:00:00:01",
		"vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.2,fdb=02:00:00:00:00:01@198.18.0.3",
		"vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.2,fdb=ff:ff:ff:ff:ff:ff@198.18.0.2",
		"vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.2,srcports=100",
		"vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.2,srcports=200-100",
		"vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.2,srcports=0-100",
		"vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.2,offload=off",
		"vxlan:v,vni=1,local=198.18.0.1,remote=198.18.0.2,io=uring",
		"vxlan:this-name-is-too-long,vni=1,local=198.18.0.1,remote=198.18.0.2",
		"tun:x,vni=1",
		"tap:x,remote=198.18.0.2",
	} {
		if _, err := ParsePort(bad); err == nil {
			t.Errorf("ParsePort(%q) accepted", bad)
		}
	}
	// A configuration of tap and vxlan ports is one bridge; tun ports do
	// not mix with either, and vxlan ports take no routes.
	tap, _ := ParsePort("tap:t0")
	vx, _ := ParsePort("vxlan:vx,vni=1,local=198.18.0.1,remote=198.18.0.2")
	tn, _ := ParsePort("tun:t1")
	if cfg := (Config{Ports: []PortSpec{tap, vx}}); cfg.Validate() != nil {
		t.Errorf("tap and vxlan: %v", cfg.Validate())
	}
	if cfg := (Config{Ports: []PortSpec{tn, vx}}); cfg.Validate() == nil {
		t.Error("tun and vxlan accepted")
	}
	rt, _ := ParseRoute("198.18.1.0/24=vx")
	if cfg := (Config{Ports: []PortSpec{tap, vx}, Routes: []RouteSpec{rt}}); cfg.Validate() == nil {
		t.Error("a route to a vxlan port accepted")
	}
	if p, _ := NewPlan(Config{Ports: []PortSpec{vx, tap}}, Tuning{}); !p.TAP || !p.Policies[0].Allow.Any {
		t.Errorf("a switch starting with a vxlan port is not a bridge: %+v", p)
	}
}

func TestParseRoutedVXLAN(t *testing.T) {
	vx, err := ParsePort("vxlan:vx,vni=1,local=198.18.0.1,remote=198.18.0.2,mode=l3,vtep-mac=02:00:00:00:00:01,fdb=02:00:00:00:00:02@198.18.0.2")
	if err != nil {
		t.Fatal(err)
	}
	if !vx.Routed() || vx.String() != "vxlan:vx,vni=1,local=198.18.0.1,remote=198.18.0.2,fdb=02:00:00:00:00:02@198.18.0.2,mode=l3,vtep-mac=02:00:00:00:00:01" {
		t.Fatalf("%+v %s", vx, vx)
	}
	for _, bad := range []string{
		"vxlan:vx,vni=1,local=198.18.0.1,remote=198.18.0.2,mode=l3", // no VTEP MAC
		"vxlan:vx,vni=1,local=198.18.0.1,remote=198.18.0.2,mode=l4,vtep-mac=02:00:00:00:00:01",
		"vxlan:vx,vni=1,local=198.18.0.1,remote=198.18.0.2,mode=l3,vtep-mac=01:00:00:00:00:01",
		"tun:t,mode=l3",
	} {
		if _, err := ParsePort(bad); err == nil {
			t.Errorf("ParsePort(%q) accepted", bad)
		}
	}
	rt, err := ParseRoute("198.18.22.0/24=vx,via=198.18.0.2")
	if err != nil || rt.Via != netip.MustParseAddr("198.18.0.2") || rt.String() != "198.18.22.0/24=vx,via=198.18.0.2" {
		t.Fatalf("%+v %v", rt, err)
	}
	if _, err := ParseRoute("198.18.22.0/24=vx,via=nowhere"); err == nil {
		t.Error("a via that is no address accepted")
	}
	tn, _ := ParsePort("tun:t1")
	route := func(s string) RouteSpec {
		r, err := ParseRoute(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// A routed vxlan port goes with tun ports; its routes name a remote
	// with a VTEP MAC, and only its routes say via.
	if cfg := (Config{Ports: []PortSpec{tn, vx}, Routes: []RouteSpec{route("198.18.22.0/24=vx,via=198.18.0.2"), route("198.18.21.0/24=t1")}}); cfg.Validate() != nil {
		t.Errorf("tun and routed vxlan: %v", cfg.Validate())
	}
	for _, routes := range [][]RouteSpec{
		{route("198.18.22.0/24=vx")},
		{route("198.18.22.0/24=vx,via=198.18.0.3")},
		{route("198.18.21.0/24=t1,via=198.18.0.2")},
	} {
		if cfg := (Config{Ports: []PortSpec{tn, vx}, Routes: routes}); cfg.Validate() == nil {
			t.Errorf("routes %v accepted", routes)
		}
	}
	tap, _ := ParsePort("tap:t2")
	if cfg := (Config{Ports: []PortSpec{tap, vx}}); cfg.Validate() == nil {
		t.Error("tap and routed vxlan accepted")
	}
}

// TestCPUs checks --cpus's list syntax and that the plan pins the
// workers in the order given.
func TestCPUs(t *testing.T) {
	for in, want := range map[string][]int{"": nil, "0": {0}, "3,1": {3, 1}, "2-4,0": {2, 3, 4, 0}, "1023": {1023}} {
		got, err := ParseCPUs(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseCPUs(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"x", "-1", "1,", "3-1", "0-", "1024", "0-1024", " 1"} {
		if got, err := ParseCPUs(in); err == nil {
			t.Errorf("ParseCPUs(%q) = %v, want an error", in, got)
		}
	}
	a, _ := ParsePort("tap:a")
	b, _ := ParsePort("tap:b")
	ports := []PortSpec{a, b}
	p, err := NewPlan(Config{Ports: ports, Workers: 2}, Tuning{CPUs: "1,0"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Engine.LockOSThread || !slices.Equal(p.Engine.CPUs, []int{1, 0}) {
		t.Errorf("engine config %+v: want workers locked to CPUs [1 0]", p.Engine)
	}
	if _, err := NewPlan(Config{Ports: ports}, Tuning{CPUs: "a"}); err == nil {
		t.Error("a plan with CPUs \"a\": no error")
	}
}

// CheckCPUs takes the CPUs the process may run on and refuses one it
// may not, naming those it may.
func TestCheckCPUs(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var mine []int
	for c := range MaxCPU {
		if set.IsSet(c) {
			mine = append(mine, c)
		}
	}
	if err := CheckCPUs(mine); err != nil {
		t.Errorf("%v: %v", mine, err)
	}
	if err := CheckCPUs(nil); err != nil {
		t.Errorf("none: %v", err)
	}
	list := cpuList(&set)
	if again, err := ParseCPUs(list); err != nil || !slices.Equal(again, mine) {
		t.Errorf("cpuList %q reads back as %v, %v; want %v", list, again, err, mine)
	}
	err := CheckCPUs([]int{MaxCPU - 1})
	if set.IsSet(MaxCPU - 1) {
		t.Skip("this process may run on every CPU a set can name")
	}
	if err == nil || !strings.Contains(err.Error(), "CPU 1023 is not one this process may run on (it may use "+list+")") {
		t.Errorf("CPU %d: %v", MaxCPU-1, err)
	}
}
