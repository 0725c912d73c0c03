package program

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"softnet.dev/internal/iptext"
	"softnet.dev/packet"
)

var protoNames = map[uint8]string{
	packet.ProtoTCP:    "tcp",
	packet.ProtoUDP:    "udp",
	packet.ProtoICMP:   "icmp",
	packet.ProtoICMPv6: "icmpv6",
}

// ParseRule parses the text form of a rule: "allow" or "deny", then any of
// these key=value tokens, in any order, each at most once:
//
//	src=PREFIX|ADDR    source prefix (an address is a host prefix)
//	dst=PREFIX|ADDR    destination prefix
//	proto=NAME|NUMBER  tcp, udp, icmp, icmpv6, or an IP protocol number 1-255
//	sport=PORT[-PORT]  source ports (needs proto=tcp or udp)
//	dport=PORT[-PORT]  destination ports (needs proto=tcp or udp)
//
// for example "deny proto=udp dst=198.18.0.0/15 dport=53" or
// "allow src=2001:db8::/32". Errors quote the offending token.
// Rule.String returns this form.
func ParseRule(s string) (Rule, error) {
	var r Rule
	fail := func(format string, args ...any) (Rule, error) {
		return Rule{}, fmt.Errorf("program: rule %q: %s", s, fmt.Sprintf(format, args...))
	}
	tokens := strings.Fields(s)
	if len(tokens) == 0 {
		return fail("empty: want allow or deny")
	}
	switch tokens[0] {
	case "allow":
		r.Allow = true
	case "deny":
	default:
		return fail("token %q: want allow or deny first", tokens[0])
	}
	seen := map[string]string{}
	for _, tok := range tokens[1:] {
		key, val, ok := strings.Cut(tok, "=")
		if !ok || val == "" {
			return fail("token %q: want key=value", tok)
		}
		if prev, dup := seen[key]; dup {
			return fail("token %q: %s already given by %q", tok, key, prev)
		}
		seen[key] = tok
		var err error
		switch key {
		case "src":
			r.Src, err = parsePrefix(val)
		case "dst":
			r.Dst, err = parsePrefix(val)
		case "proto":
			r.Proto, err = parseProto(val)
		case "sport":
			r.SrcPorts, err = parsePortRange(val)
		case "dport":
			r.DstPorts, err = parsePortRange(val)
		default:
			return fail("token %q: unknown key %q (want src, dst, proto, sport or dport)", tok, key)
		}
		if err != nil {
			return fail("token %q: %v", tok, err)
		}
	}
	if r.Proto != packet.ProtoTCP && r.Proto != packet.ProtoUDP {
		for _, key := range []string{"sport", "dport"} {
			if tok, ok := seen[key]; ok {
				return fail("token %q: ports need proto=tcp or proto=udp", tok)
			}
		}
	}
	r, err := r.validate()
	if err != nil {
		return fail("%v", err)
	}
	return r, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	return iptext.ParsePrefixOrAddr(s)
}

func parseProto(s string) (uint8, error) {
	for p, name := range protoNames {
		if s == name {
			return p, nil
		}
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil || n == 0 {
		return 0, errors.New("want tcp, udp, icmp, icmpv6 or a protocol number 1-255")
	}
	return uint8(n), nil
}

func parsePortRange(s string) (PortRange, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	l, err1 := strconv.ParseUint(lo, 10, 16)
	h, err2 := strconv.ParseUint(hi, 10, 16)
	if err1 != nil || err2 != nil {
		return PortRange{}, errors.New("want a port 1-65535 or a range LO-HI")
	}
	if l > h {
		return PortRange{}, fmt.Errorf("range %d-%d is empty", l, h)
	}
	if h == 0 {
		return PortRange{}, errors.New("port 0 would mean any port: omit the key instead")
	}
	return PortRange{Lo: uint16(l), Hi: uint16(h)}, nil
}

// String returns the rule in the form ParseRule reads.
func (r Rule) String() string {
	var sb strings.Builder
	if r.Allow {
		sb.WriteString("allow")
	} else {
		sb.WriteString("deny")
	}
	if r.Proto != 0 {
		name, ok := protoNames[r.Proto]
		if !ok {
			name = strconv.Itoa(int(r.Proto))
		}
		sb.WriteString(" proto=" + name)
	}
	if r.Src != (netip.Prefix{}) {
		sb.WriteString(" src=" + r.Src.String())
	}
	if r.Dst != (netip.Prefix{}) {
		sb.WriteString(" dst=" + r.Dst.String())
	}
	for _, p := range []struct {
		key string
		r   PortRange
	}{{"sport", r.SrcPorts}, {"dport", r.DstPorts}} {
		switch {
		case p.r.any():
		case p.r.Lo == p.r.Hi:
			fmt.Fprintf(&sb, " %s=%d", p.key, p.r.Lo)
		default:
			fmt.Fprintf(&sb, " %s=%d-%d", p.key, p.r.Lo, p.r.Hi)
		}
	}
	return sb.String()
}
