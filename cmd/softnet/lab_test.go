package main

import (
	"strings"
	"testing"
)

func TestLabHelp(t *testing.T) {
	out, _, code := run(t, "lab", "--help")
	for _, want := range []string{"kernel-veth", "wireguard-go", "softnet-tun", "--ladder", "--peers", "--tap", "--duration", "--json", "--plot", "--cpuprofile", "--runs", "udp-gso", "latency", "pdr", "--ports", "--workers", "--io", "--idle", "--churn", "--overlay", "--overlay-mode", "--underlay-ipv6", "kernel-kernel", "--vhost", "dpdk-dev", "--vhost-backends", "openvswitch-switch-dpdk"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Fatalf("exit %d, help lacks %q:\n%s", code, want, out)
		}
	}
	root, _, _ := run(t, "--help")
	if !strings.Contains(root, "lab") {
		t.Errorf("softnet --help does not list lab:\n%s", root)
	}
}

// Usage errors are caught before anything is created, root or not.
func TestLabUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"lab", "--duration", "1500ms"},
		{"lab", "--duration", "0s"},
		{"lab", "--modes", "sctp"},
		{"lab", "--modes", "udp,udp"},
		{"lab", "--modes", "latency,latency-udp"},
		{"lab", "--runs", "0"},
		{"lab", "--runs", "100"},
		{"lab", "--pdr-steps", "1"},
		{"lab", "--pdr-trial", "500ms"},
		{"lab", "--traffic", "netperf"},
		{"lab", "--plot", "ladder.png"},
		{"lab", "--plot", "ladder.pdf"},
		{"lab", "extra"},
		{"lab", "--no-such-flag"},
		{"lab", "--ports", "3"},
		{"lab", "--ports", "501"},
		{"lab", "--ports", "8", "--io", "netmap"},
		{"lab", "--ports", "8", "--workers", "9"},
		{"lab", "--ports", "8", "--idle", "100ms"},
		{"lab", "--ports", "8", "--churn", "-1"},
		{"lab", "--ports", "8", "--ladder"},
		{"lab", "--ports", "8", "--modes", "udp"},
		{"lab", "--ports", "8", "--plot", "ports.svg"},
		{"lab", "--ports", "8", "--ipv6"},
		{"lab", "--workers", "2"},
		{"lab", "--io", "syscall"},
		{"lab", "--overlay", "--overlay-mode", "l4"},
		{"lab", "--overlay", "--ladder"},
		{"lab", "--overlay", "--tap"},
		{"lab", "--overlay", "--ports", "8"},
		{"lab", "--overlay", "--plot", "overlay.svg"},
		{"lab", "--overlay", "--modes", "udp-gso"},
		{"lab", "--overlay", "--modes", "latency"},
		{"lab", "--overlay", "--modes", "pdr"},
		{"lab", "--underlay-ipv6"},
		{"lab", "--vhost", "--modes", "udp"},
		{"lab", "--vhost", "--ports", "8"},
		{"lab", "--vhost", "--ladder"},
		{"lab", "--vhost", "--runs", "2"},
		{"lab", "--vhost", "--tap"},
		{"lab", "--vhost", "--vhost-backends", "vpp"},
		{"lab", "--vhost", "--vhost-backends", "softnet,softnet"},
		{"lab", "--vhost-backends", "ovs-dpdk"},
	} {
		_, stderr, code := run(t, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, stderr)
		}
	}
}
