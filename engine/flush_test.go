package engine

import (
	"sync"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/program"
)

// holdingPort is a memport pair's end whose TX queue defers sending to
// Flush, as an AF_XDP queue defers its wakeup: Transmit only keeps the
// packets, and Flush holds them back while the worker says more come and
// fewer than holdUpTo wait.
type holdingPort struct {
	*memport.PairPort
	tx holdingTx
}

type holdingTx struct {
	inner    port.TxQueue
	held     []*buffer.Buf
	mu       sync.Mutex // for the test's reads of the counts
	flushes  [2]int     // by more
	heldBack int
}

const holdUpTo = 3

func (p *holdingPort) TxQueue(i int) port.TxQueue {
	if i != 0 {
		return nil
	}
	return &p.tx
}

func (p *holdingPort) CloseInto(c *buffer.Cache) error {
	c.DropBulk(p.tx.held, drop.QueuePurge)
	p.tx.held = nil
	return p.PairPort.CloseInto(c)
}

func (q *holdingTx) Transmit(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	q.held = append(q.held, bufs...)
	return len(bufs), nil
}

func (q *holdingTx) Flush(c *buffer.Cache, more bool) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if more {
		q.flushes[1]++
	} else {
		q.flushes[0]++
	}
	if more && len(q.held) < holdUpTo {
		q.heldBack++
		return true, nil
	}
	_, err := q.inner.Transmit(c, q.held)
	clear(q.held)
	q.held = q.held[:0]
	return false, err
}

func (q *holdingTx) counts() (flushes [2]int, heldBack int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.flushes, q.heldBack
}

// A TX queue that defers its sending to Flush gets it at the end of the
// round that gave it packets, and again after every round while it holds
// packets back; once the worker finds nothing (more false) it sends
// everything, so no packet waits for more traffic that never comes.
func TestFlushAfterRound(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 1024}}})
	if err != nil {
		t.Fatal(err)
	}
	in, inWire, err := memport.NewPair("in", "in-wire", memport.PairConfig{Layer: packet.L3})
	if err != nil {
		t.Fatal(err)
	}
	out, outWire, err := memport.NewPair("out", "out-wire", memport.PairConfig{Layer: packet.L3})
	if err != nil {
		t.Fatal(err)
	}
	hp := &holdingPort{PairPort: out, tx: holdingTx{inner: out.TxQueue(0)}}
	toOut := program.Func{ProgramName: "to-out", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	r := &rig{t: t, pool: pool, ports: []*memport.PairPort{in, out}, wires: []*memport.PairPort{inWire, outWire}}
	if r.cache, err = pool.NewCache(nil); err != nil {
		t.Fatal(err)
	}
	if r.e, err = New(Config{Pool: pool, Programs: []program.Program{toOut}}, in, hp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	if err := r.e.Start(); err != nil {
		t.Fatal(err)
	}
	// One packet: held back at the end of its round (the round found it),
	// sent after the next, which finds nothing.
	r.send(0, udp("198.18.0.1:1", "198.19.0.1:2", "one"))
	if got := r.recv(1, 1, 10*time.Second); len(got) != 1 {
		t.Fatalf("the held packet never left: %d received", len(got))
	}
	flushes, held := hp.tx.counts()
	if flushes[1] == 0 || held == 0 || flushes[0] == 0 {
		t.Fatalf("flushes with more %d, without %d, held back %d: want each at least once", flushes[1], flushes[0], held)
	}
	// A burst of more than holdUpTo leaves from the round that brought it.
	var burst [][]byte
	for range 10 {
		burst = append(burst, udp("198.18.0.1:1", "198.19.0.1:2", "burst"))
	}
	r.send(0, burst...)
	if got := r.recv(1, 10, 10*time.Second); len(got) != 10 {
		t.Fatalf("burst: %d of 10 received", len(got))
	}
}
