package program

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// The map-per-length lookup must agree with the definition: the longest
// prefix that contains the address.
func TestRouteTableMatchesLinearScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randAddr := func(v4 bool) netip.Addr {
		if v4 {
			// A small space, so that prefixes overlap often.
			return netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(4)), byte(rng.IntN(256))})
		}
		var b [16]byte
		b[0], b[1], b[7], b[15] = 0xfd, byte(rng.IntN(2)), byte(rng.IntN(4)), byte(rng.IntN(256))
		return netip.AddrFrom16(b)
	}
	ports := map[netip.Prefix]int{}
	for i := range 500 {
		v4 := i%2 == 0
		a := randAddr(v4)
		p, _ := a.Prefix(rng.IntN(a.BitLen() + 1))
		ports[p] = i
	}
	table := newRouteTable(ports)
	for range 20000 {
		a := randAddr(rng.IntN(2) == 0)
		want, wantOK, bestBits := 0, false, -1
		for p, port := range ports {
			if p.Contains(a) && p.Bits() > bestBits {
				want, wantOK, bestBits = port, true, p.Bits()
			}
		}
		if got, ok := table.lookup(a); got != want || ok != wantOK {
			t.Fatalf("lookup(%v) = %d, %v; want %d, %v (/%d)", a, got, ok, want, wantOK, bestBits)
		}
	}
}

func TestIPv4RouteKey(t *testing.T) {
	x := ipv4Bits(netip.MustParseAddr("10.1.2.3"))
	for bits, want := range map[int]string{0: "0.0.0.0", 8: "10.0.0.0", 23: "10.1.2.0", 31: "10.1.2.2", 32: "10.1.2.3"} {
		w := ipv4Bits(netip.MustParseAddr(want))
		if got := ipv4RouteKey(x, bits); got != uint64(w)<<8|uint64(bits) {
			t.Errorf("/%d: key %#x, want %s/%d", bits, got, want, bits)
		}
	}
}
