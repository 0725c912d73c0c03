package packet

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// referenceChecksum is RFC 1071 written as plainly as possible: add the
// big-endian 16-bit words, pad an odd last byte with zero, fold the carries
// back in, complement.
func referenceChecksum(b []byte, initial uint32) uint16 {
	sum := uint64(initial)
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint64(b[i])<<8 | uint64(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint64(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

func TestChecksumKnownVectors(t *testing.T) {
	// RFC 1071 section 3: the words sum to 0xddf2.
	rfc1071 := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	// An IPv4 header with its checksum 0xb861 in place.
	ipv4Header := []byte{
		0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
		0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
	}
	ipv4HeaderZeroed := mutate(ipv4Header, func(b []byte) { b[10], b[11] = 0, 0 })
	allOnes := make([]byte, 70000)
	for i := range allOnes {
		allOnes[i] = 0xff
	}
	cases := []struct {
		name    string
		data    []byte
		initial uint32
		want    uint16
	}{
		{"empty", nil, 0, 0xffff},
		{"empty with initial", nil, 0x1234, ^uint16(0x1234)},
		{"one byte is the high half", []byte{0x01}, 0, 0xfeff},
		{"three bytes", []byte{0x01, 0x02, 0x03}, 0, ^uint16(0x0102 + 0x0300)},
		{"RFC 1071", rfc1071, 0, ^uint16(0xddf2)},
		{"RFC 1071 odd", rfc1071[:7], 0, ^uint16(0xdcfb)}, // 0x0001+0xf203+0xf4f5+0xf600, folded,
		{"IPv4 header verifies", ipv4Header, 0, 0},
		{"IPv4 header computes", ipv4HeaderZeroed, 0, 0xb861},
		{"initial carries", []byte{0xff, 0xff}, 0xffffffff, ^uint16(0xffff)},
		{"70000 bytes of ones", allOnes, 0, 0},
		{"69999 bytes of ones", allOnes[:69999], 0, ^uint16(0xff00)},
	}
	for _, c := range cases {
		if got := Checksum(c.data, c.initial); got != c.want {
			t.Errorf("%s: got %#04x, want %#04x", c.name, got, c.want)
		}
		if got := referenceChecksum(c.data, c.initial); got != c.want {
			t.Errorf("%s: the reference gets %#04x, want %#04x", c.name, got, c.want)
		}
	}
}

// TestChecksumMatchesReference covers every length up to a few hundred
// bytes at every alignment, with random, all-ones and sparse data, so
// every path through the unrolled loop and the tail is taken with and
// without carries.
func TestChecksumMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	backing := make([]byte, 600)
	fills := map[string]func(i int) byte{
		"random":    func(int) byte { return byte(rng.Uint32()) },
		"ones":      func(int) byte { return 0xff },
		"high ones": func(i int) byte { return byte(0xff * (i % 2)) },
		"sparse": func(int) byte {
			r := rng.Uint32()
			return byte(r & (r >> 8) & (r >> 16)) // about one bit in eight set
		},
	}
	initials := []uint32{0, 1, 0xffff, 0x10000, 0xffffffff}
	for name, fill := range fills {
		for i := range backing {
			backing[i] = fill(i)
		}
		for align := 0; align < 8; align++ {
			for n := 0; align+n <= 520; n++ {
				b := backing[align : align+n]
				initial := initials[n%len(initials)]
				if n%7 == 3 {
					initial = rng.Uint32()
				}
				if got, want := Checksum(b, initial), referenceChecksum(b, initial); got != want {
					t.Fatalf("%s, offset %d, length %d, initial %#x: got %#04x, want %#04x",
						name, align, n, initial, got, want)
				}
			}
		}
	}
	for range 200 {
		b := make([]byte, rng.IntN(66000))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if got, want := Checksum(b, 0), referenceChecksum(b, 0); got != want {
			t.Fatalf("length %d: got %#04x, want %#04x", len(b), got, want)
		}
	}
}

// TestChecksumChaining checks the documented way to continue a sum over a
// second region.
func TestChecksumChaining(t *testing.T) {
	b := make([]byte, 301)
	for i := range b {
		b[i] = byte(i * 7)
	}
	want := Checksum(b, 0x1234)
	for split := 0; split <= len(b); split += 2 {
		if got := Checksum(b[split:], uint32(^Checksum(b[:split], 0x1234))); got != want {
			t.Errorf("split at %d: got %#04x, want %#04x", split, got, want)
		}
	}
}

func TestPseudoHeaderChecksum(t *testing.T) {
	cases := []struct {
		src, dst netip.Addr
		proto    uint8
		length   int
	}{
		{ip4A, ip4B, ProtoUDP, 8},
		{netip.MustParseAddr("255.255.255.255"), netip.MustParseAddr("255.255.255.255"), ProtoTCP, 65535},
		{ip6A, ip6B, ProtoTCP, 20},
		{netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), netip.IPv6LinkLocalAllNodes(), ProtoICMPv6, 0x12345},
		{netip.IPv6Unspecified(), netip.MustParseAddr("ff02::1:ff00:b"), ProtoICMPv6, 24},
	}
	for _, c := range cases {
		segment := []byte{0xde, 0xad, 0xbe}
		whole := append(referencePseudoHeader(c.proto, c.src, c.dst, c.length), segment...)
		want := referenceChecksum(whole, 0)
		partial := PseudoHeaderChecksum(c.proto, c.src, c.dst, c.length)
		if partial > 0xffff {
			t.Errorf("%v > %v: partial sum %#x is not folded", c.src, c.dst, partial)
		}
		if got := Checksum(segment, partial); got != want {
			t.Errorf("%v > %v proto %d length %d: got %#04x, want %#04x", c.src, c.dst, c.proto, c.length, got, want)
		}
	}
}

// The 20-byte fast path agrees with the reference checksum on random
// headers, sums that carry out of 64 bits included, and every single
// bit flip of a correct header fails it.
func TestIPv4HeaderChecksumFastPath(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 20))
	for i := range 20000 {
		hdr := make([]byte, IPv4HeaderLen)
		for j := range hdr {
			hdr[j] = byte(r.Uint32())
			if i%4 == 0 {
				hdr[j] |= 0xf0 // large words: the 64-bit adds carry
			}
		}
		hdr[0] = 0x45
		if got, want := IPv4HeaderChecksumOK(hdr), referenceChecksum(hdr, 0) == 0; got != want {
			t.Fatalf("header %x: OK %v, reference %v", hdr, got, want)
		}
		SetIPv4HeaderChecksum(hdr)
		if !IPv4HeaderChecksumOK(hdr) {
			t.Fatalf("header %x does not verify after SetIPv4HeaderChecksum", hdr)
		}
		bit := r.IntN(8 * IPv4HeaderLen)
		hdr[bit/8] ^= 1 << (bit % 8)
		if IPv4HeaderChecksumOK(hdr) != (referenceChecksum(hdr, 0) == 0) {
			t.Fatalf("header %x with bit %d flipped: fast path and reference disagree", hdr, bit)
		}
	}
}

