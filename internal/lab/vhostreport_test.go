package lab

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/internal/dpdk"
)

// sampleVhostReport is a --vhost run of the three back-ends, with made-up
// figures: at 64 B softnet 3 Mpps, DPDK 8, Open vSwitch 2.
func sampleVhostReport() *Report {
	v := &VhostResult{OVSVersion: "ovs-vswitchd-dpdk (Open vSwitch) 3.1.0, DPDK 22.11.11", TUN64PPS: 0.2e6, TUNLeak: "ok"}
	pps := map[string]float64{VhostSoftnet: 3e6, VhostDPDK: 8e6, VhostOVS: 2e6}
	for _, frame := range vhostFrames {
		for _, b := range VhostBackends {
			r := VhostRun{Backend: b, Frame: frame, Seconds: 1, Packets: uint64(pps[b]), PPS: pps[b], Gbps: pps[b] * float64(frame) * 8 / 1e9,
				BackendCPUPct: 100, CPUPerPacketNS: 1e9 / pps[b], WorkerCPUPerPacketNS: ptr(1e9 / pps[b])}
			switch b {
			case VhostSoftnet:
				r.AllocsPerPacket, r.Drops, r.Leak, r.Worker = ptr(0.0), &drop.Counts{}, "ok", &VhostActivity{Rounds: 10, BusyRounds: 5}
			case VhostOVS:
				r.PMD = &dpdk.PMDStats{Packets: 2e6, EMCHits: 1999990, MegaflowHits: 8, Upcalls: 2, ProcessingCycles: 1.7e9, IdleCycles: 0.4e9}
			}
			v.Runs = append(v.Runs, r)
		}
	}
	return &Report{Options: Options{Vhost: true, Duration: time.Second}, Traffic: "iperf3 3.12", Vhost: v}
}

// The table and the JSON lines carry each back-end's ratios to DPDK's and
// Open vSwitch's, the CPU per packet, the PMD's counters, and the goals
// softnet >= 0.5x DPDK and >= 1.3x Open vSwitch.
func TestVhostReport(t *testing.T) {
	r := sampleVhostReport()
	goals := map[string]Goal{}
	for _, g := range r.Goals() {
		goals[g.Goal] = g
	}
	for name, want := range map[string]bool{
		"softnet >= 0.50x dpdk-vhost at 64 B":            false, // 0.375
		"softnet >= 1.30x ovs-dpdk at 64 B":              true,  // 1.5
		"softnet vhost-user >= 10x its TUN path at 64 B": true,
		"softnet allocations per packet <= 0.001":        true,
	} {
		g, ok := goals[name]
		if !ok || g.Met != want {
			t.Errorf("goal %q: %+v (found %v), want met=%v; all: %v", name, g, ok, want, goals)
		}
	}
	if len(goals) != 4 {
		t.Errorf("%d goals, want 4: %v", len(goals), goals)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ovs-dpdk: ovs-vswitchd-dpdk (Open vSwitch) 3.1.0, DPDK 22.11.11",
		"vs dpdk-vhost  vs ovs-dpdk",
		"thread ns/packet",
		"Open vSwitch's PMD at 64 B over the window: 2000000 packets, 100.00% EMC hits, 0.00% megaflow hits, 2 upcalls; 850.0 processing cycles per packet, busy 80.95% of its cycles",
		"leak check: ok",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	// Each back-end's line at 64 B: the rate, its ratios to each peer.
	rows := map[string][]string{}
	for _, line := range strings.Split(strings.Split(table.String(), "1500-byte frames")[0], "\n") {
		if f := strings.Fields(line); len(f) > 5 {
			rows[f[0]] = f[1:5]
		}
	}
	for b, want := range map[string][]string{
		VhostSoftnet: {"3.000", "1.54", "0.38x", "1.50x"},
		VhostDPDK:    {"8.000", "4.10", "-", "4.00x"},
		VhostOVS:     {"2.000", "1.02", "0.25x", "-"},
	} {
		if !slices.Equal(rows[b], want) {
			t.Errorf("%s at 64 B: %q, want %q", b, rows[b], want)
		}
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(js.String()), "\n") {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatal(err)
		}
		if obj["experiment"] != "lab-vhost-64" || obj["goal"] != nil {
			continue
		}
		seen++
		ratio, toOVS := obj["ratio"].(float64), obj["ratio_to_ovs-dpdk"]
		switch obj["variant"] {
		case VhostSoftnet:
			if ratio != 3.0/8 || toOVS != 1.5 {
				t.Errorf("softnet: %s", line)
			}
		case VhostDPDK:
			if ratio != 1 || toOVS != 4.0 {
				t.Errorf("dpdk-vhost: %s", line)
			}
		case VhostOVS:
			pmd, _ := obj["ovs_pmd"].(map[string]any)
			if ratio != 0.25 || toOVS != nil || pmd["processing_cycles"] != 1.7e9 || obj["ovs_version"] == nil {
				t.Errorf("ovs-dpdk: %s", line)
			}
		}
	}
	if seen != 3 {
		t.Errorf("%d results at 64 B, want 3:\n%s", seen, js.String())
	}
}
