package program

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/packet"
)

// pktEnv owns a pool and a cache for one test, builds real packets in its
// buffers, and frees them all at the end, when the pool's leak check must
// pass.
type pktEnv struct {
	t     testing.TB
	pool  *buffer.Pool
	cache *buffer.Cache
	bufs  []*buffer.Buf
}

func newPktEnv(t testing.TB) *pktEnv {
	t.Helper()
	pool, err := buffer.NewPool(buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 1024}}})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := pool.NewCache(nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &pktEnv{t: t, pool: pool, cache: cache}
	t.Cleanup(func() {
		e.cache.ConsumeBulk(e.bufs)
		if err := pool.Close(); err != nil {
			t.Errorf("pool leak check: %v", err)
		}
	})
	return e
}

// pkt returns a buffer holding what fill writes.
func (e *pktEnv) pkt(fill func(b []byte) int) *buffer.Buf {
	e.t.Helper()
	b, err := e.cache.Get(0)
	if err != nil {
		e.t.Fatal(err)
	}
	e.bufs = append(e.bufs, b)
	data, _ := b.Append(b.Tailroom())
	b.Truncate(fill(data))
	return b
}

// batch returns a batch of the packets fill functions write, all Pass.
func (e *pktEnv) batch(layer packet.Layer, ingress int, now int64, fills ...func([]byte) int) *Batch {
	e.t.Helper()
	b := NewBatch(max(len(fills), 1))
	for _, fill := range fills {
		b.Bufs = append(b.Bufs, e.pkt(fill))
	}
	b.Reset(len(fills))
	b.Layer, b.Ingress, b.Now = layer, ingress, now
	return b
}

func wantVerdicts(t testing.TB, b *Batch, want ...Verdict) {
	t.Helper()
	if len(want) != b.Len() {
		t.Fatalf("want %d verdicts for %d packets", len(want), b.Len())
	}
	for i, w := range want {
		if got := b.Verdicts[i]; got != w {
			t.Errorf("packet %d: verdict %v, want %v", i, got, w)
		}
	}
}

func mac(n byte) [6]byte { return [6]byte{0x02, 0, 0, 0, 0, n} }

// ipPkt writes an IP packet from src to dst: UDP and TCP with the given
// ports, ICMP and ICMPv6 with sport as type and dport as code.
func ipPkt(src, dst string, proto uint8, sport, dport uint16) func([]byte) int {
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	return func(b []byte) int {
		if proto == packet.ProtoUDP {
			return packet.PutUDP(b, netip.AddrPortFrom(s, sport), netip.AddrPortFrom(d, dport), []byte("payload"))
		}
		l4 := packet.ICMPHeaderLen
		if proto == packet.ProtoTCP {
			l4 = packet.TCPHeaderLen
		}
		n := packet.PutIPv6
		if s.Is4() {
			n = packet.PutIPv4
		}
		off := n(b, s, d, proto, 64, l4)
		t := b[off : off+l4]
		clear(t)
		if proto == packet.ProtoTCP {
			binary.BigEndian.PutUint16(t[0:], sport)
			binary.BigEndian.PutUint16(t[2:], dport)
			t[12] = packet.TCPHeaderLen / 4 << 4
		} else {
			t[0], t[1] = uint8(sport), uint8(dport)
		}
		return off + l4
	}
}

func udp(src, dst string) func([]byte) int { return ipPkt(src, dst, packet.ProtoUDP, 1234, 53) }

// ether wraps what inner writes in an Ethernet header.
func ether(dst, src [6]byte, etherType uint16, inner func([]byte) int) func([]byte) int {
	return func(b []byte) int {
		n := packet.PutEthernet(b, dst, src, etherType)
		return n + inner(b[n:])
	}
}

func arpFrame(op uint16, from [6]byte, fromIP string, to [6]byte, toIP string) func([]byte) int {
	dst := to
	if op == packet.ARPRequest {
		dst, to = packet.Broadcast, [6]byte{}
	}
	return ether(dst, from, packet.EtherTypeARP, func(b []byte) int {
		return packet.PutARP(b, op, from, netip.MustParseAddr(fromIP), to, netip.MustParseAddr(toIP))
	})
}

// nsFrame is a neighbour solicitation for target, sent to its
// solicited-node group.
func nsFrame(from [6]byte, src, target string) func([]byte) int {
	t := netip.MustParseAddr(target)
	group := packet.MulticastMAC(packet.SolicitedNodeMulticast(t))
	return ether(group, from, packet.EtherTypeIPv6, func(b []byte) int {
		return packet.PutICMPv6NeighborSolicitation(b, netip.MustParseAddr(src), t, from)
	})
}

// naFrame is the unicast neighbour advertisement answering a solicitation
// (RFC 4861, 4.4): solicited and override flags, the target, and the
// target link-layer address option.
func naFrame(from, to [6]byte, src, dst string) func([]byte) int {
	return naClaim(from, to, src, dst, src, from)
}

// naClaim is a neighbour advertisement from src claiming that target is
// at lla.
func naClaim(from, to [6]byte, src, dst, target string, lla [6]byte) func([]byte) int {
	s, d, tg := netip.MustParseAddr(src), netip.MustParseAddr(dst), netip.MustParseAddr(target)
	return ether(to, from, packet.EtherTypeIPv6, func(b []byte) int {
		const icmpLen = 32
		n := packet.PutIPv6(b, s, d, packet.ProtoICMPv6, 255, icmpLen)
		icmp := b[n : n+icmpLen]
		clear(icmp)
		icmp[0] = 136  // neighbour advertisement
		icmp[4] = 0x60 // solicited, override
		a := tg.As16()
		copy(icmp[8:], a[:])
		icmp[24], icmp[25] = 2, 1 // target link-layer address, 8 bytes
		copy(icmp[26:32], lla[:])
		binary.BigEndian.PutUint16(icmp[2:], packet.Checksum(icmp, packet.PseudoHeaderChecksum(packet.ProtoICMPv6, s, d, icmpLen)))
		return n + icmpLen
	})
}

// raw writes the given bytes as they are, for malformed packets.
func raw(data []byte) func([]byte) int {
	return func(b []byte) int { return copy(b, data) }
}

// bytesOf returns what fill writes, for corrupting before use.
func bytesOf(fill func([]byte) int) []byte {
	b := make([]byte, 2048)
	return b[:fill(b)]
}
