package afxdp_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"softnet.dev/internal/netnstest"
)

// TestExampleBridge runs the Example's bridge between two pods'
// veths, whose host ends are in a namespace of their own, and pings
// across it.
func TestExampleBridge(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	sw := netnstest.New(t)
	pods := []*netnstest.NS{netnstest.New(t), netnstest.New(t)}
	var devs []string
	for i, pod := range pods {
		dev := fmt.Sprintf("veth-pod%d", i+1)
		for _, args := range [][]string{
			{"ip", "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", pod.Name},
			{"ip", "link", "set", dev, "up"},
		} {
			if out, err := sw.Exec(args...); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
		}
		if out, err := pod.Exec("ip", "link", "set", "eth0", "up"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		devs = append(devs, dev)
	}
	pods[0].AddAddr(t, "eth0", mustPrefix("198.18.0.1/24"))
	pods[1].AddAddr(t, "eth0", mustPrefix("198.18.0.2/24"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bridge(ctx, sw.Name, devs...) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { stop() })
	// The bridge attaches its programs after the test goes on: ping
	// until it is there.
	var out string
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if out, err = pods[0].Exec("ping", "-c", "1", "-W", "1", "198.18.0.2"); err == nil && strings.Contains(out, "1 received") {
			break
		}
	}
	if err != nil {
		t.Fatalf("ping across the bridge: %v: %s", err, out)
	}
	if err := stop(); err != nil {
		t.Fatalf("bridge: %v", err)
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