func TestIPv4HeaderChecksum(t *testing.T) {
	withOptions := ipv4Packet(ProtoUDP, 0, []byte{1, 1, 1, 0, 7, 3, 4, 0}, nil)
	for _, hdr := range [][]byte{udp4Packet[:20], withOptions} {
		if !IPv4HeaderChecksumOK(hdr) {
			t.Errorf("header %x does not verify", hdr)
		}
		bad := mutate(hdr, func(b []byte) { b[len(b)-1] ^= 0x10 })
		if IPv4HeaderChecksumOK(bad) {
			t.Errorf("corrupted header %x verifies", bad)
		}
		SetIPv4HeaderChecksum(bad)
		if !IPv4HeaderChecksumOK(bad) {
			t.Errorf("header %x does not verify after SetIPv4HeaderChecksum", bad)
		}
		if got, want := binary.BigEndian.Uint16(bad[10:]), referenceChecksum(mutate(bad, func(b []byte) { b[10], b[11] = 0, 0 }), 0); got != want {
			t.Errorf("SetIPv4HeaderChecksum stored %#04x, want %#04x", got, want)
		}
	}
	// The checksum covers IHL*4 bytes, options included, and not the
	// payload after them.
	if !IPv4HeaderChecksumOK(udp4Packet) {
		t.Error("a header followed by its payload does not verify")
	}
	if IPv4HeaderChecksumOK(withOptions[:27]) {
		t.Error("a header shorter than its IHL verifies")
	}
	for _, short := range [][]byte{nil, udp4Packet[:19], mutate(udp4Packet[:20], func(b []byte) { b[0] = 0x44 })} {
		if IPv4HeaderChecksumOK(short) {
			t.Errorf("%x verifies", short)
		}
		before := append([]byte(nil), short...)
		SetIPv4HeaderChecksum(short)
		if string(before) != string(short) {
			t.Errorf("SetIPv4HeaderChecksum changed an invalid header %x", before)
		}
	}
}

