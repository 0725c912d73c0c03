package endpoint

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"softnet.dev/buffer"
	"softnet.dev/packet"
	"softnet.dev/port"
)

var (
	_ port.Port    = (*Table)(nil)
	_ port.RxQueue = (*sendQueue)(nil)
)

// Info describes the table as a port: L3, one receive queue per worker,
// no transmit side (packets for endpoints arrive by Deliver verdicts).
func (t *Table) Info() port.Info {
	return port.Info{Name: t.cfg.Name, Layer: packet.L3, Queues: len(t.workers), MaxFrame: 65535}
}

// RxQueue returns worker i's send queue: what applications sent through
// that worker.
func (t *Table) RxQueue(i int) port.RxQueue {
	if i < 0 || i >= len(t.workers) {
		return nil
	}
	return (*sendQueue)(t.workers[i])
}

// TxQueue returns nil: nothing is transmitted to the table.
func (t *Table) TxQueue(int) port.TxQueue { return nil }

// CloseInto closes every endpoint and frees every buffer lent, stocked or
// queued, into c. The engine calls it once its workers have stopped, so
// the lending state is this goroutine's.
func (t *Table) CloseInto(c *buffer.Cache) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	eps := *t.eps.Load()
	t.mu.Unlock()
	for _, e := range eps {
		e.mu.Lock()
		if !e.closed {
			e.shut()
		}
		e.mu.Unlock()
	}
	for _, ws := range t.workers {
		for _, e := range eps {
			if l := e.lanes[ws.index]; !l.reclaim {
				ws.reclaimLane(c, l)
			}
		}
	}
	var errs []error
	for _, ws := range t.workers {
		if err := unix.Close(ws.efd); err != nil {
			errs = append(errs, fmt.Errorf("endpoint: close eventfd of worker %d: %w", ws.index, err))
		}
	}
	return errors.Join(errs...)
}

// sendQueue is worker w's receive queue of the table port.
type sendQueue workerState

// Receive takes the packets applications sent through this worker.
func (q *sendQueue) Receive(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	ws := (*workerState)(q)
	n := 0
	for _, e := range *ws.t.eps.Load() {
		l := e.lanes[ws.index]
		if l.send == nil || l.reclaim || n == len(bufs) {
			continue
		}
		k := l.send.DequeueBurst(bufs[n:])
		for _, b := range bufs[n : n+k] {
			id := b.ID()
			if ws.lentTo[id] != l || ws.gen[id] != sendGen {
				// Application.Send checks this; a failure here would be
				// a bug, and freeing a buffer not provably ours could
				// corrupt the pool, so it is only counted.
				add(&l.ctr.rejected, 1)
				continue
			}
			ws.lentTo[id] = nil
			l.stocked--
			bufs[n] = b
			n++
		}
	}
	return n, nil
}

// FD returns the eventfd applications write when they release or send
// while the worker sleeps.
func (q *sendQueue) FD() int { return q.efd }

// Arm reports whether the worker has anything to take back or send; if
// not, applications will wake it.
func (q *sendQueue) Arm() bool {
	ws := (*workerState)(q)
	ws.armed.Store(true)
	for _, e := range *ws.t.eps.Load() {
		l := e.lanes[ws.index]
		if l.reclaim {
			continue
		}
		// An empty fill ring is not a reason to stay up: Buffers kicks
		// the worker when it finds none, and an exhausted pool would
		// otherwise keep the worker spinning.
		if l.refill.Len() > 0 || e.closing.Load() || (l.send != nil && l.send.Len() > 0) {
			return true
		}
	}
	return false
}

// Disarm resets the eventfd.
func (q *sendQueue) Disarm() {
	q.armed.Store(false)
	var b [8]byte
	_, _ = unix.Read(q.efd, b[:])
}
