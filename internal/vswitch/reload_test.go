package vswitch

import "testing"

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
