package lab

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestBandwidthOptions(t *testing.T) {
	o, err := Options{Bandwidth: true}.withDefaults()
	if err != nil || len(o.BandwidthRates) != 3 {
		t.Fatalf("defaults: %v, rates %v", err, o.BandwidthRates)
	}
	if b := (Options{BandwidthBurst: 250 * time.Millisecond}).bandwidthBurst(1e9); b != 250e6 {
		t.Errorf("burst of 250 ms at 1 Gbit/s: %d bits", b)
	}
	for _, bad := range []Options{
		{BandwidthRates: []uint64{1e6}},
		{BandwidthPlugin: "/bin/true"},
		{Bandwidth: true, Vhost: true},
		{Bandwidth: true, Ports: 10},
		{Bandwidth: true, Runs: 2},
		{Bandwidth: true, BandwidthRates: []uint64{10}},
		{Bandwidth: true, BandwidthBurst: time.Minute},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// The goals: UDP within 5 % of the rate, TCP at least 0.9x tc's; a
// transfer that failed (0) has no goal.
func TestBandwidthGoalsAndReport(t *testing.T) {
	r := &Report{Traffic: "iperf3 3.12", Options: Options{Bandwidth: true, Duration: 5 * time.Second}, Bandwidth: &BandwidthResult{
		Plugin: BandwidthPluginModule + "@" + BandwidthPluginVersion,
		Rows: []BandwidthRow{
			{Rate: 10e6, Burst: 25e5, Proto: "tcp", Dir: PodEgress, TC: 9.5e6, Softnet: 9.0e6},
			{Rate: 10e6, Burst: 25e5, Proto: "tcp", Dir: PodIngress, TC: 9.5e6, Softnet: 8.0e6},
			{Rate: 10e6, Burst: 25e5, Proto: "udp", Dir: PodEgress, TC: 9.7e6, Softnet: 9.6e6, Police: 7},
			{Rate: 10e6, Burst: 25e5, Proto: "udp", Dir: PodIngress, TC: 9.7e6, Softnet: 10.6e6},
			{Rate: 1e9, Burst: 25e7, Proto: "udp", Dir: PodIngress, TC: 9.7e8},
		},
	}}
	var met []bool
	for _, g := range r.Goals() {
		met = append(met, g.Met)
	}
	if want := []bool{true, false, true, false}; len(met) != len(want) || met[0] != want[0] || met[1] != want[1] || met[2] != want[2] || met[3] != want[3] {
		t.Errorf("goals met %v, want %v: %+v", met, want, r.Goals())
	}
	var table bytes.Buffer
	if err := WriteTable(&table, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10Mbit  2500kbit  udp    pod-egress   9.70", "0.960", "2 of 4 goals met"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	experiments := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(js.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		experiments[m["experiment"].(string)] = true
	}
	if len(experiments) != 4 || !experiments["lab-bandwidth-udp-pod-ingress"] {
		t.Errorf("experiments %v", experiments)
	}
}
