package port_test

import (
	"fmt"
	"sync/atomic"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/engine"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/program"
)

// counter is a transmit-only port of one queue: it counts the packets it
// is given and frees them, as a device frees what it has sent.
type counter struct{ q counterQueue }

type counterQueue struct{ packets atomic.Uint64 }

func (p *counter) Info() port.Info {
	return port.Info{Name: "counter", Layer: packet.L3, Queues: 1, MaxFrame: 2048}
}
func (p *counter) RxQueue(int) port.RxQueue { return nil } // it only transmits
func (p *counter) TxQueue(int) port.TxQueue { return &p.q }

// CloseInto has nothing to purge: Transmit keeps no buffer.
func (p *counter) CloseInto(*buffer.Cache) error { return nil }

// Transmit takes every buffer: here each is sent at once.
func (q *counterQueue) Transmit(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	q.packets.Add(uint64(len(bufs)))
	c.ConsumeBulk(bufs)
	return len(bufs), nil
}

// A port of one's own runs in the engine like softnet's: here a generator
// feeds a counter through one worker.
func Example() {
	pool, _ := buffer.NewPool(buffer.Config{})
	gen, _ := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Count: 1000})
	out := &counter{}
	toCounter := program.Func{ProgramName: "to-counter", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1) // port 1: the counter
		}
	}}
	eng, err := engine.New(engine.Config{Pool: pool, Programs: []program.Program{toCounter}}, gen, out)
	if err != nil {
		fmt.Println(err)
		return
	}
	eng.Start()
	for deadline := time.Now().Add(10 * time.Second); out.q.packets.Load() < 1000 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	eng.Stop()
	fmt.Println("counted:", out.q.packets.Load())
	fmt.Println("close:", eng.Close(), "leak check:", pool.Close())
	// Output:
	// counted: 1000
	// close: <nil> leak check: <nil>
}
