package vxlan

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
	"softnet.dev/drop"
)

// FuzzSplit feeds arbitrary control data and coalesced datagrams to the
// receive path's splitting: it must not read past the control data,
// and the cuts segment makes must cover the coalesced datagram in
// order, each but the last of the segment size, each decoding (or
// refused with a reason) without a panic.
func FuzzSplit(f *testing.F) {
	inner := frame(macB, macA, 1, 2, 30)
	d := datagram(0x08, 42, 0, inner)
	ctl := make([]byte, unix.CmsgSpace(4))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_GRO
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(ctl[unix.CmsgLen(0):], uint32(len(d)))
	f.Add(ctl, append(append(bytes.Clone(d), d...), d[:20]...))
	f.Add(ctl[:10], d)
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, ctl, coalesced []byte) {
		size, count := splitting(ctl, len(coalesced))
		var joined []byte
		for j := range count {
			from, to := segment(len(coalesced), size, j)
			if from >= to || to-from > size || j < count-1 && to-from != size {
				t.Fatalf("datagram %d of %d: [%d, %d) of %d by %d", j, count, from, to, len(coalesced), size)
			}
			joined = append(joined, coalesced[from:to]...)
			if _, ok, reason := Decode(coalesced[from:to], 42); !ok && reason == drop.NotSpecified {
				t.Fatal("refused without a reason")
			}
		}
		if !bytes.Equal(joined, coalesced) {
			t.Fatal("the datagrams do not make up the coalesced one")
		}
	})
}