func TestTransportChecksumOK(t *testing.T) {
	check := func(name string, data []byte, from Layer, want bool) {
		t.Helper()
		var h Headers
		if ok, reason := Parse(data, from, &h); !ok {
			t.Fatalf("%s: Parse failed: %v", name, reason)
		}
		if got := TransportChecksumOK(data, &h); got != want {
			t.Errorf("%s: got %v, want %v", name, got, want)
		}
	}
	for _, c := range ipCases() {
		if c.want.L4Off == 0 || c.want.Fragment {
			check(c.name, c.data, L3, false)
			continue
		}
		check(c.name, c.data, L3, true)
		l2 := atL2(c, 0x0005)
		check(l2.name, l2.data, L2, true)
		for i := c.want.L4Off; i < len(c.data); i++ {
			corrupt := mutate(c.data, func(b []byte) { b[i] ^= 0x01 })
			check(c.name+" corrupted", corrupt, L3, false)
		}
		// The pseudo-header covers the addresses; ICMP for IPv4 has none.
		wrongSrc := mutate(c.data, func(b []byte) { b[12] ^= 0x80 })
		check(c.name+" with another source address", wrongSrc, L3, c.want.IPProto == ProtoICMP)
	}

	noChecksum4 := mutate(udp4Packet, func(b []byte) { b[26], b[27] = 0, 0 })
	check("UDP over IPv4 without checksum", noChecksum4, L3, true)
	check("UDP over IPv4 without checksum, corrupted", mutate(noChecksum4, func(b []byte) { b[30] ^= 1 }), L3, true)
	udp6 := ipv6Packet(ProtoUDP, udpDatagram(ip6A, ip6B, 1, 2, []byte("x")))
	check("UDP over IPv6 without checksum", mutate(udp6, func(b []byte) { b[46], b[47] = 0, 0 }), L3, false)

	// A datagram whose sum is 0 carries 0xffff, which verifies.
	zeroSum := udpDatagram(ip4A, ip4B, 1, 2, []byte{0, 0})
	binary.BigEndian.PutUint16(zeroSum[8:], binary.BigEndian.Uint16(zeroSum[6:]))
	withTransportChecksum(ProtoUDP, ip4A, ip4B, zeroSum, 6)
	if got := binary.BigEndian.Uint16(zeroSum[6:]); got != 0 {
		t.Fatalf("test datagram has checksum %#04x, want 0", got)
	}
	binary.BigEndian.PutUint16(zeroSum[6:], 0xffff)
	check("UDP with checksum 0xffff", ipv4Packet(ProtoUDP, 0, nil, zeroSum), L3, true)

	// Ethernet padding is not part of the checksum.
	padded := append(ethernetFrame(EtherTypeIPv4, 0, udp4Packet), 1, 2, 3)
	check("padded frame", padded, L2, true)

	// Headers that do not describe b must not make it panic.
	var h Headers
	Parse(udp4Packet, L3, &h)
	for _, b := range [][]byte{nil, udp4Packet[:30]} {
		if TransportChecksumOK(b, &h) {
			t.Errorf("headers of a longer packet verify a %d-byte slice", len(b))
		}
	}
	h.L3Off = -5
	if TransportChecksumOK(udp4Packet, &h) {
		t.Error("negative L3Off verifies")
	}
}

