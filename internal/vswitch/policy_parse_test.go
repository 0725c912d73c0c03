package vswitch

import (
	"slices"
	"strings"
	"testing"

	"softnet.dev/program"
)

func TestParseAllowAndMACs(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"any", "any", ""},
		{"none", "none", ""},
		{"198.18.1.7/24+2001:db8:1::/64+198.18.1.0/24", "198.18.1.0/24+2001:db8:1::/64", ""},
		{"198.18.1.7", "198.18.1.7/32", ""},
		{"2001:db8::1", "2001:db8::1/128", ""},
		{"", "", "empty"},
		{"198.18.1.0/33", "", "allow"},
		{"fe80::1%eth0", "", "zones"},
		{"198.18.1.0/24+", "", `allow "198.18.1.0/24+": an empty item between '+'s`},
		{"any+198.18.1.0/24", "", "neither"},
		{strings.Repeat("198.18.1.1+", program.MaxAllowPrefixes) + "198.18.1.1", "", "at most"},
	} {
		a, err := parseAllow(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseAllow(%q) error %v, want one mentioning %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || a.String() != tc.want):
			t.Errorf("parseAllow(%q) = %v, %v; want %s", tc.in, a, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want, err string }{
		{"02:00:00:00:00:01", "02:00:00:00:00:01", ""},
		{"02:00:00:00:00:01+02-00-00-00-00-02+02:00:00:00:00:01", "02:00:00:00:00:01+02:00:00:00:00:02", ""},
		{"", "", "empty"},
		{"01:00:5e:00:00:01", "", "multicast"},
		{"00:00:00:00:00:00", "", "all zeros"},
		{"02:00:00:00:00:01:02:03", "", "6-byte"},
		{"zz", "", "mac"},
	} {
		m, err := parseMACs(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseMACs(%q) error %v, want one mentioning %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || FormatMACs(m) != tc.want):
			t.Errorf("parseMACs(%q) = %v, %v; want %s", tc.in, m, err, tc.want)
		}
	}
}

// Whatever the input, the parsers return a policy that compiles and
// prints back to itself, or an error; never a panic.
func FuzzParsePolicy(f *testing.F) {
	for _, s := range []struct{ allow, macs string }{
		{"any", "02:00:00:00:00:01"},
		{"198.18.1.0/24+2001:db8:1::/64", "02:00:00:00:00:01+02:00:00:00:00:02"},
		{"198.18.1.1", "02-00-00-00-00-01"},
		{"none", "0200.0000.0001"},
		{"::ffff:198.18.1.1/128+198.18.0.0/15", ""},
	} {
		f.Add(s.allow, s.macs)
	}
	f.Fuzz(func(t *testing.T, allow, macs string) {
		a, aerr := parseAllow(allow)
		if aerr == nil {
			back, err := parseAllow(a.String())
			if err != nil || back.String() != a.String() || back.Any != a.Any || !slices.Equal(back.Prefixes, a.Prefixes) {
				t.Fatalf("parseAllow(%q) = %v, which parses back as %v, %v", allow, a, back, err)
			}
		}
		m, merr := parseMACs(macs)
		if merr == nil {
			back, err := parseMACs(FormatMACs(m))
			if err != nil || !slices.Equal(back, m) {
				t.Fatalf("parseMACs(%q) = %v, which parses back as %v, %v", macs, m, back, err)
			}
		}
		if aerr == nil && merr == nil {
			if _, err := program.NewPortSecurity(map[int]program.PortPolicy{0: {Allow: a, MACs: m}}); err != nil {
				t.Fatalf("parsed policy %v %v does not compile: %v", a, m, err)
			}
		}
	})
}
