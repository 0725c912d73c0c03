package endpoint

import (
	"encoding/binary"

	"softnet.dev/packet"
	"softnet.dev/program"
)

var _ program.Program = (*Table)(nil)

// Run gives every undecided packet addressed to a bound flow the table's
// Deliver verdict, and notes its endpoint and where its payload is for
// Deliver, so that the headers are parsed once. Fragments are left alone
// (no reassembly).
func (t *Table) Run(b *program.Batch) {
	if b.Worker >= len(t.workers) {
		return
	}
	ws := t.workers[b.Worker]
	ws.pend = ws.pend[:0]
	m := *t.flows.Load()
	if len(m) == 0 {
		return
	}
	verdict := program.DeliverVerdict(t.cfg.Consumer)
	// The packets of a batch mostly go to one flow: remember the last
	// lookup, so that a run of them hashes its key once.
	var last probe
	var lastEp *Endpoint
	for i, buf := range b.Bufs {
		h, ok := b.Undecided(i)
		if !ok || h.Fragment || (h.Proto != packet.EtherTypeIPv4 && h.Proto != packet.EtherTypeIPv6) {
			continue
		}
		if p := probeOf(h); p != last {
			last, lastEp = p, lookup(m, h)
		}
		e := lastEp
		if e == nil {
			continue
		}
		// Written field by field in place: a value built on the stack and
		// copied here would be read with wide loads right after its
		// narrow stores, and stall on store forwarding, every packet.
		ws.pend = append(ws.pend, pending{})
		p := &ws.pend[len(ws.pend)-1]
		p.buf, p.ep = buf, e
		if !p.lend.locate(buf.Bytes(), buf.Headroom(), h, e.flow.Raw) {
			ws.pend = ws.pend[:len(ws.pend)-1]
			continue // malformed: whoever comes next decides
		}
		b.Verdicts[i] = verdict
	}
}

// locate sets x to a parsed packet and its payload, as offsets into the
// frame of the data d (which starts head bytes into it), bounded by the
// IP and UDP lengths (a device may pad), or reports false.
func (x *lend) locate(d []byte, head int, h *packet.Headers, raw bool) bool {
	end := h.L3Off + h.L3Len
	if end > len(d) || h.L3Off < 0 {
		return false
	}
	off := h.L4Off
	if off == 0 { // a protocol Parse does not know: after the IP header
		off = h.L3Off + packet.IPv6HeaderLen
		if h.Proto == packet.EtherTypeIPv4 {
			off = h.L3Off + int(d[h.L3Off]&0x0f)*4
		}
	}
	if off > end {
		return false
	}
	pay, payEnd := off, end
	if !raw {
		if off+packet.UDPHeaderLen > end {
			return false
		}
		ulen := int(binary.BigEndian.Uint16(d[off+4:]))
		if ulen < packet.UDPHeaderLen || off+ulen > end {
			return false
		}
		pay, payEnd = off+packet.UDPHeaderLen, off+ulen
	}
	x.pkt, x.end = uint32(head+h.L3Off), uint32(head+end)
	x.pay, x.payEnd = uint32(head+pay), uint32(head+payEnd)
	return true
}
