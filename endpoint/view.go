package endpoint

import (
	"net/netip"

	"softnet.dev/buffer"
)

// View is one received packet, lent to the application: its addresses,
// and its payload and whole IP packet as slices into softnet's buffer (no
// copy). The slices are read-only and valid until the view is released;
// Release it exactly once.
//
// For a UDP endpoint Payload is the datagram's payload; for a raw IP
// endpoint it is the IP payload (after the IP header and any IPv6
// extension headers Parse steps over) and the ports are zero.
type View struct {
	Src, Dst netip.AddrPort
	Payload  []byte
	Packet   []byte

	buf    *buffer.Buf
	gen    uint32 // the lend's generation: stale copies are detected
	worker uint16 // whose refill ring the release goes to
}

// token is a release travelling back through a refill ring.
type token struct {
	buf *buffer.Buf
	gen uint32
}

// sendGen marks, in the application's held table, a buffer held for
// sending rather than a lent view. Lend generations skip it.
const sendGen = ^uint32(0)

// nextGen returns the generation after g, skipping 0 (not held) and
// sendGen.
func nextGen(g uint32) uint32 {
	g++
	if g == 0 || g == sendGen {
		g = 1
	}
	return g
}
