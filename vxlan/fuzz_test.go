package vxlan

import (
	"bytes"
	"encoding/binary"
	"testing"

	"softnet.dev/drop"
)

// FuzzDecode feeds arbitrary datagrams to the decoder: it must not
// panic, must accept only a header with exactly the I flag, no reserved
// bit and the VNI, and must hand back the bytes after the header.
func FuzzDecode(f *testing.F) {
	inner := frame(macB, macA, 1, 2, 30)
	f.Add(datagram(0x08, 42, 0, inner))
	f.Add(datagram(0x0c, 42, 0, inner))
	f.Add(datagram(0x08, 43, 0, inner))
	f.Add(datagram(0x08, 42, 0, inner[:5]))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, d []byte) {
		got, ok, reason := Decode(d, 42)
		if !ok {
			if reason == drop.NotSpecified {
				t.Fatal("refused without a reason")
			}
			return
		}
		if len(d) < HeaderLen+minInnerLen || d[0] != 0x08 || d[1]|d[2]|d[3]|d[7] != 0 || binary.BigEndian.Uint32(d[4:8])>>8 != 42 {
			t.Fatalf("accepted % x", d[:min(len(d), 8)])
		}
		if !bytes.Equal(got, d[HeaderLen:]) {
			t.Fatal("inner frame is not the rest of the datagram")
		}
	})
}
