package vnet

import (
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
)

// Resolution says what Resolve did.
type Resolution uint8

const (
	Untouched Resolution = iota // the header asked for nothing
	Segmented                   // a GSO packet became out[:n]
	Finished                    // the checksum was finished (on a copy if b was shared)
)

// Resolve does in software what the virtio-net header in front of b's
// data asks of a port that takes no offloads (a buffer marked with
// tun.FlagVnetHdr): it segments a GSO packet into new buffers, or
// finishes a partial checksum, so that no receiver behind the port gets
// a packet whose checksum is wrong. The packets to send are out[:n]; out
// must hold MaxSegments. b is then either out[0] or consumed. On failure
// n is 0, b is untouched and still the caller's, who drops it for
// reason. It does not allocate.
func Resolve(c *buffer.Cache, b *buffer.Buf, layer packet.Layer, out []*buffer.Buf) (n int, how Resolution, reason drop.Reason) {
	head := b.Headroom()
	if head < HeaderLen {
		return 0, Untouched, drop.DevHdr
	}
	h, _ := Decode(b.Frame()[head-HeaderLen : head])
	switch {
	case h.IsGSO():
		n, reason := Segment(c, h, b.Bytes(), layer, out)
		if n == 0 {
			return 0, Untouched, reason
		}
		c.Consume(b) // its data lives on in the segments
		return n, Segmented, drop.NotSpecified
	case h.NeedsCsum():
		if int(h.CsumStart)+int(h.CsumOffset)+2 > b.Len() {
			return 0, Untouched, drop.DevHdr // FinishChecksum's one failure
		}
		if b.Refs() > 1 {
			// Its other holders may be reading it: finish a copy.
			class, ok := c.Pool().ClassFor(b.Len())
			if !ok {
				return 0, Untouched, drop.PktTooBig
			}
			cp, err := c.Get(class)
			if err != nil {
				return 0, Untouched, drop.NoMem
			}
			d, _ := cp.Append(b.Len())
			copy(d, b.Bytes())
			FinishChecksum(h, d)
			c.Consume(b)
			out[0] = cp
			return 1, Finished, drop.NotSpecified
		}
		FinishChecksum(h, b.Bytes())
		out[0] = b
		return 1, Finished, drop.NotSpecified
	}
	out[0] = b
	return 1, Untouched, drop.NotSpecified
}
