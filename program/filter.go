package program

import (
	"errors"
	"fmt"
	"net/netip"

	"softnet.dev/drop"
	"softnet.dev/packet"
)

// PortRange is an inclusive range of TCP or UDP ports. The zero value
// matches any port (so "port 0 alone" cannot be expressed, and need not
// be: no service listens there).
type PortRange struct {
	Lo, Hi uint16
}

func (r PortRange) any() bool { return r == PortRange{} }

func (r PortRange) contains(port uint16) bool { return r.Lo <= port && port <= r.Hi }

// Rule matches IP packets by addresses, protocol and ports. A zero field
// matches anything.
type Rule struct {
	Src, Dst           netip.Prefix
	Proto              uint8 // an IP protocol number: packet.ProtoTCP, ProtoUDP, ProtoICMP, ProtoICMPv6 …
	SrcPorts, DstPorts PortRange
	Allow              bool // false: deny
}

// validate checks r and returns it with its prefixes normalized; callers
// add which rule the error is about.
func (r Rule) validate() (Rule, error) {
	for _, p := range []*netip.Prefix{&r.Src, &r.Dst} {
		if *p != (netip.Prefix{}) {
			if !p.IsValid() {
				return r, fmt.Errorf("invalid prefix %v", *p)
			}
			*p = p.Masked()
		}
	}
	for _, pr := range []PortRange{r.SrcPorts, r.DstPorts} {
		if pr.Lo > pr.Hi {
			return r, fmt.Errorf("port range %d-%d is empty", pr.Lo, pr.Hi)
		}
		if !pr.any() && r.Proto != packet.ProtoTCP && r.Proto != packet.ProtoUDP {
			return r, errors.New("ports need proto tcp or udp")
		}
	}
	return r, nil
}

// matches reports whether the parsed IP packet h matches r. Cheap,
// selective fields come first.
func (r *Rule) matches(h *packet.Headers) bool {
	if r.Proto != 0 && r.Proto != h.IPProto {
		return false
	}
	if r.Src.IsValid() && !r.Src.Contains(h.SrcIP) {
		return false
	}
	if r.Dst.IsValid() && !r.Dst.Contains(h.DstIP) {
		return false
	}
	if !r.DstPorts.any() && (h.L4Off == 0 || !r.DstPorts.contains(h.DstPort)) {
		return false
	}
	if !r.SrcPorts.any() && (h.L4Off == 0 || !r.SrcPorts.contains(h.SrcPort)) {
		return false
	}
	return true
}

// Filter is a stateless packet filter: the first rule that matches an IP
// packet decides, allow leaving it to the next program and deny dropping
// it with drop.Filter; a packet no rule matches gets the default policy.
//
// Only IP packets are judged. ARP on L2 ports passes untouched, as
// iptables does not see ARP: a default-deny filter must not cut a guest
// off from address resolution.
//
// A port rule needs the transport header, which only the first fragment
// of a fragmented packet carries: later fragments match no port rule.
// Deny fragments with a rule of their own if that matters.
type Filter struct {
	rules        []Rule
	defaultAllow bool
}

// NewFilter returns a filter of rules, in order, or an error naming the
// first invalid rule.
func NewFilter(rules []Rule, defaultAllow bool) (*Filter, error) {
	f := &Filter{rules: make([]Rule, len(rules)), defaultAllow: defaultAllow}
	for i, r := range rules {
		r, err := r.validate()
		if err != nil {
			return nil, fmt.Errorf("program: rule %d (%v): %w", i, r, err)
		}
		f.rules[i] = r
	}
	return f, nil
}

// Name implements Program.
func (f *Filter) Name() string { return "filter" }

// Rules returns a copy of the rules, normalized.
func (f *Filter) Rules() []Rule { return append([]Rule(nil), f.rules...) }

// Run implements Program.
func (f *Filter) Run(b *Batch) {
	for i := range b.Len() {
		h, ok := b.Undecided(i)
		if !ok {
			continue
		}
		if h.Proto != packet.EtherTypeIPv4 && h.Proto != packet.EtherTypeIPv6 {
			continue
		}
		if !f.allows(h) {
			b.Verdicts[i] = DropVerdict(drop.Filter)
		}
	}
}

func (f *Filter) allows(h *packet.Headers) bool {
	for i := range f.rules {
		if r := &f.rules[i]; r.matches(h) {
			return r.Allow
		}
	}
	return f.defaultAllow
}
