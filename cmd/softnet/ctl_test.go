package main

import (
	"strings"
	"testing"

	"softnet.dev/internal/control"
	"softnet.dev/internal/vswitch"
)

// port list shows the pod a port was added for (softnet-cni's), "-" for
// the others.
func TestWritePortsPod(t *testing.T) {
	var b strings.Builder
	if err := writePorts(&b, []control.Port{
		{Name: "cn0123", Spec: "tun:cn0123,netns=/var/run/netns/cni-1,dev=eth0", Info: "L3", Pod: &vswitch.Pod{Namespace: "shop", Name: "web-0", InfraContainerID: "9e9e"}},
		{Name: "vm1", Spec: "vhost-user:vm1,socket=/run/vm1.sock", Info: "L2"},
	}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], "pod") || !strings.HasSuffix(lines[1], " shop/web-0") || !strings.HasSuffix(lines[2], " -") {
		t.Errorf("port list:\n%s", b.String())
	}
}
