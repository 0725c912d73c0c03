package iptext

import (
	"strings"
	"testing"
)

// Every error names what was written and says what is wanted, in the
// user's terms: never a Go function's name.
func TestErrors(t *testing.T) {
	for _, c := range []struct {
		in   string
		f    func(string) error
		want string
	}{
		{"1.2.3", addr, `"1.2.3" is not an IP address (IPv4 address too short)`},
		{"bogus", addr, `"bogus" is not an IP address`},
		{"10.0.0.0", prefix, `"10.0.0.0" is not a prefix: want ADDRESS/LENGTH`},
		{"10.0.0.0/33", prefix, `prefix "10.0.0.0/33": length "33": want 0 to 32 for IPv4`},
		{"2001:db8::/129", prefix, `length "129": want 0 to 128 for IPv6`},
		{"10.0.0.0/x", prefix, `length "x": want 0 to 32`},
		{"10.0.0.0/+8", prefix, `length "+8": want 0 to 32 for IPv4, in decimal`},
		{"10.0.0/8", prefix, `prefix "10.0.0/8": "10.0.0" is not an IP address (IPv4 address too short)`},
		{"fe80::1%eth0/64", prefix, `zones (%eth0) are not allowed`},
		{"bogus", either, `"bogus" is neither a prefix nor an IP address`},
		{"fe80::1%eth0", either, `address "fe80::1%eth0": zones (%eth0) are not allowed`},
		{"10.0.0.0/33", either, `length "33"`},
	} {
		err := c.f(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "Parse") {
			t.Errorf("%q: %v, want %q and no parser's name", c.in, err, c.want)
		}
	}
	for _, ok := range []string{"198.18.0.0/15", "2001:db8::/32", "198.18.1.1/24"} {
		if err := prefix(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	if p, err := ParsePrefixOrAddr("2001:db8::1"); err != nil || p.Bits() != 128 {
		t.Errorf("2001:db8::1: %v %v", p, err)
	}
}

func addr(s string) error   { _, err := ParseAddr(s); return err }
func prefix(s string) error { _, err := ParsePrefix(s); return err }
func either(s string) error { _, err := ParsePrefixOrAddr(s); return err }
