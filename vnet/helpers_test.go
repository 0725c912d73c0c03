package vnet

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"go.uber.org/goleak"
	"softnet.dev/buffer"
	"softnet.dev/packet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newTestPool returns a pool and a cache whose leak check must balance
// when the test ends.
func newTestPool(t testing.TB, cfg buffer.Config) (*buffer.Pool, *buffer.Cache) {
	t.Helper()
	p, err := buffer.NewPool(cfg)
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("pool leak check: %v", err)
		}
	})
	c, err := p.NewCache(nil)
	if err != nil {
		t.Fatalf("NewCache: %v", err)
	}
	return p, c
}

// inUse publishes c's counters and returns the number of buffers in use.
func inUse(p *buffer.Pool, c *buffer.Cache) int {
	c.Publish()
	return p.Stats().InUse
}

var (
	src4, dst4 = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.7")
	src6, dst6 = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8:ffff::2")
	guestMAC   = [6]byte{0x52, 0x54, 0, 0x12, 0x34, 0x56}
	routerMAC  = [6]byte{0x02, 0, 0, 0, 0, 0xfe}
)

// Values the builder starts from, chosen so that the IPv4 ID and the TCP
// sequence number wrap within a 64 KiB packet.
const (
	firstID  = 0xfffe
	firstSeq = 0xffff_f000
)

// spec describes a GSO packet for build.
type spec struct {
	v6, udp   bool
	l2, vlan  bool
	payload   []byte
	mss       int
	tcpFlags  byte // default ACK|PSH
	tcpOpts   int  // bytes of TCP options (multiple of 4)
	ipOpts    int  // bytes of IPv4 options (multiple of 4)
	ext       bool // an IPv6 destination options header
	noCsum    bool // TSO without NEEDS_CSUM: the checksum field holds junk
	pad       int  // Ethernet padding after the IP packet
	ufo       bool // GSOUDP instead of GSOUDPL4
	ecn       bool
	hdrLenFix int // added to the correct HdrLen: the hint is not trusted
}

func (s spec) layer() packet.Layer {
	if s.l2 {
		return packet.L2
	}
	return packet.L3
}

// maxPayload returns the largest payload build accepts for s: the GSO
// packet after its Ethernet header may not exceed 65535 bytes.
func (s spec) maxPayload() int {
	return 65535 - s.ipHeaderLen() - s.l4HeaderLen()
}

func (s spec) ipHeaderLen() int {
	if s.v6 {
		if s.ext {
			return packet.IPv6HeaderLen + 8
		}
		return packet.IPv6HeaderLen
	}
	return packet.IPv4HeaderLen + s.ipOpts
}

func (s spec) l4HeaderLen() int {
	if s.udp {
		return packet.UDPHeaderLen
	}
	return packet.TCPHeaderLen + s.tcpOpts
}