// TestDecrementTTLIncremental compares the incremental checksum update with
// a full recomputation, for every value of the ID field (which walks the
// checksum through every value it can take) at several TTLs, and for every
// TTL with random headers.
func TestDecrementTTLIncremental(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	hdr := make([]byte, IPv4HeaderLen)
	var h Headers
	try := func(ttl uint8) {
		t.Helper()
		hdr[8] = ttl
		SetIPv4HeaderChecksum(hdr)
		before := binary.BigEndian.Uint16(hdr[10:])
		h = Headers{Proto: EtherTypeIPv4, TTL: ttl}
		if !DecrementTTL(hdr, &h) {
			t.Fatalf("TTL %d: DecrementTTL refused", ttl)
		}
		got := binary.BigEndian.Uint16(hdr[10:])
		SetIPv4HeaderChecksum(hdr)
		if want := binary.BigEndian.Uint16(hdr[10:]); got != want || hdr[8] != ttl-1 || h.TTL != ttl-1 {
			t.Fatalf("header %x, TTL %d, checksum %#04x: got checksum %#04x, TTL %d (h.TTL %d), want %#04x",
				hdr, ttl, before, got, hdr[8], h.TTL, want)
		}
	}
	copy(hdr, udp4Packet[:IPv4HeaderLen])
	seen := make(map[uint16]bool)
	for _, ttl := range []uint8{2, 3, 64, 128, 255} {
		for id := range 1 << 16 {
			binary.BigEndian.PutUint16(hdr[4:], uint16(id))
			try(ttl)
			if ttl == 2 {
				seen[binary.BigEndian.Uint16(hdr[10:])] = true
			}
		}
	}
	if !seen[0x0000] || len(seen) < 0xffff {
		t.Errorf("the ID walk reached %d checksum values (0x0000: %v)", len(seen), seen[0])
	}
	for range 500 {
		for i := range hdr {
			hdr[i] = byte(rng.Uint32())
		}
		hdr[0] = 0x45
		for ttl := 2; ttl <= 255; ttl++ {
			try(uint8(ttl))
		}
	}
}

func TestChecksumAllocs(t *testing.T) {
	b := make([]byte, 1500)
	if a := testing.AllocsPerRun(1000, func() {
		Checksum(b, 0)
		Checksum(b[1:1001], PseudoHeaderChecksum(ProtoUDP, ip6A, ip6B, 1000))
		IPv4HeaderChecksumOK(b)
	}); a != 0 {
		t.Errorf("Checksum: %v allocations per run", a)
	}
}

func BenchmarkChecksum(b *testing.B) {
	data := make([]byte, 65536)
	for i := range data {
		data[i] = byte(i)
	}
	cases := []struct {
		name        string
		size, align int
	}{
		{"1500B", 1500, 0},
		{"1500B/unaligned", 1500, 1},
		{"20B", 20, 0},
		{"64B", 64, 0},
		{"64KiB", 65535, 0},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			buf := data[c.align : c.align+c.size]
			b.ReportAllocs()
			b.SetBytes(int64(c.size))
			for b.Loop() {
				Checksum(buf, 0)
			}
		})
	}
}

// The check the L3 forwarder makes on every IPv4 packet it receives.
func BenchmarkIPv4HeaderChecksumOK(b *testing.B) {
	hdr := make([]byte, IPv4HeaderLen)
	PutIPv4(hdr, netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.1.1"), ProtoUDP, 64, 0)
	b.ReportAllocs()
	for b.Loop() {
		if !IPv4HeaderChecksumOK(hdr) {
			b.Fatal("checksum of a header PutIPv4 wrote is wrong")
		}
	}
}
