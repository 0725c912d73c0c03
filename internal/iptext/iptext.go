// Package iptext parses the addresses and prefixes users write in
// softnet's flags, specs and configuration files, with errors in the
// user's terms: what was written, what is wrong with it and what is
// wanted, never the parser's own wording (netip.ParsePrefix("..."): ...),
// which names a Go function the user never called.
package iptext

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ParseAddr parses an IPv4 or IPv6 address.
func ParseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, fmt.Errorf("%q is not an IP address (%s): want e.g. 198.18.0.1 or 2001:db8::1", s, reason(err))
	}
	return a, nil
}

// ParsePrefix parses ADDRESS/LENGTH; it keeps host bits, which the
// caller refuses or masks as it needs.
func ParsePrefix(s string) (netip.Prefix, error) {
	addr, bits, ok := strings.Cut(s, "/")
	if !ok {
		return netip.Prefix{}, fmt.Errorf("%q is not a prefix: want ADDRESS/LENGTH, e.g. 198.18.0.0/24 or 2001:db8::/64", s)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("prefix %q: %q is not an IP address (%s)", s, addr, reason(err))
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("prefix %q: zones (%%%s) are not allowed", s, a.Zone())
	}
	family := "IPv4"
	if a.Is6() {
		family = "IPv6"
	}
	if n, err := strconv.Atoi(bits); err != nil || n < 0 || n > a.BitLen() {
		return netip.Prefix{}, fmt.Errorf("prefix %q: length %q: want 0 to %d for %s", s, bits, a.BitLen(), family)
	}
	p, err := netip.ParsePrefix(s)
	if err != nil { // what is left: a length written with a sign or leading zeros
		return p, fmt.Errorf("prefix %q: length %q: want 0 to %d for %s, in decimal", s, bits, a.BitLen(), family)
	}
	return p, nil
}

// ParsePrefixOrAddr parses a prefix, or an address as its host prefix
// (/32, /128); the zones of link-local addresses are refused.
func ParsePrefixOrAddr(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither a prefix nor an IP address (%s): want e.g. 198.18.0.0/24, 198.18.0.1 or 2001:db8::/64", s, reason(err))
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("address %q: zones (%%%s) are not allowed", s, a.Zone())
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// reason is what netip says is wrong, without the call it prints
// before it ("ParseAddr(\"1.2.3\"): IPv4 address too short").
func reason(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, "): "); i >= 0 {
		s = s[i+3:]
	}
	return s
}