// build returns a valid GSO packet as a guest would send it, and its
// header.
func build(s spec) (Header, []byte) {
	pkt := make([]byte, 0, 18+s.ipHeaderLen()+s.l4HeaderLen()+len(s.payload)+s.pad)
	if s.l2 {
		etherType := packet.EtherTypeIPv4
		if s.v6 {
			etherType = packet.EtherTypeIPv6
		}
		eth := make([]byte, packet.EthernetHeaderLen)
		packet.PutEthernet(eth, routerMAC, guestMAC, etherType)
		if s.vlan {
			eth = append(eth[:12], 0x81, 0x00, 0x20, 0x2a, eth[12], eth[13])
		}
		pkt = append(pkt, eth...)
	}
	proto := packet.ProtoTCP
	if s.udp {
		proto = packet.ProtoUDP
	}
	l4Len := s.l4HeaderLen() + len(s.payload)
	var src, dst netip.Addr
	if s.v6 {
		src, dst = src6, dst6
		ip := make([]byte, packet.IPv6HeaderLen)
		next := proto
		if s.ext {
			next = 60
		}
		packet.PutIPv6(ip, src, dst, next, 64, s.ipHeaderLen()-packet.IPv6HeaderLen+l4Len)
		pkt = append(pkt, ip...)
		if s.ext {
			// Destination options: a PadN option fills the 8 bytes.
			pkt = append(pkt, proto, 0, 1, 4, 0, 0, 0, 0)
		}
	} else {
		src, dst = src4, dst4
		ip := make([]byte, s.ipHeaderLen())
		ip[0] = 4<<4 | byte(len(ip)/4)
		ip[1] = 0x02 // ECT(0)
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+l4Len))
		binary.BigEndian.PutUint16(ip[4:], firstID)
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		ip[8], ip[9] = 64, proto
		copy(ip[12:], src.AsSlice())
		copy(ip[16:], dst.AsSlice())
		for i := packet.IPv4HeaderLen; i < len(ip); i++ {
			ip[i] = 1 // NOP options
		}
		packet.SetIPv4HeaderChecksum(ip)
		pkt = append(pkt, ip...)
	}
	l4Off := len(pkt)
	l4 := make([]byte, s.l4HeaderLen())
	binary.BigEndian.PutUint16(l4[0:], 40000)
	binary.BigEndian.PutUint16(l4[2:], 443)
	h := Header{Flags: FlagNeedsCsum, GSOSize: uint16(s.mss), CsumStart: uint16(l4Off)}
	pseudo := uint16(packet.PseudoHeaderChecksum(proto, src, dst, l4Len))
	if s.udp {
		binary.BigEndian.PutUint16(l4[4:], uint16(l4Len))
		binary.BigEndian.PutUint16(l4[6:], pseudo)
		h.GSOType, h.CsumOffset = GSOUDPL4, udpCsumOffset
		if s.ufo {
			h.GSOType = GSOUDP
		}
	} else {
		binary.BigEndian.PutUint32(l4[4:], firstSeq)
		binary.BigEndian.PutUint32(l4[8:], 0x01020304) // ack
		l4[12] = byte(len(l4)/4) << 4
		l4[13] = s.tcpFlags
		if l4[13] == 0 {
			l4[13] = 0x10 | tcpPSH // ACK|PSH
		}
		binary.BigEndian.PutUint16(l4[14:], 501) // window
		binary.BigEndian.PutUint16(l4[16:], pseudo)
		binary.BigEndian.PutUint16(l4[18:], 0x0102) // urgent pointer, carried as is
		for i := packet.TCPHeaderLen; i < len(l4); i++ {
			l4[i] = 1 // NOP options
		}
		h.GSOType, h.CsumOffset = GSOTCPv4, tcpCsumOffset
		if s.v6 {
			h.GSOType = GSOTCPv6
		}
		if s.ecn {
			h.GSOType |= GSOECN
		}
		if s.noCsum {
			h.Flags, h.CsumStart, h.CsumOffset = 0, 0, 0
			binary.BigEndian.PutUint16(l4[16:], 0xdead)
		}
	}
	pkt = append(pkt, l4...)
	h.HdrLen = uint16(len(pkt) + s.hdrLenFix)
	pkt = append(pkt, s.payload...)
	for range s.pad {
		pkt = append(pkt, 0xee) // not zeros: padding must not be summed
	}
	return h, pkt
}

