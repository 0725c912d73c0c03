//go:build linux

package vhostuser

import (
	"encoding/binary"
	"path/filepath"
	"testing"
	"unsafe"

	"softnet.dev/buffer"
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
		budget := int(num)
		segs, total, werr := walk(table, num, gm, head, writable, maxBytesPerPacket, &budget, make([][]byte, 0, num))
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

// FuzzSession plays a whole front-end and guest from arbitrary bytes:
// the start of the input is the guest's memory, the rest a stream of
// messages the port handles in turn (ring sizes, addresses, bases,
// enables, kicks without descriptors, anything), after each of which
// the port receives and transmits a burst over whatever rings run. No
// input may panic, fault or lose a buffer.
// sessionMem is the guest memory of FuzzSession.
const sessionMem = 1 << 12

func FuzzSession(f *testing.F) {
	msg := func(req uint32, payload []byte) []byte {
		b := binary.LittleEndian.AppendUint32(nil, req)
		b = binary.LittleEndian.AppendUint32(b, version)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
		return append(b, payload...)
	}
	addr := func(ring uint32, desc, used, avail uint64) []byte {
		a := binary.LittleEndian.AppendUint32(nil, ring)
		a = binary.LittleEndian.AppendUint32(a, 0)
		a = binary.LittleEndian.AppendUint64(a, desc)
		a = binary.LittleEndian.AppendUint64(a, used)
		a = binary.LittleEndian.AppendUint64(a, avail)
		return binary.LittleEndian.AppendUint64(a, 0)
	}
	// The same session with split rings, and with them in order.
	for _, features := range []uint64{featVersion1 | featMrgRxbuf, featVersion1 | featMrgRxbuf | featInOrder} {
		var seed []byte
		seed = append(seed, make([]byte, sessionMem)...)
		seed = append(seed, msg(reqSetFeatures, u64Payload(features))...)
		for r := range uint32(2) {
			base := uint64(0x10000 + r*0x800)
			seed = append(seed, msg(reqSetVringNum, statePayload(vringState{r, 16}))...)
			seed = append(seed, msg(reqSetVringAddr, addr(r, base, base+0x400, base+0x200))...)
			seed = append(seed, msg(reqSetVringKick, u64Payload(uint64(r)|vringNoFD))...)
		}
		f.Add(seed)
	}
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		f.Fatal(err)
	}
	c, err := pool.NewCache(nil)
	if err != nil {
		f.Fatal(err)
	}
	p, err := Listen(Config{Name: "fuzz", Socket: filepath.Join(f.TempDir(), "s"), Log: quiet})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		p.CloseInto(c)
		c.Close()
		if err := pool.Close(); err != nil {
			f.Errorf("leak check: %v", err)
		}
	})
	guest := make([]byte, sessionMem)
	bufs := make([]*buffer.Buf, 16)
	f.Fuzz(func(t *testing.T, in []byte) { playSession(p, c, guest, bufs, in) })
}

// playSession is FuzzSession's body.
func playSession(p *Port, c *buffer.Cache, guest []byte, bufs []*buffer.Buf, in []byte) {
	clear(guest)
	n := copy(guest, in)
	in = in[n:]
	p.features, p.protocol = 0, 0
	p.mem = &memTable{regions: []region{{memRegion: memRegion{GuestAddr: 0x10000, Size: sessionMem, UserAddr: 0x10000}, data: guest}}}
	defer func() {
		p.stopAll()
		for _, v := range p.rings {
			v.num, v.addrSet, v.base, v.enabled = 0, false, 0, false
		}
		p.mem = nil
	}()
	for len(in) >= headerLen {
		h, err := parseHeader(in)
		if err != nil || int(h.Size) > len(in)-headerLen {
			return
		}
		m, err := parsePayload(h, in[headerLen:headerLen+int(h.Size)])
		in = in[headerLen+int(h.Size):]
		if err != nil || m.Request == reqSetMemTable || m.Request == reqResetOwner {
			continue // they need descriptors, or unmap the table
		}
		_, _ = p.handle(m, nil)
		for i := range p.rxqs {
			got, _ := p.rxqs[i].Receive(c, bufs)
			if got > 0 {
				// Back out through the transmit queue: into the
				// guest's receive ring, or dropped.
				_, _ = p.txqs[i].Transmit(c, bufs[:got])
			}
		}
	}
}
