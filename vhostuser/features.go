package vhostuser

import "strconv"

// featureNames are the feature bits this back-end offers, by the names
// the virtio specification and the kernel's headers give them, lower
// case as `ethtool -k` and QEMU's options write them.
var featureNames = []struct {
	bit  uint64
	name string
}{
	{featCsum, "csum"}, {featGuestCsum, "guest_csum"}, {featGuestTSO4, "guest_tso4"}, {featGuestTSO6, "guest_tso6"},
	{featHostTSO4, "host_tso4"}, {featHostTSO6, "host_tso6"}, {featMrgRxbuf, "mrg_rxbuf"}, {featMQ, "mq"},
	{featEventIdx, "event_idx"}, {featProtocol, "protocol_features"}, {featVersion1, "version_1"}, {featInOrder, "in_order"},
}

// FeatureNames names the virtio feature bits f (Stats.Features), in
// bit order; a bit this back-end does not know is "bitN".
func FeatureNames(f uint64) []string {
	var out []string
	for bit := range uint64(64) {
		b := uint64(1) << bit
		if f&b == 0 {
			continue
		}
		name := "bit" + strconv.FormatUint(bit, 10)
		for _, n := range featureNames {
			if n.bit == b {
				name = n.name
			}
		}
		out = append(out, name)
	}
	return out
}
