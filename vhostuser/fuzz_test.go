//go:build linux

package vhostuser

import (
	"encoding/binary"
	"testing"
	"unsafe"
)

// FuzzMessage feeds the message parser arbitrary bytes: it must refuse
// what is malformed with an error, never panic, and never accept a
// memory region whose ranges wrap.
func FuzzMessage(f *testing.F) {
	seed := func(req uint32, payload []byte) []byte {
		b := binary.LittleEndian.AppendUint32(nil, req)
		b = binary.LittleEndian.AppendUint32(b, version)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
		return append(b, payload...)
	}
	f.Add(seed(reqGetFeatures, nil))
	f.Add(seed(reqSetFeatures, u64Payload(featVersion1)))
	f.Add(seed(reqSetVringNum, statePayload(vringState{1, 256})))
	f.Add(seed(reqSetVringAddr, make([]byte, 40)))
	mt := binary.LittleEndian.AppendUint32(nil, 1)
	mt = binary.LittleEndian.AppendUint32(mt, 0)
	for _, v := range []uint64{0x1000, 0x10000, 0x7f0000000000, 0} {
		mt = binary.LittleEndian.AppendUint64(mt, v)
	}
	f.Add(seed(reqSetMemTable, mt))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeader(b)
		if err != nil {
			return
		}
		payload := b[headerLen:]
		if int(h.Size) < len(payload) {
			payload = payload[:h.Size]
		}
		m, err := parsePayload(h, payload)
		if err != nil {
			return
		}
		for _, r := range m.Regions {
			if r.Size == 0 || r.GuestAddr+r.Size < r.GuestAddr || r.UserAddr+r.Size < r.UserAddr {
				t.Fatalf("accepted region %+v", r)
			}
		}
	})
}

// FuzzWalk walks descriptor chains of arbitrary tables over a small
// guest memory: every walk ends, and every buffer it returns lies inside
// that memory, whatever the descriptors say.
func FuzzWalk(f *testing.F) {
	const base = 0x10000
	desc := func(ds ...[4]uint64) []byte {
		var b []byte
		for _, d := range ds {
			b = binary.LittleEndian.AppendUint64(b, d[0])
			b = binary.LittleEndian.AppendUint32(b, uint32(d[1]))
			b = binary.LittleEndian.AppendUint16(b, uint16(d[2]))
			b = binary.LittleEndian.AppendUint16(b, uint16(d[3]))
		}
		return b
	}
	f.Add(desc([4]uint64{base, 64, 0, 0}), uint16(0), false)
	f.Add(desc([4]uint64{base, 64, descNext, 1}, [4]uint64{base + 64, 64, 0, 0}), uint16(0), false)
	f.Add(desc([4]uint64{base, 64, descNext, 1}, [4]uint64{base + 64, 64, descNext, 0}), uint16(0), false)
	f.Add(desc([4]uint64{base, 64, descWrite, 0}), uint16(0), true)
	f.Add(desc([4]uint64{base + 4000, 200, 0, 0}), uint16(0), false)
	f.Add(desc([4]uint64{^uint64(0) - 10, 200, 0, 0}), uint16(0), false)
	mem := make([]byte, 4096)
	gm := &memTable{regions: []region{{memRegion: memRegion{GuestAddr: base, Size: uint64(len(mem)), UserAddr: base}, data: mem}}}
	lo := uintptr(unsafe.Pointer(&mem[0]))
	hi := lo + uintptr(len(mem))
	f.Fuzz(func(tt *testing.T, table []byte, head uint16, writable bool) {
		num := uint16(1)
		for int(num)*2*descLen <= len(table) && num < 64 {
			num *= 2
		}
		segs, total, werr := walk(table, num, gm, head, writable, maxBytesPerPacket, make([][]byte, 0, num))
		sum := 0
		for _, s := range segs {
			if len(s) == 0 {
				tt.Fatal("empty segment")
			}
			p := uintptr(unsafe.Pointer(&s[0]))
			if p < lo || p+uintptr(len(s)) > hi {
				tt.Fatalf("segment outside guest memory")
			}
			sum += len(s)
		}
		if sum != total {
			tt.Fatalf("total %d, segments hold %d", total, sum)
		}
		if werr == walkOK && len(segs) > int(num) {
			tt.Fatalf("%d segments from a ring of %d", len(segs), num)
		}
	})
}
