package vswitch

import (
	"encoding/json"
	"strings"
	"testing"
)

// A port's pod goes through its JSON and back; a pod Kubernetes could
// not have named does not come back.
func TestPodJSON(t *testing.T) {
	p, err := ParsePort("tun:cn1,netns=/var/run/netns/cni-1,dev=eth0")
	if err != nil {
		t.Fatal(err)
	}
	p.Pod = Pod{Namespace: "shop", Name: "web-0", InfraContainerID: "9e9e"}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back PortSpec
	if err := json.Unmarshal(b, &back); err != nil || back.Pod != p.Pod || back.String() != p.String() {
		t.Errorf("%s read back as %v %+v, %v", b, back, back.Pod, err)
	}
	hostile := strings.Replace(string(b), `"web-0"`, `"web\"}\n"`, 1)
	if err := json.Unmarshal([]byte(hostile), &back); err == nil || !strings.Contains(err.Error(), "pod name") {
		t.Errorf("%s: %v, want a pod name error", hostile, err)
	}
	// Without a pod the JSON is what it was.
	p.Pod = Pod{}
	if b, _ := json.Marshal(p); strings.Contains(string(b), "pod") {
		t.Errorf("no pod, yet %s", b)
	}
}
