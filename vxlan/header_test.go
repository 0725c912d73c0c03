package vxlan

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/packet"
)

// frame returns an inner Ethernet frame carrying an IPv4 UDP datagram
// between the given ports, payload bytes long.
func frame(dst, src [6]byte, sport, dport uint16, payload int) []byte {
	b := make([]byte, 14+20+8+payload)
	n := packet.PutEthernet(b, dst, src, packet.EtherTypeIPv4)
	data := b[n+20+8:]
	for i := range data {
		data[i] = byte(i)
	}
	a, z := netip.MustParseAddr("198.18.9.1"), netip.MustParseAddr("198.18.9.2")
	packet.PutUDP(b[n:], netip.AddrPortFrom(a, sport), netip.AddrPortFrom(z, dport), data)
	return b
}

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0xa}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0xb}
)

func datagram(flags, vni, reserved uint32, inner []byte) []byte {
	d := make([]byte, 8+len(inner))
	binary.BigEndian.PutUint32(d[0:4], flags<<24)
	binary.BigEndian.PutUint32(d[4:8], vni<<8|reserved)
	copy(d[8:], inner)
	return d
}

func TestDecode(t *testing.T) {
	inner := frame(macB, macA, 1000, 2000, 10)
	good := make([]byte, HeaderLen+len(inner))
	PutHeader(good, 42)
	copy(good[HeaderLen:], inner)
	if got := datagram(0x08, 42, 0, inner); !bytes.Equal(got, good) {
		t.Fatalf("PutHeader wrote % x, want % x", good[:8], got[:8])
	}
	for _, tc := range []struct {
		name   string
		d      []byte
		reason drop.Reason
	}{
		{"good", good, drop.NotSpecified},
		{"no I flag", datagram(0, 42, 0, inner), drop.VXLANInvalidHdr},
		{"reserved flag bit", datagram(0x08|0x80, 42, 0, inner), drop.VXLANInvalidHdr},
		{"GPE-style flags", datagram(0x0c, 42, 0, inner), drop.VXLANInvalidHdr},
		{"reserved low byte", datagram(0x08, 42, 1, inner), drop.VXLANInvalidHdr},
		{"reserved after flags", append([]byte{0x08, 0, 1, 0}, good[4:]...), drop.VXLANInvalidHdr},
		{"other VNI", datagram(0x08, 43, 0, inner), drop.VXLANVNINotFound},
		{"empty", nil, drop.HdrTrunc},
		{"header only", good[:HeaderLen], drop.HdrTrunc},
		{"inner Ethernet cut", good[:HeaderLen+13], drop.HdrTrunc},
	} {
		got, ok, reason := Decode(tc.d, 42)
		if ok != (tc.reason == drop.NotSpecified) || reason != tc.reason {
			t.Errorf("%s: ok %v reason %v, want %v", tc.name, ok, reason, tc.reason)
		}
		if ok && !bytes.Equal(got, inner) {
			t.Errorf("%s: inner frame differs", tc.name)
		}
	}
	if _, ok, _ := Decode(datagram(0x08, MaxVNI, 0, inner), MaxVNI); !ok {
		t.Error("the largest VNI refused")
	}
}

// A flow's hash picks one sending socket, and so one source port, and
// flows spread over all of them.
func TestSenderOf(t *testing.T) {
	seen := map[int]bool{}
	for sp := range uint16(200) {
		f := frame(macB, macA, 1000+sp, 80, 0)
		h := flowHash(f)
		if flowHash(f) != h {
			t.Fatal("hash not stable")
		}
		seen[senderOf(h, maxSenders)] = true
	}
	if len(seen) != maxSenders {
		t.Errorf("200 flows took only %d of %d sending sockets", len(seen), maxSenders)
	}
	for _, h := range []uint32{0, 1, 1 << 31, ^uint32(0)} {
		if i := senderOf(h, 3); i < 0 || i >= 3 {
			t.Errorf("hash %#x: socket %d of 3", h, i)
		}
	}
	// A later IP fragment hashes without ports, like its first piece's
	// other fragments: the flow stays on one path.
	a, b := frame(macB, macA, 1, 2, 8), frame(macB, macA, 3, 4, 8)
	for _, f := range [][]byte{a, b} {
		binary.BigEndian.PutUint16(f[14+6:], 100) // fragment offset
	}
	if flowHash(a) != flowHash(b) {
		t.Error("fragments hashed by their would-be ports")
	}
	// Short frames must not be read past their end.
	for n := 14; n < 60; n++ {
		flowHash(frame(macB, macA, 1, 2, 20)[:n])
	}
}

