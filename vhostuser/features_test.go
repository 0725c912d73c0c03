package vhostuser

import (
	"strings"
	"testing"
)

func TestFeatureNames(t *testing.T) {
	if got := strings.Join(FeatureNames(baseFeatures|featCsum|1<<63), " "); got != "csum mrg_rxbuf event_idx protocol_features version_1 in_order bit63" {
		t.Errorf("FeatureNames: %q", got)
	}
	if FeatureNames(0) != nil {
		t.Error("no features have names")
	}
}
