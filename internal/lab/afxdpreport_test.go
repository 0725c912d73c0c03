package lab

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// sampleAFXDPReport is an --afxdp run with made-up figures: udp64
// datagrams/s softnet 400k, TAP 100k, bridge 300k, Open vSwitch 350k;
// TCP Gbit/s softnet 2, bridge 4.
func sampleAFXDPReport() *Report {
	pps := map[string]float64{AFXDPSoftnet: 400e3, AFXDPTAP: 100e3, AFXDPBridge: 300e3, AFXDPOVS: 350e3}
	gbps := map[string]float64{AFXDPSoftnet: 2, AFXDPTAP: 1, AFXDPBridge: 4, AFXDPOVS: 1.5}
	ar := &AFXDPResult{OVSVersion: "ovs-vswitchd-dpdk (Open vSwitch) 3.1.0, DPDK 22.11.11", IdlePorts: 100, IdleSeconds: 5, IdleCPUPct: ptr(0.4), IdleLeak: "ok"}
	for _, c := range AFXDPConfigs {
		vr := VariantResult{Variant: Variant{Name: c}}
		if c == AFXDPSoftnet || c == AFXDPTAP {
			vr.Leak = "ok"
		}
		for _, m := range AFXDPModes {
			res := Result{Mode: m, Variant: c, Duration: 5, PPS: pps[c], Gbps: pps[c] * 64 * 8 / 1e9}
			if m == TCP {
				res.Gbps = gbps[c]
			}
			if c == AFXDPSoftnet {
				res.SyscallsPerPacket, res.AllocsPerPacket = ptr(0.01), ptr(0.0)
			}
			vr.Results = append(vr.Results, res)
		}
		ar.Configs = append(ar.Configs, vr)
	}
	ar.setRatios(AFXDPModes)
	return &Report{Options: Options{AFXDP: true, Duration: 5 * time.Second, Modes: AFXDPModes, Runs: 1}, Traffic: "iperf3 3.12", AFXDP: ar}
}

// The goals are the issue's, as same-run ratios: udp64 against the TAP
// path (3x), Open vSwitch (1.2x) and the bridge (1x), TCP against the
// bridge (0.7x), system calls and allocations per packet, idle CPU; the
// table and the JSON lines carry them and every configuration's ratio
// to the bridge.
func TestAFXDPReport(t *testing.T) {
	r := sampleAFXDPReport()
	goals := map[string]Goal{}
	for _, g := range r.Goals() {
		goals[string(g.Mode)+" "+g.Goal] = g
	}
	for name, want := range map[string]bool{
		"udp64 softnet-afxdp datagrams/s >= 3.00x softnet-tap":   true,  // 4
		"udp64 softnet-afxdp datagrams/s >= 1.20x ovs-afxdp":     false, // 1.14
		"udp64 softnet-afxdp datagrams/s >= 1.00x kernel-bridge": true,  // 1.33
		"tcp softnet-afxdp >= 0.70x kernel-bridge":               false, // 0.5
		"udp64 softnet-afxdp system calls/packet <= 0.05":        true,
		"tcp softnet-afxdp allocs/packet < 0.001":                true,
		"udp64 softnet-afxdp idle CPU with 100 ports <= 1%":      true,
	} {
		g, ok := goals[name]
		if !ok || g.Met != want {
			t.Errorf("goal %q: %+v (found %v), want met=%v; all: %v", name, g, ok, want, goals)
		}
	}
	if len(goals) != 9 {
		t.Errorf("%d goals, want 9: %v", len(goals), goals)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"softnet lab --afxdp", "  softnet-afxdp  0.20    400   1.33x", "  kernel-bridge  4.00    1.00x", "(Open vSwitch) 3.1.0",
		"idle: a switch with 100 afxdp ports on veths, no traffic: 0.40% of one CPU over 5.0 s (leak check ok)", "leak check: ok for every softnet switch process (2 configurations)"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table without %q:\n%s", want, table.String())
		}
	}
	var out bytes.Buffer
	if err := WriteJSON(&out, r); err != nil {
		t.Fatal(err)
	}
	experiments := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if e, ok := v["experiment"].(string); ok && v["variant"] != nil {
			experiments[e]++
		}
	}
	if experiments["lab-afxdp-udp64"] != 4 || experiments["lab-afxdp-tcp"] != 4 || experiments["lab-afxdp-idle"] != 1 {
		t.Errorf("JSON results by experiment %v:\n%s", experiments, out.String())
	}
}

// An --afxdp run is asked for alone, with modes that apply to it, and
// defaults to udp64 and tcp.
func TestAFXDPOptions(t *testing.T) {
	o, err := Options{AFXDP: true}.withDefaults()
	if err != nil || len(o.Modes) != 2 || o.Modes[0] != UDP64 || o.Modes[1] != TCP {
		t.Errorf("defaults: %v, %v", o.Modes, err)
	}
	for _, bad := range []Options{{AFXDP: true, Ports: 10}, {AFXDP: true, Vhost: true}, {AFXDP: true, Overlay: []OverlayKind{OverlayL2}},
		{AFXDP: true, TAP: true}, {AFXDP: true, Modes: []Mode{LatencyUDP}}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: valid", bad)
		}
	}
}