func TestFDB(t *testing.T) {
	f := newFDB(2, time.Minute, nil)
	var p pending
	now := int64(time.Hour)
	f.see(&p, macA, 0, now)
	f.see(&p, macA, 0, now) // once per burst
	f.see(&p, [6]byte{0x01, 0, 0x5e, 0, 0, 1}, 0, now)
	f.see(&p, [6]byte{}, 0, now)
	if p.n != 1 {
		t.Fatalf("%d pending, want 1 (group and zero MACs are no stations)", p.n)
	}
	f.commit(&p, now)
	if r, ok := f.lookup(macA, now); !ok || r != 0 {
		t.Fatalf("lookup = %d, %v", r, ok)
	}
	// A station that moves to another remote follows.
	f.see(&p, macA, 1, now)
	f.commit(&p, now)
	if r, _ := f.lookup(macA, now); r != 1 || f.moved.Load() != 1 {
		t.Fatalf("after a move: remote %d, moved %d", r, f.moved.Load())
	}
	// Full: counted, not learned, and not looked at again for a while.
	f.see(&p, macB, 0, now)
	f.commit(&p, now)
	third := [6]byte{0x02, 0, 0, 0, 0, 0xc}
	f.see(&p, third, 0, now)
	f.commit(&p, now)
	if _, ok := f.lookup(third, now); ok || f.full.Load() != 1 {
		t.Fatalf("table of 2 took a third station (full %d)", f.full.Load())
	}
	f.see(&p, third, 0, now)
	if p.n != 0 {
		t.Fatal("a full table was tried again at once")
	}
	// Ageing: lookups ignore old entries, the next copy drops them and
	// frees their room.
	later := now + int64(2*time.Minute)
	if _, ok := f.lookup(macB, later); ok {
		t.Fatal("aged station found")
	}
	f.see(&p, third, 0, later)
	f.commit(&p, later)
	if _, ok := f.lookup(third, later); !ok || f.aged.Load() != 2 || len(*f.table.Load()) != 1 {
		t.Fatalf("after ageing: aged %d, %d entries", f.aged.Load(), len(*f.table.Load()))
	}
	if n := testing.AllocsPerRun(100, func() {
		f.see(&p, third, 0, later)
		if _, ok := f.lookup(third, later); !ok {
			t.Fatal("known station not found")
		}
	}); n != 0 || p.n != 0 {
		t.Errorf("see and lookup of a known station: %v allocs, %d pending", n, p.n)
	}
	f.age(later + int64(2*time.Minute))
	if len(*f.table.Load()) != 0 {
		t.Fatal("age left an aged entry")
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Name: "vx0", VNI: 42, Local: netip.MustParseAddrPort("198.18.0.1:0"), Remotes: []netip.Addr{netip.MustParseAddr("198.18.0.2")}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if d := good.withDefaults(); d.Port != DefaultPort || d.Local.Port() != DefaultPort || d.Queues != 1 {
		t.Fatalf("defaults %+v", d)
	}
	routed := good
	routed.L3, routed.VTEPMAC, routed.Remotes, routed.Static = true, [6]byte{2, 0, 0, 0, 0, 1}, nil, nil
	if err := routed.Validate(); err != nil {
		t.Errorf("a routed port with no remote yet: %v", err)
	}
	v6 := good
	v6.Local, v6.Remotes = netip.MustParseAddrPort("[2001:db8::1]:8472"), []netip.Addr{netip.MustParseAddr("2001:db8::2")}
	if err := v6.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"no name":        func(c *Config) { c.Name = "" },
		"comma in name":  func(c *Config) { c.Name = "a,b" },
		"VNI too large":  func(c *Config) { c.VNI = MaxVNI + 1 },
		"no local":       func(c *Config) { c.Local = netip.AddrPort{} },
		"any local":      func(c *Config) { c.Local = netip.MustParseAddrPort("0.0.0.0:0") },
		"no remote":      func(c *Config) { c.Remotes = nil },
		"mixed families": func(c *Config) { c.Remotes = []netip.Addr{netip.MustParseAddr("2001:db8::2")} },
		"remote is local": func(c *Config) {
			c.Remotes = []netip.Addr{netip.MustParseAddr("198.18.0.1")}
		},
		"duplicate remote": func(c *Config) {
			c.Remotes = []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.2")}
		},
		"multicast remote": func(c *Config) { c.Remotes = []netip.Addr{netip.MustParseAddr("239.1.1.1")} },
		"too many remotes": func(c *Config) { c.Remotes = manyRemotes(MaxRemotes + 1) },
		"queues":           func(c *Config) { c.Queues = maxQueues + 1 },
		"source ports":     func(c *Config) { c.SrcPortMin, c.SrcPortMax = 100, 50 },
		"netns":            func(c *Config) { c.NetNS = "a/b" },
		"static to a stranger": func(c *Config) {
			c.Static = []StaticEntry{{MAC: macA, Remote: netip.MustParseAddr("198.18.0.9")}}
		},
		"static group MAC": func(c *Config) {
			c.Static = []StaticEntry{{MAC: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, Remote: c.Remotes[0]}}
		},
		"static twice": func(c *Config) {
			c.Static = []StaticEntry{{MAC: macA, Remote: c.Remotes[0]}, {MAC: macA, Remote: c.Remotes[0]}}
		},
	} {
		c := good
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A missing local address is said to be missing, not "invalid IP".
	nolocal := good
	nolocal.Local = netip.AddrPort{}
	if err := nolocal.Validate(); err == nil || !strings.Contains(err.Error(), "no local address") {
		t.Errorf("no local address: %v", err)
	}
	most := good
	most.Remotes = manyRemotes(MaxRemotes)
	if err := most.Validate(); err != nil {
		t.Errorf("%d remotes: %v", MaxRemotes, err)
	}
}

// manyRemotes returns n distinct remotes from 198.19.0.1 on.
func manyRemotes(n int) []netip.Addr {
	rs := make([]netip.Addr, n)
	a := netip.MustParseAddr("198.19.0.1")
	for i := range rs {
		rs[i], a = a, a.Next()
	}
	return rs
}

// tcpFrame returns an Ethernet frame with a TCP/IPv4 segment of payload
// bytes whose checksum field holds only the pseudo-header sum, as a
// guest with checksum offload leaves it (virtio-net NEEDS_CSUM).
func tcpFrame(payload int) []byte {
	src, dst := netip.MustParseAddr("198.18.9.1"), netip.MustParseAddr("198.18.9.2")
	b := make([]byte, 14+20+20+payload)
	n := packet.PutEthernet(b, macB, macA, packet.EtherTypeIPv4)
	n += packet.PutIPv4(b[n:], src, dst, 6, 64, 20+payload)
	tcp := b[n:]
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 5001)
	binary.BigEndian.PutUint32(tcp[4:], 1)
	tcp[12] = 5 << 4
	tcp[13] = 0x18 // ACK, PSH
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	binary.BigEndian.PutUint16(tcp[16:], uint16(packet.PseudoHeaderChecksum(6, src, dst, 20+payload)))
	for i := range payload {
		tcp[20+i] = byte(i * 7)
	}
	return b
}

