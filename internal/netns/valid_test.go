package netns

import "testing"

func TestValid(t *testing.T) {
	for name, want := range map[string]bool{
		"": true, "blue": true, "/proc/1/ns/net": true, "/run/netns/blue": true,
		"a/b": false, "..": false, ".": false, "/": false, "/run/../x": false, "x\x00": false,
	} {
		if got := Valid(name); got != want {
			t.Errorf("Valid(%q) = %v, want %v", name, got, want)
		}
	}
	for name, want := range map[string]bool{
		"eth0": true, "veth1a2b3c4d5e6": true, "": false, "much-too-long-name": false,
		"a/b": false, "a:b": false, "a b": false, ".": false, "..": false,
		"a\vb": false, "a\rb": false, "\u00e0": false, "a\x00": false,
	} {
		if got := ValidDevName(name); got != want {
			t.Errorf("ValidDevName(%q) = %v, want %v", name, got, want)
		}
	}
}
