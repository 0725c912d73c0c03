package memport

import (
	"testing"

	"softnet.dev/buffer"
	"softnet.dev/packet"
)

// FuzzValidate feeds arbitrary bytes to both validations: they must not
// panic, and what they accept must carry the magic where they found it.
func FuzzValidate(f *testing.F) {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		f.Fatal(err)
	}
	c, _ := pool.NewCache(nil)
	for _, ipv6 := range []bool{false, true} {
		for _, layer := range []packet.Layer{packet.L2, packet.L3} {
			for _, hdrOnly := range []bool{false, true} {
				g, err := NewGenerator("fuzz", GenConfig{IPv6: ipv6, Layer: layer, Sizes: []int{64, 90}, HeadersOnly: hdrOnly})
				if err != nil {
					f.Fatal(err)
				}
				bufs := make([]*buffer.Buf, 2)
				n, _ := g.RxQueue(0).Receive(c, bufs)
				for _, b := range bufs[:n] {
					f.Add(append([]byte(nil), b.Bytes()...), layer == packet.L2)
				}
				c.ConsumeBulk(bufs[:n])
			}
		}
	}
	if err := pool.Close(); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, d []byte, l2 bool) {
		layer, off := packet.L3, 0
		if l2 {
			layer, off = packet.L2, packet.EthernetHeaderLen
		}
		var h packet.Headers
		if st, ok := checkFull(d, layer, &h); ok {
			if hdr, ok := checkUDP(d[h.L4Off : h.L3Off+h.L3Len]); !ok || hdr != st {
				t.Errorf("full accepted %+v without that valid header", st)
			}
		}
		if _, ok := checkLight(d, off); ok && len(d) < off+packet.IPv4HeaderLen+udpHdrPlusHeader {
			t.Errorf("light accepted %d bytes", len(d))
		}
	})
}
