package vnet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"softnet.dev/packet"
)

// partial returns a single packet built from s with its checksum left
// partial, as a guest with checksum offload sends it, and its header.
func partial(s spec) (Header, []byte) {
	s.mss = 0xfffe
	h, pkt := build(s)
	h.GSOType, h.GSOSize = GSONone, 0
	return h, pkt
}

func TestFinishChecksum(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, udp := range []bool{false, true} {
			for _, l2 := range []bool{false, true} {
				for _, size := range []int{0, 1, 2, 7, 1400, 1401, 9000} {
					s := spec{v6: v6, udp: udp, l2: l2, vlan: l2 && size%2 == 1, payload: pattern(size)}
					t.Run(fmt.Sprintf("v6=%v/udp=%v/l2=%v/%d", v6, udp, l2, size), func(t *testing.T) {
						h, pkt := partial(s)
						if ok, reason := Check(h, pkt, s.layer()); !ok {
							t.Fatalf("Check: %v", reason)
						}
						orig := bytes.Clone(pkt)
						if !FinishChecksum(h, pkt) {
							t.Fatal("FinishChecksum refused valid offsets")
						}
						var ph packet.Headers
						if ok, reason := packet.Parse(pkt, s.layer(), &ph); !ok {
							t.Fatalf("Parse: %v", reason)
						}
						if !packet.TransportChecksumOK(pkt, &ph) {
							t.Fatal("checksum does not verify")
						}
						field := int(h.CsumStart + h.CsumOffset)
						if !bytes.Equal(pkt[:field], orig[:field]) || !bytes.Equal(pkt[field+2:], orig[field+2:]) {
							t.Fatal("FinishChecksum changed more than the checksum field")
						}
					})
				}
			}
		}
	}
}

// A sum that comes to 0 is sent as 0xffff: for UDP, 0 means "no
// checksum".
func TestFinishChecksumZero(t *testing.T) {
	h, pkt := partial(spec{udp: true, payload: make([]byte, 64)})
	// With the first payload word 0 the checksum is w, the complement of
	// the sum S; putting w in that word makes the sum S + ~S = 0xffff,
	// whose checksum is 0.
	field := int(h.CsumStart + h.CsumOffset)
	probe := bytes.Clone(pkt)
	FinishChecksum(h, probe)
	w := binary.BigEndian.Uint16(probe[field:])
	binary.BigEndian.PutUint16(pkt[h.CsumStart+packet.UDPHeaderLen:], w)
	if got := packet.Checksum(pkt[h.CsumStart:], 0); got != 0 {
		t.Fatalf("test setup: the sum is %#04x, not 0", got)
	}
	if !FinishChecksum(h, pkt) {
		t.Fatal("FinishChecksum failed")
	}
	if got := binary.BigEndian.Uint16(pkt[field:]); got != 0xffff {
		t.Fatalf("checksum %#04x, want 0xffff", got)
	}
	var ph packet.Headers
	packet.Parse(pkt, packet.L3, &ph)
	if !packet.TransportChecksumOK(pkt, &ph) {
		t.Fatal("0xffff does not verify")
	}
}

func TestFinishChecksumBadOffsets(t *testing.T) {
	pkt := pattern(100)
	for _, h := range []Header{
		{Flags: FlagNeedsCsum, CsumStart: 99},
		{Flags: FlagNeedsCsum, CsumStart: 100},
		{Flags: FlagNeedsCsum, CsumStart: 90, CsumOffset: 9},
		{Flags: FlagNeedsCsum, CsumStart: 0xffff, CsumOffset: 0xffff},
		{Flags: FlagNeedsCsum, CsumStart: 1, CsumOffset: 0xffff},
	} {
		orig := bytes.Clone(pkt)
		if FinishChecksum(h, pkt) {
			t.Errorf("%+v accepted for %d bytes", h, len(pkt))
		}
		if !bytes.Equal(pkt, orig) {
			t.Errorf("%+v: packet changed", h)
		}
	}
	if FinishChecksum(Header{Flags: FlagNeedsCsum}, nil) {
		t.Error("accepted an empty packet")
	}
	// The last two bytes are the last place a checksum can go.
	if !FinishChecksum(Header{Flags: FlagNeedsCsum, CsumStart: 90, CsumOffset: 8}, pkt) {
		t.Error("refused a checksum in the last two bytes")
	}
}

func TestFinishChecksumWithoutFlag(t *testing.T) {
	pkt := pattern(100)
	orig := bytes.Clone(pkt)
	if !FinishChecksum(Header{CsumStart: 0xffff, CsumOffset: 3, Flags: FlagDataValid}, pkt) || !bytes.Equal(pkt, orig) {
		t.Fatal("without NEEDS_CSUM FinishChecksum must do nothing and succeed")
	}
}

func TestFinishChecksumAllocatesNothing(t *testing.T) {
	h, pkt := partial(spec{payload: pattern(1400)})
	if n := testing.AllocsPerRun(1000, func() { FinishChecksum(h, pkt) }); n != 0 {
		t.Errorf("%v allocs/op", n)
	}
}

// BenchmarkFinishChecksum finishes the TCP checksum of a 1500-byte IPv4
// packet.
func BenchmarkFinishChecksum(b *testing.B) {
	b.Run("1500", func(b *testing.B) {
		h, pkt := partial(spec{payload: pattern(1500 - packet.IPv4HeaderLen - packet.TCPHeaderLen)})
		field := pkt[h.CsumStart+h.CsumOffset:]
		pseudo := binary.BigEndian.Uint16(field)
		b.SetBytes(int64(len(pkt)))
		b.ReportAllocs()
		for b.Loop() {
			binary.BigEndian.PutUint16(field, pseudo) // as the guest left it
			if !FinishChecksum(h, pkt) {
				b.Fatal("FinishChecksum failed")
			}
		}
	})
}
