package vswitch

import (
	"strings"
	"testing"
)

// FuzzParseConfig: any file gives a configuration or errors, never a
// panic, and a configuration that parses and validates writes itself
// back (Text) as a file that parses to the same text.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"workers 2\nport tun:a,netns=g1,queues=2,offload=off\nport tun:b,gro=off\nroute 198.18.1.0/24=a\n",
		"port tap:t0,mac=02:00:00:00:00:01,allow=198.18.9.1\nport tap:t1,dhcp-server=on,router=on\n",
		"port tun:t0\nport vxlan:vx,vni=7,local=198.18.0.1,remote=198.18.0.2,mode=l3,vtep-mac=02:00:00:00:00:01,fdb=02:00:00:00:00:02@198.18.0.2\nroute 198.18.22.0/24=vx,via=198.18.0.2\nroute 198.18.21.0/24=t0\n",
		"port tap:t0\nport vxlan:vx,vni=42,local=[2001:db8::1]:4789,remote=2001:db8::2,remote=2001:db8::3,fdb=02:00:00:00:00:01@2001:db8::3,port=8472,srcports=1000-2000,netns=h1\n",
		"port tun:a,allow=any\nport tun:b,allow=198.18.2.0/24+2001:db8:2::/64\nservice udp-echo:198.18.0.9:7\nfilter deny proto=udp dport=53\n",
		"route 198.18.1.1/24=a # host bits\nprot x\nworkers 0\n",
		"port tun:a\x00\nport\n\n#\n",
		"port tap:t0\nport vhost-user:vm1,socket=/run/vm1.sock,queues=2,mac=02:00:00:00:00:07\nport vhost-user:vm2,socket=/run/vm2.sock,mode=client\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		cfg, err := ParseConfig("fuzz", strings.NewReader(text))
		if err != nil || cfg.Validate() != nil {
			return
		}
		again, err := ParseConfig("again", strings.NewReader(cfg.Text()))
		if err != nil {
			t.Fatalf("Text of a valid configuration does not parse: %v\n%s", err, cfg.Text())
		}
		if again.Text() != cfg.Text() {
			t.Fatalf("Text changed on the way back:\n%s\n%s", cfg.Text(), again.Text())
		}
	})
}