// A frame whose checksum holds only the pseudo-header sum is finished
// on receive; a finished one, a UDP datagram without checksum and a
// non-IP frame are left alone.
func TestFinishPartial(t *testing.T) {
	f := tcpFrame(301)
	if !finishPartial(f) {
		t.Fatal("partial checksum not finished")
	}
	var h packet.Headers
	if ok, _ := packet.Parse(f, packet.L2, &h); !ok || !packet.TransportChecksumOK(f, &h) {
		t.Fatal("finished checksum does not verify")
	}
	done := bytes.Clone(f)
	if finishPartial(f) || !bytes.Equal(f, done) {
		t.Fatal("a finished checksum was touched")
	}
	u := frame(macB, macA, 1, 2, 40)
	binary.BigEndian.PutUint16(u[14+20+6:], 0)
	if finishPartial(u) {
		t.Fatal("UDP without checksum finished")
	}
	if finishPartial(frame(macB, macA, 1, 2, 40)) {
		t.Fatal("a correct UDP checksum finished")
	}
	arp := make([]byte, 60)
	packet.PutEthernet(arp, macB, macA, packet.EtherTypeARP)
	if finishPartial(arp) || finishPartial(f[:20]) {
		t.Fatal("non-IP or cut frame finished")
	}
	if n := testing.AllocsPerRun(100, func() { finishPartial(done) }); n != 0 {
		t.Errorf("%v allocs", n)
	}
}

