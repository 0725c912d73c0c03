package engine

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/program"
)

// Ports are added and removed, again and again, while two workers move a
// counted stream between two others: the stream loses nothing and stays
// in order, every added port is polled until it is removed and not
// after, indexes are reused with fresh counters, and every buffer comes
// home.
func TestHotPortsLeaveOthersAlone(t *testing.T) {
	const perQueue = 200_000
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gen, err := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Queues: 2, Flows: 4, Count: perQueue, Bulk: true})
	if err != nil {
		t.Fatal(err)
	}
	keep, err := memport.NewSink("keep", memport.SinkConfig{Layer: packet.L3, Queues: 2, Validate: memport.ValidateLight})
	if err != nil {
		t.Fatal(err)
	}
	// to[i] is where packets arriving on port i go; the stream's first.
	var to [16]atomic.Int32
	to[0].Store(1)
	route := program.Func{ProgramName: "route", F: func(b *program.Batch) {
		dst := int(to[b.Ingress].Load())
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(dst)
		}
	}}
	e, err := New(Config{Pool: pool, Workers: 2, Programs: []program.Program{route}}, gen, keep)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		g, err := memport.NewGenerator(fmt.Sprint("g", round), memport.GenConfig{Layer: packet.L3, Queues: 2, Flows: 2, Bulk: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := memport.NewSink(fmt.Sprint("s", round), memport.SinkConfig{Layer: packet.L3, Queues: 2})
		if err != nil {
			t.Fatal(err)
		}
		si, err := e.AddPort(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if si != 2 {
			t.Fatalf("round %d: sink added at index %d, want the free index 2", round, si)
		}
		to[3].Store(int32(si))
		gi, err := e.AddPort(g, nil)
		if err != nil {
			t.Fatal(err)
		}
		if gi != 3 {
			t.Fatalf("round %d: generator added at index %d, want 3", round, gi)
		}
		deadline := time.Now().Add(10 * time.Second)
		for s.Stats().Packets < 1000 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := s.Stats().Packets; got < 1000 {
			t.Fatalf("round %d: the added ports moved %d packets", round, got)
		}
		// Stopped, the workers have published every counter.
		e.Stop()
		st := e.Stats()
		if len(st.Ports) != 4 || st.Ports[3].Name != g.Info().Name || st.Ports[3].RxPackets != g.Stats().Packets || st.Ports[2].TxPackets != s.Stats().Packets {
			t.Fatalf("round %d: counters of the reused index: %+v (generator made %d)", round, st.Ports, g.Stats().Packets)
		}
		if err := e.Start(); err != nil {
			t.Fatal(err)
		}
		if err := e.RemovePort(gi); err != nil {
			t.Fatal(err)
		}
		if err := e.RemovePort(si); err != nil {
			t.Fatal(err)
		}
		made := g.Stats().Packets
		time.Sleep(time.Millisecond)
		if g.Stats().Packets != made {
			t.Fatalf("round %d: a removed generator is still polled", round)
		}
		if err := e.RemovePort(si); !errors.Is(err, ErrNoPort) {
			t.Fatalf("removing a removed port: %v", err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for keep.Stats().Packets < 2*perQueue && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if ks := keep.Stats(); ks.Packets != 2*perQueue || ks.Lost != 0 || ks.Reordered != 0 || ks.Bad != 0 {
		t.Errorf("the stream between the ports that stayed: %+v, want %d packets in order", ks, 2*perQueue)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Close(); err != nil {
		t.Fatalf("leak check: %v", err)
	}
}

// A port is added to an engine that has none, before and after Start;
// the checks New makes are made again.
func TestAddPortToEmptyEngine(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fwd := program.Func{ProgramName: "to-1", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	e, err := New(Config{Pool: pool, Workers: 2, Programs: []program.Program{fwd}})
	if err != nil {
		t.Fatal(err)
	}
	// The generator never runs dry: on a loaded machine (CI under -race)
	// a bounded one may have made and dropped its all before the sink
	// is added.
	gen, _ := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Queues: 2, Flows: 2})
	oneQueue, _ := memport.NewSink("narrow", memport.SinkConfig{Layer: packet.L3})
	sink, _ := memport.NewSink("sink", memport.SinkConfig{Layer: packet.L3, Queues: 2})
	if _, err := e.AddPort(gen, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddPort(oneQueue, nil); err == nil {
		t.Error("a port with one TX queue was added to two workers")
	}
	if _, err := e.AddPort(gen, nil); err == nil {
		t.Error("a second port named gen was added")
	}
	if _, err := e.AddPort(sink, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for sink.Stats().Packets < 2000 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	e.Stop()
	// What the generator made before the sink existed was dropped.
	st := e.Stats()
	in, out := st.Ports[0], st.Ports[1]
	if out.TxPackets < 2000 || out.TxPackets != sink.Stats().Packets || out.TxPackets+in.Drops.Total() != in.RxPackets {
		t.Errorf("stats %+v, sink %+v", st.Ports, sink.Stats())
	}
	if err := e.RemovePort(0); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Close(); err != nil {
		t.Fatalf("leak check: %v", err)
	}
}

// closeCount is a port whose closes are counted.
type closeCount struct {
	port.Port
	closes atomic.Int32
}

func (c *closeCount) CloseInto(cache *buffer.Cache) error {
	c.closes.Add(1)
	return c.Port.CloseInto(cache)
}

// A worker that does not take up a change in time (a program blocks it)
// leaves no half-change behind: the port AddPort was adding is not
// listed and its name can be added again, the port RemovePort removed is
// gone; but neither is closed, nor its index given to another port,
// until every worker has let them go. Every buffer comes home.
func TestAdoptTimeout(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gen, err := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Queues: 2, Flows: 2, Bulk: true})
	if err != nil {
		t.Fatal(err)
	}
	newSink := func(name string) *closeCount {
		s, err := memport.NewSink(name, memport.SinkConfig{Layer: packet.L3, Queues: 2})
		if err != nil {
			t.Fatal(err)
		}
		return &closeCount{Port: s}
	}
	sink := newSink("sink")
	var hold atomic.Bool
	held, resume := make(chan struct{}), make(chan struct{})
	stuck := program.Func{ProgramName: "stuck", F: func(b *program.Batch) {
		if b.Worker == 0 && hold.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-resume
		}
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	e, err := New(Config{Pool: pool, Workers: 2, Programs: []program.Program{stuck}}, gen, sink)
	if err != nil {
		t.Fatal(err)
	}
	e.adoptTimeout = 50 * time.Millisecond
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	hold.Store(true)
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("worker 0 never ran the program")
	}
	var given []int // the indexes setup was given
	setup := func(i int) error { given = append(given, i); return nil }
	listed := func(name string) bool {
		_, ok := e.PortIndex(name)
		return ok || slices.ContainsFunc(e.Stats().Ports, func(p PortStats) bool { return p.Name == name })
	}

	x := newSink("x")
	if _, err := e.AddPort(x, setup); !errors.Is(err, ErrNotAdopted) {
		t.Fatalf("adding a port while a worker is stuck: %v, want ErrNotAdopted", err)
	}
	if listed("x") {
		t.Error("the port whose adding timed out is listed")
	}
	if err := e.RemovePort(1); !errors.Is(err, ErrNotAdopted) {
		t.Fatalf("removing a port while a worker is stuck: %v, want ErrNotAdopted", err)
	}
	if listed("sink") {
		t.Error("the port whose removal timed out is listed")
	}
	x2 := newSink("x")
	if _, err := e.AddPort(x2, setup); !errors.Is(err, ErrNotAdopted) {
		t.Fatalf("adding the name again while the worker is still stuck: %v, want ErrNotAdopted", err)
	}
	if !slices.Equal(given, []int{2, 3}) {
		t.Errorf("setup was given indexes %v, want 2 then 3: index 1 (removed) and 2 (not added) may still be used", given)
	}
	for name, p := range map[string]*closeCount{"removed": sink, "not added": x, "not added again": x2} {
		if n := p.closes.Load(); n != 0 {
			t.Errorf("the %s port was closed %d times while a worker may use it", name, n)
		}
	}

	close(resume)
	x3 := newSink("x")
	xi, err := e.AddPort(x3, nil)
	if err != nil {
		t.Fatalf("adding the name once the worker took up the change: %v", err)
	}
	for name, p := range map[string]*closeCount{"removed": sink, "not added": x, "not added again": x2} {
		if n := p.closes.Load(); n != 1 {
			t.Errorf("the %s port was closed %d times once no worker used it, want 1", name, n)
		}
	}
	if err := e.RemovePort(xi); err != nil {
		t.Fatal(err)
	}
	if i, err := e.AddPort(newSink("y"), nil); err != nil || i != 1 {
		t.Errorf("adding a port with every worker caught up: index %d, %v; want the lowest, 1", i, err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Close(); err != nil {
		t.Fatalf("leak check: %v", err)
	}
}

// blockedClose is a port whose close waits, once it began, until
// released: a TUN device that the kernel takes its time to unregister.
type blockedClose struct {
	closeCount
	began   chan struct{}
	release chan struct{}
}

func (b *blockedClose) CloseInto(cache *buffer.Cache) error {
	b.began <- struct{}{}
	<-b.release
	return b.closeCount.CloseInto(cache)
}

// Ports detached together close at the same time, outside the engine's
// lock: while their closes are under way the others forward, a port is
// added (at an index neither holds) and another removed; their indexes
// are given again only once they are closed. A detached port that no one
// closed is closed by Close, once; every buffer comes home.
func TestDetachedPortsCloseConcurrently(t *testing.T) {
	pool, err := buffer.NewPool(buffer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gen, err := memport.NewGenerator("gen", memport.GenConfig{Layer: packet.L3, Queues: 2, Flows: 2, Bulk: true})
	if err != nil {
		t.Fatal(err)
	}
	newSink := func(name string) *closeCount {
		s, err := memport.NewSink(name, memport.SinkConfig{Layer: packet.L3, Queues: 2})
		if err != nil {
			t.Fatal(err)
		}
		return &closeCount{Port: s}
	}
	sink := newSink("sink")
	slow := make([]*blockedClose, 2)
	for i := range slow {
		slow[i] = &blockedClose{closeCount: *newSink(fmt.Sprintf("slow%d", i)), began: make(chan struct{}, 1), release: make(chan struct{})}
	}
	toSink := program.Func{ProgramName: "to-sink", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	e, err := New(Config{Pool: pool, Workers: 2, Programs: []program.Program{toSink}}, gen, sink, slow[0], slow[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	sinkPackets := func() uint64 { return sink.Port.(*memport.Sink).Stats().Packets }
	closed := make(chan error, len(slow))
	for i := range slow {
		closePort, err := e.DetachPort(2 + i)
		if err != nil {
			t.Fatal(err)
		}
		go func() { closed <- closePort() }()
	}
	for i, s := range slow {
		select {
		case <-s.began:
		case <-time.After(10 * time.Second):
			t.Fatalf("port slow%d's close did not begin while the other's was under way", i)
		}
	}

	before := sinkPackets()
	deadline := time.Now().Add(10 * time.Second)
	for sinkPackets() < before+1000 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if sinkPackets() < before+1000 {
		t.Errorf("the sink got %d packets while two closes were under way, want 1000 or more", sinkPackets()-before)
	}
	x := newSink("x")
	xi, err := e.AddPort(x, nil)
	if err != nil || xi != 4 {
		t.Errorf("adding a port while two closes are under way: index %d, %v; want 4, past the indexes of the ports closing", xi, err)
	}
	if err == nil {
		if err := e.RemovePort(xi); err != nil || x.closes.Load() != 1 {
			t.Errorf("removing a port while two closes are under way: %v, closed %d times", err, x.closes.Load())
		}
	}

	for _, s := range slow {
		close(s.release)
	}
	for range slow {
		if err := <-closed; err != nil {
			t.Error(err)
		}
	}
	for i, s := range slow {
		if n := s.closes.Load(); n != 1 {
			t.Errorf("port slow%d closed %d times, want 1", i, n)
		}
	}
	y := newSink("y")
	if yi, err := e.AddPort(y, nil); err != nil || yi != 2 {
		t.Errorf("adding a port once the closes ended: index %d, %v; want the lowest, 2", yi, err)
	}
	closeY, err := e.DetachPort(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := closeY(); err != nil || y.closes.Load() != 1 {
		t.Errorf("a port detached but not closed before Close: closed %d times, and closing it after: %v", y.closes.Load(), err)
	}
	if err := pool.Close(); err != nil {
		t.Fatalf("leak check: %v", err)
	}
}
