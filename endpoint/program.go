package endpoint

import (
	"encoding/binary"
	"net/netip"

	"softnet.dev/packet"
	"softnet.dev/program"
)

var _ program.Program = (*Table)(nil)

// Run gives every undecided packet addressed to a bound flow the table's
// Deliver verdict, and notes its endpoint and view for Deliver so that
// the headers are parsed once. Fragments are left alone (no reassembly).
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
	for i, buf := range b.Bufs {
		h, ok := b.Undecided(i)
		if !ok || h.Fragment || (h.Proto != packet.EtherTypeIPv4 && h.Proto != packet.EtherTypeIPv6) {
			continue
		}
		e := lookup(m, h)
		if e == nil {
			continue
		}
		v, ok := makeView(buf.Bytes(), h, e.flow.Raw)
		if !ok {
			continue // malformed: whoever comes next decides
		}
		b.Verdicts[i] = verdict
		ws.pend = append(ws.pend, pending{buf: buf, ep: e, view: v})
	}
}

// makeView slices a parsed packet into a view, bounded by the IP and UDP
// lengths (a device may pad).
func makeView(d []byte, h *packet.Headers, raw bool) (View, bool) {
	end := h.L3Off + h.L3Len
	if end > len(d) || h.L3Off < 0 {
		return View{}, false
	}
	v := View{Packet: d[h.L3Off:end]}
	off := h.L4Off
	if off == 0 { // a protocol Parse does not know: after the IP header
		off = h.L3Off + packet.IPv6HeaderLen
		if h.Proto == packet.EtherTypeIPv4 {
			off = h.L3Off + int(d[h.L3Off]&0x0f)*4
		}
	}
	if off > end {
		return View{}, false
	}
	if raw {
		v.Src, v.Dst = netip.AddrPortFrom(h.SrcIP, 0), netip.AddrPortFrom(h.DstIP, 0)
		v.Payload = d[off:end]
		return v, true
	}
	if off+packet.UDPHeaderLen > end {
		return View{}, false
	}
	ulen := int(binary.BigEndian.Uint16(d[off+4:]))
	if ulen < packet.UDPHeaderLen || off+ulen > end {
		return View{}, false
	}
	v.Src, v.Dst = netip.AddrPortFrom(h.SrcIP, h.SrcPort), netip.AddrPortFrom(h.DstIP, h.DstPort)
	v.Payload = d[off+packet.UDPHeaderLen : off+ulen]
	return v, true
}
