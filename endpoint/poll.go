package endpoint

import (
	"softnet.dev/buffer"
	"softnet.dev/drop"
)

// Table is an engine.Poller and an engine.Consumer. The package cannot
// import engine to say so (engine's tests import endpoint), hence the
// interfaces spelled out.
var _ interface {
	Poll(worker int, c *buffer.Cache) int
	Deliver(worker int, c *buffer.Cache, bufs []*buffer.Buf)
} = (*Table)(nil)

// Poll is the engine.Poller hook, run by worker w at the top of each
// round: it frees what the applications released to w (checking each
// token against w's lending state), takes back everything a closed
// endpoint held on w, and keeps the fill rings of w's sending endpoints
// stocked.
func (t *Table) Poll(w int, c *buffer.Cache) int {
	if w >= len(t.workers) {
		return 0
	}
	ws := t.workers[w]
	work := 0
	for _, e := range *t.eps.Load() {
		l := e.lanes[w]
		if l.reclaim {
			continue
		}
		work += ws.refill(c, l)
		switch {
		case e.closing.Load():
			ws.reclaimLane(c, l)
			work++
		case l.fill != nil && e.wantSend.Load():
			work += ws.stock(c, l)
		}
	}
	ws.flush(c)
	return work
}

// refill frees the buffers released through l's refill ring.
func (ws *workerState) refill(c *buffer.Cache, l *lane) int {
	total, rejected := 0, 0
	for {
		k := l.refill.DequeueBurst(ws.tokens)
		for _, tk := range ws.tokens[:k] {
			id := int(tk.id)
			if id >= len(ws.lentTo) || ws.lentTo[id] != l || ws.gen[id] != tk.gen {
				// Never free what is not provably ours: a stale or forged
				// token would free a buffer someone else holds.
				rejected++
				continue
			}
			ws.lentTo[id] = nil
			l.lent--
			ws.free(c, ws.bufOf[id])
		}
		total += k
		if k < len(ws.tokens) {
			break
		}
	}
	if total > 0 {
		add(&l.ctr.refilled, total-rejected)
		add(&l.ctr.rejected, rejected)
	}
	return total
}

// stock tops l's fill ring up with empty send buffers, by halves so that
// one GetBulk serves many sends.
func (ws *workerState) stock(c *buffer.Cache, l *lane) int {
	want := l.fill.Cap() - l.stocked
	if want < l.fill.Cap()/2 {
		return 0
	}
	bufs := ws.frees[len(ws.frees):][:0]
	ws.flush(c)
	if cap(bufs) < want {
		bufs = make([]*buffer.Buf, want) // once, for a large SendBufs
	}
	bufs = bufs[:want]
	if c.GetBulk(bufs, ws.t.cfg.SendClass) != nil {
		return 0 // exhausted: try again next round
	}
	for _, b := range bufs {
		id := ws.know(b)
		ws.lentTo[id] = l
		ws.gen[id] = sendGen
	}
	// The fill ring has room for want: it holds at most what is stocked.
	n := l.fill.EnqueueBurst(bufs)
	for _, b := range bufs[n:] {
		ws.lentTo[b.ID()] = nil
		c.Consume(b)
	}
	clear(bufs)
	l.stocked += n
	add(&l.ctr.sendBufs, n)
	return n
}

// reclaimLane takes back everything l's endpoint held on this worker
// after the endpoint was closed: the application side no longer touches
// the rings, so the worker may consume them.
func (ws *workerState) reclaimLane(c *buffer.Cache, l *lane) {
	ws.refill(c, l)
	reclaimed := 0
	var x [1]lend
	for l.rx.DequeueBurst(x[:]) == 1 {
		ws.lentTo[x[0].id] = nil
		l.lent--
		ws.free(c, ws.bufOf[x[0].id])
		reclaimed++
	}
	if l.fill != nil {
		var b [1]*buffer.Buf
		for l.fill.DequeueBurst(b[:]) == 1 {
			ws.lentTo[b[0].ID()] = nil
			l.stocked--
			ws.free(c, b[0])
		}
		for l.send.DequeueBurst(b[:]) == 1 {
			ws.lentTo[b[0].ID()] = nil
			l.stocked--
			c.Drop(b[0], drop.QueuePurge)
		}
	}
	// What the application still held: views it had not released and
	// send buffers it had not sent. The scan is over the whole pool, once
	// per closed endpoint and worker.
	if l.lent > 0 || l.stocked > 0 {
		for id, owner := range ws.lentTo {
			if owner != l {
				continue
			}
			ws.lentTo[id] = nil
			if ws.gen[id] == sendGen {
				l.stocked--
			} else {
				l.lent--
				reclaimed++
			}
			ws.free(c, ws.bufOf[id])
		}
	}
	ws.flush(c)
	add(&l.ctr.reclaimed, reclaimed)
	l.reclaim = true
	if int(l.ep.reclaimed.Add(1)) == len(l.ep.lanes) {
		ws.t.forget(l.ep)
	}
}