// pattern returns n bytes that differ from one segment to the next.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// checkSegments checks segs, made from the GSO packet pkt with header h:
// every segment parses, has correct lengths, checksums (transport ones if
// csum) and header fields for its position, and the payloads add up to
// the original payload.
func checkSegments(t testing.TB, p *buffer.Pool, h Header, pkt []byte, layer packet.Layer, segs []*buffer.Buf, csum bool) {
	t.Helper()
	var ph packet.Headers
	if ok, reason := packet.Parse(pkt, layer, &ph); !ok {
		t.Fatalf("original does not parse: %v", reason)
	}
	tcp := ph.IPProto == packet.ProtoTCP
	v4 := ph.Proto == packet.EtherTypeIPv4
	end := ph.L3Off + ph.L3Len
	hdrLen := ph.L4Off + packet.UDPHeaderLen
	if tcp {
		hdrLen = ph.L4Off + int(pkt[ph.L4Off+12]>>4)*4
	}
	payload := pkt[hdrLen:end]
	mss := int(h.GSOSize)
	want := max(1, (len(payload)+mss-1)/mss)
	if len(segs) != want {
		t.Fatalf("%d segments, want %d (payload %d, mss %d)", len(segs), want, len(payload), mss)
	}
	if n := SegmentCount(h, pkt, layer); n != want {
		t.Fatalf("SegmentCount = %d, want %d", n, want)
	}
	id0 := binary.BigEndian.Uint16(pkt[ph.L3Off+4:])
	var seq0 uint32
	var flags0 byte
	if tcp {
		seq0 = binary.BigEndian.Uint32(pkt[ph.L4Off+4:])
		flags0 = pkt[ph.L4Off+13]
	}
	var joined []byte
	for i, b := range segs {
		d := b.Bytes()
		var sh packet.Headers
		if ok, reason := packet.Parse(d, layer, &sh); !ok {
			t.Fatalf("segment %d does not parse: %v", i, reason)
		}
		switch {
		case sh.L3Off != ph.L3Off || sh.L4Off != ph.L4Off:
			t.Fatalf("segment %d: L3 at %d, L4 at %d; want %d, %d", i, sh.L3Off, sh.L4Off, ph.L3Off, ph.L4Off)
		case sh.L3Off+sh.L3Len != len(d):
			t.Fatalf("segment %d: IP length %d + %d, segment %d bytes", i, sh.L3Off, sh.L3Len, len(d))
		case !bytes.Equal(d[:ph.L3Off], pkt[:ph.L3Off]):
			t.Fatalf("segment %d: Ethernet header % x, want % x", i, d[:ph.L3Off], pkt[:ph.L3Off])
		case sh.Fragment:
			t.Fatalf("segment %d is a fragment", i)
		}
		if c, ok := p.ClassFor(hdrLen + min(mss, len(payload))); !ok || b.Class() != c {
			t.Fatalf("segment %d in class %d, want %d", i, b.Class(), c)
		}
		ip, orig := d[ph.L3Off:], pkt[ph.L3Off:]
		if v4 {
			if !packet.IPv4HeaderChecksumOK(ip) {
				t.Fatalf("segment %d: bad IPv4 header checksum", i)
			}
			if id := binary.BigEndian.Uint16(ip[4:]); id != id0+uint16(i) {
				t.Fatalf("segment %d: IPv4 ID %#x, want %#x", i, id, id0+uint16(i))
			}
			if !bytes.Equal(ip[:2], orig[:2]) || !bytes.Equal(ip[6:10], orig[6:10]) || !bytes.Equal(ip[12:ph.L4Off-ph.L3Off], orig[12:ph.L4Off-ph.L3Off]) {
				t.Fatalf("segment %d: IPv4 header % x, original % x", i, ip[:ph.L4Off-ph.L3Off], orig[:ph.L4Off-ph.L3Off])
			}
		} else if !bytes.Equal(ip[:4], orig[:4]) || !bytes.Equal(ip[6:ph.L4Off-ph.L3Off], orig[6:ph.L4Off-ph.L3Off]) {
			t.Fatalf("segment %d: IPv6 headers % x, original % x", i, ip[:ph.L4Off-ph.L3Off], orig[:ph.L4Off-ph.L3Off])
		}
		if csum && !packet.TransportChecksumOK(d, &sh) {
			t.Fatalf("segment %d: bad transport checksum", i)
		}
		l4, ol4 := d[ph.L4Off:], pkt[ph.L4Off:]
		if !bytes.Equal(l4[:4], ol4[:4]) {
			t.Fatalf("segment %d: ports % x, want % x", i, l4[:4], ol4[:4])
		}
		chunk := d[hdrLen:]
		if len(chunk) > mss || i < len(segs)-1 && len(chunk) != mss {
			t.Fatalf("segment %d of %d: %d payload bytes, mss %d", i, len(segs), len(chunk), mss)
		}
		if tcp {
			if seq := binary.BigEndian.Uint32(l4[4:]); seq != seq0+uint32(len(joined)) {
				t.Fatalf("segment %d: seq %#x, want %#x", i, seq, seq0+uint32(len(joined)))
			}
			wantFlags := flags0
			if i > 0 {
				wantFlags &^= tcpCWR
			}
			if i < len(segs)-1 {
				wantFlags &^= tcpFIN | tcpPSH
			}
			if l4[13] != wantFlags {
				t.Fatalf("segment %d: flags %#x, want %#x", i, l4[13], wantFlags)
			}
			if !bytes.Equal(l4[8:13], ol4[8:13]) || !bytes.Equal(l4[14:16], ol4[14:16]) || !bytes.Equal(l4[18:hdrLen-ph.L4Off], ol4[18:hdrLen-ph.L4Off]) {
				t.Fatalf("segment %d: TCP header % x, original % x", i, l4[:hdrLen-ph.L4Off], ol4[:hdrLen-ph.L4Off])
			}
		} else {
			if n := binary.BigEndian.Uint16(l4[4:]); int(n) != len(l4) {
				t.Fatalf("segment %d: UDP length %d, want %d", i, n, len(l4))
			}
			if l4[6] == 0 && l4[7] == 0 {
				t.Fatalf("segment %d: UDP checksum 0", i)
			}
		}
		joined = append(joined, chunk...)
	}
	if !bytes.Equal(joined, payload) {
		t.Fatalf("segment payloads (%d bytes) differ from the original's (%d bytes)", len(joined), len(payload))
	}
}
