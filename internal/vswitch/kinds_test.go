package vswitch

import (
	"slices"
	"testing"

	"softnet.dev/internal/vswitch/portkind"
)

// TestKindMetrics: a kind's counters give only the metrics its Kind
// registers, each with its labels, so that /metrics has a description
// for every value (the control API builds them from KindMetrics).
func TestKindMetrics(t *testing.T) {
	names := map[string]string{}
	for _, k := range kinds {
		for _, m := range k.Metrics {
			if other, dup := names[m.Name]; dup {
				t.Errorf("metric %s of %s is %s's too", m.Name, k.Name, other)
			}
			names[m.Name] = k.Name
		}
		if k.NewCounters == nil {
			if len(k.Metrics) != 0 {
				t.Errorf("%s: metrics without counters", k.Name)
			}
			continue
		}
		k.NewCounters().Collect(func(m *portkind.Metric, _ uint64, labels ...string) {
			switch {
			case !slices.Contains(k.Metrics, m):
				t.Errorf("%s: counters give %s, which the kind does not register", k.Name, m.Name)
			case len(labels) != len(m.Labels):
				t.Errorf("%s: %s with labels %q, want values of %q", k.Name, m.Name, labels, m.Labels)
			}
		})
	}
}
