package vhostkind

import (
	"slices"
	"testing"

	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/vhostuser"
)

// A connected front-end's state and metrics: the queue pairs it started
// and the features it negotiated, by name.
func TestFrontendState(t *testing.T) {
	s := vhostuser.Stats{Connected: true, RunningRings: 4, Features: 1<<15 | 1<<32}
	st := frontend(s, 4)
	want := []portkind.Field{{Key: "frontend", Value: "connected"}, {Key: "queue_pairs_enabled", Value: "2 of 4"},
		{Key: "features", Value: "mrg_rxbuf version_1"}, {Key: "feature_bits", Value: "0x100008000"}}
	if st.Summary != "front-end connected, 2 of 4 queue pairs enabled" || !slices.Equal(st.Fields, want) {
		t.Errorf("state %+v", st)
	}
	got := map[string]uint64{}
	(&Counters{s}).Collect(func(m *portkind.Metric, v uint64, labels ...string) {
		if m.Gauge != (m == mConnected || m == mQueuePairs || m == mFeature) {
			t.Errorf("%s: gauge %v", m.Name, m.Gauge)
		}
		key := m.Name
		for _, l := range labels {
			key += "," + l
		}
		got[key] = v
	})
	for key, v := range map[string]uint64{"vhost_user_frontend_connected": 1, "vhost_user_queue_pairs_enabled": 2,
		"vhost_user_feature,mrg_rxbuf": 1, "vhost_user_feature,version_1": 1} {
		if got[key] != v {
			t.Errorf("%s = %d, want %d (all: %v)", key, got[key], v, got)
		}
	}
	if _, ok := got["vhost_user_feature,csum"]; ok {
		t.Error("a feature not negotiated is a series")
	}
}
