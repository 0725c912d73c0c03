package vswitch

import (
	"strings"

	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/internal/vswitch/portkind/afxdpkind"
	"softnet.dev/internal/vswitch/portkind/tunkind"
	"softnet.dev/internal/vswitch/portkind/vhostkind"
	"softnet.dev/internal/vswitch/portkind/vxlankind"
)

// kinds are the kinds of port the switch has, in the order its help and
// errors list them. Each is a unit of its own, beside package portkind;
// adding one is writing it and registering it here (docs/design.md,
// "Adding a kind of port").
var kinds = []*portkind.Kind{&tunkind.TUN, &tunkind.TAP, &vhostkind.Kind, &vxlankind.Kind, &afxdpkind.Kind}

// kindOf returns the kind named name, or nil.
func kindOf(name string) *portkind.Kind {
	for _, k := range kinds {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// Kinds returns the names of the kinds of port, as specs write them.
func Kinds() []string {
	var names []string
	for _, k := range kinds {
		names = append(names, k.Name)
	}
	return names
}

// GuestDeviceKinds returns the names of the kinds whose port is a
// guest's own interface (portkind.Kind.GuestDevice), as the CNI plugin
// makes a pod's.
func GuestDeviceKinds() []string {
	var names []string
	for _, k := range kinds {
		if k.GuestDevice {
			names = append(names, k.Name)
		}
	}
	return names
}

// kindList joins the kinds' names, or what each gives, as a sentence
// does: "a, b or c".
func kindList(of func(*portkind.Kind) string) string {
	var parts []string
	for _, k := range kinds {
		if s := of(k); s != "" {
			parts = append(parts, s)
		}
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}

// ownerOf returns the first kind whose own options include key, or nil.
func ownerOf(key string) *portkind.Kind {
	for _, k := range kinds {
		for _, o := range k.Keys {
			if o == key {
				return k
			}
		}
	}
	return nil
}

// relayKinds names the kinds whose routes say via= (portkind.Relay).
func relayKinds() string {
	return kindList(func(k *portkind.Kind) string {
		if _, ok := k.New().(portkind.Relay); ok {
			return k.Name
		}
		return ""
	})
}

// KindMetrics are the metrics of the kinds' own counters, which a
// port's DeviceStats.Own gives (portkind.Counters.Collect).
func KindMetrics() []*portkind.Metric {
	var out []*portkind.Metric
	for _, k := range kinds {
		out = append(out, k.Metrics...)
	}
	return out
}
