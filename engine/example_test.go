package engine_test

import (
	"fmt"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/engine"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/program"
)

// A generator port feeds one worker, which redirects every packet to a
// sink port that checks sequence numbers; closing the engine and then the
// pool proves every buffer came home.
func Example() {
	pool, _ := buffer.NewPool(buffer.Config{})
	gen, _ := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Count: 10000, Bulk: true})
	sink, _ := memport.NewSink("sink", memport.SinkConfig{Layer: packet.L3})
	toSink := program.Func{ProgramName: "to-sink", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1) // port 1: the sink
		}
	}}
	e, err := engine.New(engine.Config{Pool: pool, Programs: []program.Program{toSink}}, gen, sink)
	if err != nil {
		fmt.Println(err)
		return
	}
	e.Start()
	for sink.Stats().Packets < 10000 {
		time.Sleep(time.Millisecond)
	}
	e.Stop()
	s := sink.Stats()
	fmt.Println("delivered:", s.Packets, "lost:", s.Lost, "bad:", s.Bad)
	fmt.Println("close:", e.Close(), "leak check:", pool.Close())
	// Output:
	// delivered: 10000 lost: 0 bad: 0
	// close: <nil> leak check: <nil>
}
