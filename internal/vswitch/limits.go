package vswitch

import (
	"fmt"
	"strconv"
	"strings"

	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/program"
)

// Rate limits are in bits (per second for rates), as the CNI bandwidth
// capability gives them, with an SI suffix or none: 100M is 100 Mbit/s.
var bitSuffixes = []struct {
	suffix string
	mult   uint64
}{{"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"k", 1e3}}

// ParseBits reads a number of bits (the option key, for errors): digits and an optional suffix k, M,
// G or T (powers of 1000, either case).
func ParseBits(key, v string) (uint64, error) {
	num, mult := v, uint64(1)
	if v != "" {
		for _, s := range bitSuffixes {
			if strings.EqualFold(v[len(v)-1:], s.suffix) {
				num, mult = v[:len(v)-1], s.mult
			}
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n > ^uint64(0)/mult {
		unit := "bits"
		if strings.HasSuffix(key, "-rate") {
			unit = "bits per second"
		}
		return 0, fmt.Errorf("%s %q: want a number of %s, such as 100M (k, M, G, T: powers of 1000)", key, v, unit)
	}
	return n * mult, nil
}

// formatBits writes n as ParseBits reads it, with the largest suffix
// that keeps it exact.
func formatBits(n uint64) string {
	for _, s := range bitSuffixes {
		if n >= s.mult && n%s.mult == 0 {
			return strconv.FormatUint(n/s.mult, 10) + s.suffix
		}
	}
	return strconv.FormatUint(n, 10)
}

// DefaultBurst is the burst of a rate given without one: 250 ms of the
// rate, and at least 64 KiB. A policer drops where a shaper would queue,
// and a TCP flow that loses a window's tail waits for its retransmission
// timer (200 ms at least, Linux's tcp_rto_min): a bucket that holds
// that long of the rate keeps the tokens the wait would waste, so the
// flow gets its rate over time (the lab's --bandwidth measures it: 52 ms
// gave TCP a third of tc's shaper's goodput at 10 Mbit/s, 250 ms as much).
func DefaultBurst(rate uint64) uint64 { return max(rate/4, 8*64<<10) }

// limitOptions are the rate limits' options, each direction's.
var limitOptions = []struct {
	rate, burst string
	of          func(c *portkind.Common) *program.Limit
}{
	{"ingress-rate", "ingress-burst", func(c *portkind.Common) *program.Limit { return &c.Ingress }},
	{"egress-rate", "egress-burst", func(c *portkind.Common) *program.Limit { return &c.Egress }},
}

// setLimit sets one of the rate limits' options.
func (p *PortSpec) setLimit(key, v string) error {
	n, err := ParseBits(key, v)
	if err != nil {
		return err
	}
	for _, o := range limitOptions {
		switch key {
		case o.rate:
			o.of(&p.Common).Rate = n
		case o.burst:
			o.of(&p.Common).Burst = n
		}
	}
	return nil
}

// checkLimits gives a rate without a burst the default one and checks
// the limits.
func (p *PortSpec) checkLimits() error {
	for _, o := range limitOptions {
		l := o.of(&p.Common)
		switch {
		case l.Burst != 0 && l.Rate == 0:
			return fmt.Errorf("%s needs %s", o.burst, o.rate)
		case l.Rate != 0 && l.Burst == 0:
			l.Burst = DefaultBurst(l.Rate)
		}
		if err := l.Valid(); err != nil {
			return fmt.Errorf("%s, %s: %w", o.rate, o.burst, err)
		}
	}
	return nil
}

// limitFields are p's rate limits as a spec writes them, a default burst
// left out.
func (p PortSpec) limitFields() []portkind.Field {
	var out []portkind.Field
	for _, o := range limitOptions {
		l := *o.of(&p.Common)
		if l.Rate == 0 {
			continue
		}
		out = append(out, portkind.Field{Key: o.rate, Value: formatBits(l.Rate)})
		if l.Burst != DefaultBurst(l.Rate) {
			out = append(out, portkind.Field{Key: o.burst, Value: formatBits(l.Burst)})
		}
	}
	return out
}
