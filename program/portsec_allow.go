package program

import (
	"net/netip"
	"strings"
)

// MaxAllowPrefixes bounds the prefixes of one port's Allow, and
// MaxPortMACs its MACs: a policy is configuration, not a table that
// grows with traffic.
const (
	MaxAllowPrefixes = 1024
	MaxPortMACs      = 64
)

// Allow is the set of source addresses a port may send from.
type Allow struct {
	// Any allows every address: for a port behind which a router forwards
	// for others. It must be asked for explicitly (allow=any).
	Any bool
	// Prefixes are the allowed prefixes when Any is false, normalized
	// (host bits cleared) and without duplicates. None allows nothing.
	Prefixes []netip.Prefix
}

// String returns the allow= syntax of `softnet switch` (docs/api.md):
// "any", "none", or the prefixes joined by '+'.
func (a Allow) String() string {
	if a.Any {
		return "any"
	}
	if len(a.Prefixes) == 0 {
		return "none"
	}
	parts := make([]string, len(a.Prefixes))
	for i, p := range a.Prefixes {
		parts[i] = p.String()
	}
	return strings.Join(parts, "+")
}