// No ICMP error answers an ICMP error, and a frame within the MTU or an
// IPv4 packet without DF is not dropped.
func TestTooBigRules(t *testing.T) {
	dst := make([]byte, tooBigRoom)
	if d, n := tooBig(dst, frame(macB, macA, 1, 2, 100), 1450, packet.L2); d || n != 0 {
		t.Error("a frame that fits was dropped")
	}
	big := frame(macB, macA, 1, 2, 1500)
	if d, n := tooBig(dst, big, 1450, packet.L2); !d || n == 0 {
		t.Error("a DF packet too big got no error")
	}
	big[14+6] = 0
	if d, n := tooBig(dst, big, 1450, packet.L2); d || n != 0 {
		t.Error("a packet without DF was dropped")
	}
	icmpErr := frame(macB, macA, 1, 2, 1500)
	icmpErr[14+9] = packet.ProtoICMP
	icmpErr[14+20] = 3 // destination unreachable
	packet.SetIPv4HeaderChecksum(icmpErr[14:34])
	if d, n := tooBig(dst, icmpErr, 1450, packet.L2); !d || n != 0 {
		t.Errorf("an ICMP error: drop %v, answered with %d bytes", d, n)
	}
	echo := bytes.Clone(icmpErr)
	echo[14+20] = 8
	if d, n := tooBig(dst, echo, 1450, packet.L2); !d || n == 0 {
		t.Error("an echo request got no error")
	}
	if n := testing.AllocsPerRun(100, func() { tooBig(dst, echo, 1450, packet.L2) }); n != 0 {
		t.Errorf("%v allocs", n)
	}
}

// A static station is found at its remote, is never learned over and
// takes no room among the learned.
func TestFDBStatic(t *testing.T) {
	f := newFDB(1, time.Minute, map[[6]byte]int32{macA: 1})
	var p pending
	now := int64(time.Hour)
	f.see(&p, macA, 0, now)
	f.see(&p, macB, 0, now)
	f.commit(&p, now)
	if r, ok := f.lookup(macA, now+int64(time.Hour)); !ok || r != 1 {
		t.Fatalf("static station: %d, %v", r, ok)
	}
	if r, ok := f.lookup(macB, now); !ok || r != 0 || f.moved.Load() != 0 {
		t.Fatalf("learned station beside a static one: %d, %v (moved %d)", r, ok, f.moved.Load())
	}
}

// A routed port's packets are IP packets, and so are its errors.
func TestTooBigRouted(t *testing.T) {
	dst := make([]byte, tooBigRoom)
	pkt := frame(macB, macA, 1, 2, 1500)[14:]
	d, n := tooBig(dst, pkt, 1450, packet.L3)
	var h packet.Headers
	if ok, _ := packet.Parse(dst[:n], packet.L3, &h); !d || !ok || h.IPProto != packet.ProtoICMP || h.SrcIP.String() != "198.18.9.2" {
		t.Fatalf("drop %v, error %+v", d, h)
	}
}
