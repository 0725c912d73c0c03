package endpoint

import (
	"softnet.dev/buffer"
	"softnet.dev/drop"
)

// Deliver (engine.Consumer) lends the buffers Run matched to their endpoints: each goes
// into its (endpoint, worker) receive ring, or is dropped with
// drop.SocketRcvBuff when the ring is full or the endpoint holds its
// quota. It runs on worker w, which alone keeps the lending state.
func (t *Table) Deliver(w int, c *buffer.Cache, bufs []*buffer.Buf) {
	if w >= len(t.workers) {
		c.DropBulk(bufs, drop.NoRoute)
		return
	}
	ws := t.workers[w]
	j := 0
	// A burst mostly goes to one endpoint: read its closing flag, which
	// Close may set at any time, once per run of its packets.
	var last *Endpoint
	closing := false
	for _, buf := range bufs {
		// Verdicts only ever move from Pass to decided, so the delivered
		// buffers are the ones Run matched, in order. Anything else was
		// delivered here by another program and has no endpoint.
		if j >= len(ws.pend) || ws.pend[j].buf != buf {
			c.Drop(buf, drop.NoRoute)
			continue
		}
		p := &ws.pend[j]
		j++
		l := p.ep.lanes[w]
		if p.ep != last {
			last, closing = p.ep, p.ep.closing.Load()
		}
		switch {
		case closing:
			add(&l.ctr.closedDrops, 1)
			c.Drop(buf, drop.NoRoute)
		case l.lent+len(l.stage) >= l.quota:
			add(&l.ctr.quotaFull, 1)
			c.Drop(buf, drop.SocketRcvBuff)
		default:
			id := ws.know(buf)
			g := nextGen(ws.gen[id])
			ws.gen[id] = g
			if len(l.stage) == 0 {
				ws.staged = append(ws.staged, l)
			}
			// Field by field, for the reason Run gives: the compiler
			// copies a lend through the stack with overlapping wide
			// moves, whose loads cannot take the data from the stores.
			l.stage = append(l.stage, lend{})
			x, y := &l.stage[len(l.stage)-1], &p.lend
			x.id, x.gen, x.pkt, x.end, x.pay, x.payEnd = id, g, y.pkt, y.end, y.pay, y.payEnd
		}
		p.buf, p.ep = nil, nil
	}
	for _, l := range ws.staged {
		n := l.rx.EnqueueBurst(l.stage)
		for _, x := range l.stage[:n] {
			ws.lentTo[x.id] = l
		}
		l.lent += n
		add(&l.ctr.lent, n)
		for _, x := range l.stage[n:] {
			c.Drop(ws.bufOf[x.id], drop.SocketRcvBuff)
		}
		add(&l.ctr.ringFull, len(l.stage)-n)
		l.stage = l.stage[:0]
		if n > 0 {
			l.ep.wake()
		}
	}
	clear(ws.staged)
	ws.staged = ws.staged[:0]
	ws.pend = ws.pend[:0]
}
