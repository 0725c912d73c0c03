package endpoint

import (
	"encoding/binary"
	"net/netip"

	"softnet.dev/packet"
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

	id     uint32 // the buffer's index in the pool
	gen    uint32 // the lend's generation: stale copies are detected
	worker uint16 // whose refill ring the release goes to
}

// lend is a view on its way through a receive ring: the buffer's id and
// generation and where the packet and its payload are in the buffer's
// frame. The slots of a receive ring move between the worker's core and
// the application's, so a lend is small (24 bytes where a View is 128)
// and carries only what the application cannot find itself: the frame
// is in the worker's frames table, and the addresses and ports are in
// the packet. Nor does the application touch the buffer's metadata,
// which the worker keeps writing.
type lend struct {
	id, gen     uint32
	pkt, end    uint32 // the packet is frame[pkt:end]
	pay, payEnd uint32 // the payload is frame[pay:payEnd]
}

// setView sets v to the application's view of x, lent by worker w from
// frame. The worker checked the lengths; the addresses are at fixed
// offsets of the IP header, and a UDP payload follows its header. It
// writes v in place rather than returning a View, to spare a copy of 128
// bytes per view.
func (x *lend) setView(v *View, frame []byte, raw bool, w int) {
	p := frame[x.pkt:x.end]
	var src, dst netip.Addr
	if p[0]>>4 == 4 {
		src, dst = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
	} else {
		src, dst = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
	}
	var sport, dport uint16
	if !raw {
		udp := frame[x.pay-packet.UDPHeaderLen:]
		sport, dport = binary.BigEndian.Uint16(udp), binary.BigEndian.Uint16(udp[2:])
	}
	v.Src, v.Dst = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	v.Payload, v.Packet = frame[x.pay:x.payEnd], p
	v.id, v.gen, v.worker = x.id, x.gen, uint16(w)
}

// token is a release travelling back through a refill ring: the worker
// finds the buffer by its id in its own tables.
type token struct {
	id, gen uint32
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
