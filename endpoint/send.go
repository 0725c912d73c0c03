package endpoint

import (
	"net/netip"
	"unsafe"

	"softnet.dev/buffer"
	"softnet.dev/packet"
)

// Message is a datagram being written into a send buffer: Buffers hands
// it out with Payload sized and in place behind room for the headers;
// the application fills Payload (and may shorten it, not move it), sets
// Dst and passes it to Send.
type Message struct {
	Dst     netip.AddrPort
	Payload []byte
	buf     *buffer.Buf
}

// hdrLen is the room Send needs before the payload.
func (e *Endpoint) hdrLen() int {
	n := packet.IPv6HeaderLen
	if e.flow.Local.Addr().Unmap().Is4() {
		n = packet.IPv4HeaderLen
	}
	if !e.flow.Raw {
		n += packet.UDPHeaderLen
	}
	return n
}

// MaxPayload returns the largest payload a send buffer takes.
func (e *Endpoint) MaxPayload() int {
	return e.t.cfg.Pool.Room(e.t.cfg.SendClass) - e.hdrLen()
}

// Buffers fills a prefix of out with empty send buffers, each with a
// Payload of size bytes, and returns how many. Send buffers are taken
// from the home worker, which keeps Config.SendBufs of them ready once
// the endpoint has asked; 0 means none is ready yet (the worker is
// woken to stock them).
func (e *Endpoint) Buffers(out []Message, size int) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.buffers(out, size)
}

func (e *Endpoint) buffers(out []Message, size int) (int, error) {
	if e.closed {
		return 0, e.errorf("buffers: %w", ErrClosed)
	}
	if size < 0 || size > e.MaxPayload() {
		return 0, e.errorf("buffers of %d bytes (at most %d): %w", size, e.MaxPayload(), ErrTooBig)
	}
	if !e.wantSend.Load() {
		// The first call asks the home worker to start stocking.
		e.wantSend.Store(true)
		e.home.ws.kick()
	}
	hdr := e.hdrLen()
	n := 0
	for n < len(out) {
		b, ok := e.home.fill.Dequeue()
		if !ok {
			break
		}
		e.held[b.ID()] = sendGen
		b.SetData(b.Headroom()+hdr, size)
		out[n] = Message{Payload: b.Bytes(), buf: b}
		n++
	}
	if n < len(out) {
		e.home.ws.kick()
	}
	return n, nil
}

// Send writes the headers of each message in front of its payload and
// hands the messages to the home worker, which transmits them through the
// datapath (the programs route them like packets from any port). It
// returns how many were sent; a message that is not a buffer from
// Buffers, or whose payload moved, stops the batch with an error.
func (e *Endpoint) Send(msgs []Message) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.send(msgs)
}

func (e *Endpoint) send(msgs []Message) (int, error) {
	if e.closed {
		return 0, e.errorf("send: %w", ErrClosed)
	}
	hdr := e.hdrLen()
	src := e.flow.Local
	sent, err := 0, error(nil)
	for i := range msgs {
		m := &msgs[i]
		if err = e.prepare(m, hdr, src); err != nil {
			break
		}
		// The send ring holds every buffer the worker stocked, so it has
		// room for any buffer Buffers handed out.
		if !e.home.send.Enqueue(m.buf) {
			err = e.errorf("send: ring full")
			break
		}
		e.held[m.buf.ID()] = 0
		m.buf, m.Payload = nil, nil
		sent++
	}
	if sent > 0 {
		add(&e.home.ctr.sent, sent)
		e.home.ws.kick()
	}
	return sent, err
}

// prepare writes m's headers in place.
func (e *Endpoint) prepare(m *Message, hdr int, src netip.AddrPort) error {
	b := m.buf
	if b == nil || int(b.ID()) >= len(e.held) || e.held[b.ID()] != sendGen {
		return e.errorf("send: a message not from Buffers: %w", ErrNotLent)
	}
	d := b.Bytes()
	if len(m.Payload) > len(d) || (len(m.Payload) > 0 && unsafe.SliceData(m.Payload) != unsafe.SliceData(d)) {
		return e.errorf("send: payload of buffer %d was moved or grown", b.ID())
	}
	dst := netip.AddrPortFrom(m.Dst.Addr().Unmap(), m.Dst.Port())
	if dst.Addr().Is4() != src.Addr().Unmap().Is4() || !dst.Addr().IsValid() {
		return e.errorf("send to %s: address family differs from %s", m.Dst, src)
	}
	n := len(m.Payload)
	b.SetData(b.Headroom()-hdr, hdr+n)
	d = b.Bytes()
	switch {
	case !e.flow.Raw:
		packet.PutUDP(d, netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), dst, d[hdr:])
	case dst.Addr().Is4():
		packet.PutIPv4(d, src.Addr().Unmap(), dst.Addr(), e.flow.Proto, 64, n)
	default:
		packet.PutIPv6(d, src.Addr(), dst.Addr(), e.flow.Proto, 64, n)
	}
	return nil
}
