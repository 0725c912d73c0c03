package vswitch

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"softnet.dev/internal/iptext"
	"softnet.dev/program"
)

// parseAllow parses the allow= syntax: "any", "none", or one or more
// prefixes joined by '+' ("198.18.1.0/24+2001:db8:1::/64"). A bare
// address stands for its host prefix (/32 or /128).
func parseAllow(s string) (program.Allow, error) {
	switch s {
	case "any":
		return program.Allow{Any: true}, nil
	case "none":
		return program.Allow{}, nil
	case "":
		return program.Allow{}, fmt.Errorf("allow: empty (want any, none or PREFIX[+PREFIX...])")
	}
	parts := strings.Split(s, "+")
	if len(parts) > program.MaxAllowPrefixes {
		return program.Allow{}, fmt.Errorf("allow: %d prefixes, at most %d", len(parts), program.MaxAllowPrefixes)
	}
	var a program.Allow
	for _, part := range parts {
		if part == "" {
			return program.Allow{}, fmt.Errorf("allow %q: an empty item between '+'s", s)
		}
		p, err := parsePrefixOrAddr(part)
		if err != nil {
			return program.Allow{}, fmt.Errorf("allow: %w", err)
		}
		if !slices.Contains(a.Prefixes, p) {
			a.Prefixes = append(a.Prefixes, p)
		}
	}
	return a, nil
}

func parsePrefixOrAddr(s string) (netip.Prefix, error) {
	p, err := iptext.ParsePrefixOrAddr(s)
	return p.Masked(), err
}

// parseMACs parses the mac= syntax: one or more unicast Ethernet
// addresses joined by '+' ("02:00:00:00:00:01+02:00:00:00:00:02").
func parseMACs(s string) ([][6]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("mac: empty (want MAC[+MAC...])")
	}
	parts := strings.Split(s, "+")
	if len(parts) > program.MaxPortMACs {
		return nil, fmt.Errorf("mac: %d addresses, at most %d", len(parts), program.MaxPortMACs)
	}
	var out [][6]byte
	for _, part := range parts {
		hw, err := net.ParseMAC(part)
		if err != nil {
			return nil, fmt.Errorf("mac: %w", err)
		}
		if len(hw) != 6 {
			return nil, fmt.Errorf("mac: %q is not a 6-byte Ethernet address", part)
		}
		m := [6]byte(hw)
		switch {
		case m[0]&1 != 0:
			return nil, fmt.Errorf("mac: %s is a multicast address: no station sends from it", part)
		case m == [6]byte{}:
			return nil, fmt.Errorf("mac: %s is all zeros", part)
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out, nil
}

// FormatMACs returns the mac= syntax parseMACs reads.
func FormatMACs(macs [][6]byte) string {
	parts := make([]string, len(macs))
	for i, m := range macs {
		parts[i] = net.HardwareAddr(m[:]).String()
	}
	return strings.Join(parts, "+")
}
