package vnet

import (
	"bytes"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	headers := []Header{
		{},
		{Flags: FlagNeedsCsum, GSOType: GSOTCPv4 | GSOECN, HdrLen: 66, GSOSize: 1448, CsumStart: 34, CsumOffset: 16},
		{Flags: FlagDataValid},
		{Flags: 0xff, GSOType: 0xff, HdrLen: 0xffff, GSOSize: 0xffff, CsumStart: 0xffff, CsumOffset: 0xffff},
		{GSOType: GSOUDPL4, HdrLen: 0x0102, GSOSize: 0x0304, CsumStart: 0x0506, CsumOffset: 0x0708},
	}
	for _, h := range headers {
		var b [HeaderLen + 3]byte
		for i := range b {
			b[i] = 0xaa
		}
		h.Encode(b[:])
		if !bytes.Equal(b[HeaderLen:], []byte{0xaa, 0xaa, 0xaa}) {
			t.Errorf("%+v: Encode wrote past HeaderLen: % x", h, b)
		}
		got, ok := Decode(b[:])
		if !ok || got != h {
			t.Errorf("Decode(Encode(%+v)) = %+v, %v", h, got, ok)
		}
		got, ok = Decode(b[:HeaderLen])
		if !ok || got != h {
			t.Errorf("Decode of exactly HeaderLen bytes = %+v, %v; want %+v", got, ok, h)
		}
	}
}

// The layout is struct virtio_net_hdr with little-endian fields, as TUN
// exchanges it on a little-endian host.
func TestHeaderWireFormat(t *testing.T) {
	h := Header{Flags: FlagNeedsCsum, GSOType: GSOTCPv6, HdrLen: 0x0102, GSOSize: 0x0304, CsumStart: 0x0506, CsumOffset: 0x0708}
	want := []byte{0x01, 0x04, 0x02, 0x01, 0x04, 0x03, 0x06, 0x05, 0x08, 0x07}
	b := make([]byte, HeaderLen)
	h.Encode(b)
	if !bytes.Equal(b, want) {
		t.Fatalf("Encode = % x, want % x", b, want)
	}
}

func TestDecodeShort(t *testing.T) {
	b := []byte{1, 1, 2, 0, 3, 0, 4, 0, 5, 0}
	for n := range HeaderLen {
		if h, ok := Decode(b[:n]); ok || h != (Header{}) {
			t.Errorf("Decode(%d bytes) = %+v, %v", n, h, ok)
		}
	}
	if _, ok := Decode(nil); ok {
		t.Error("Decode(nil) succeeded")
	}
}

func TestEncodeShortPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Encode into 9 bytes did not panic")
		}
	}()
	Header{}.Encode(make([]byte, HeaderLen-1))
}

func TestIsGSO(t *testing.T) {
	for typ, want := range map[uint8]bool{
		GSONone: false, GSOECN: false,
		GSOTCPv4: true, GSOTCPv6: true, GSOUDP: true, GSOUDPL4: true, GSOTCPv4 | GSOECN: true,
		2: true, 0x7f: true, // unknown types are GSO as far as IsGSO goes; Check rejects them
	} {
		if got := (Header{GSOType: typ}).IsGSO(); got != want {
			t.Errorf("IsGSO(%#x) = %v", typ, got)
		}
	}
}

func TestHeaderAllocatesNothing(t *testing.T) {
	b := make([]byte, HeaderLen)
	h := Header{Flags: FlagNeedsCsum, GSOType: GSOTCPv4, HdrLen: 54, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}
	var sink Header
	if n := testing.AllocsPerRun(1000, func() {
		h.Encode(b)
		sink, _ = Decode(b)
	}); n != 0 {
		t.Errorf("Encode+Decode: %v allocs/op", n)
	}
	if sink != h {
		t.Fatalf("round trip gave %+v", sink)
	}
}
