package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"softnet.dev/buffer"
	"softnet.dev/endpoint"
	"softnet.dev/engine"
	"softnet.dev/memport"
	"softnet.dev/packet"
	"softnet.dev/program"
)

// zerocopySetup is one way for an application to take UDP payloads from
// the datapath: generator port → engine → endpoint table → application.
type zerocopySetup struct {
	payload int  // UDP payload bytes
	copying bool // ReadFrom (one copy) instead of lent views
	same    bool // the application runs on the worker's goroutine (a Poller)
}

func (s zerocopySetup) variant(name string) Variant {
	return Variant{
		Name:    name,
		Extra:   map[string]any{"size": s.payload},
		Prepare: func() (func(context.Context, int) int, func() error, error) { return prepareZerocopy(s) },
	}
}

func zerocopyLadder(payload int) *Experiment {
	e := &Experiment{
		Name:   "zerocopy",
		Desc:   fmt.Sprintf("zero-copy receive, UDP payload %d B, generator -> engine -> endpoint -> application", payload),
		Metric: "mb_per_s", Unit: "MB/s", Higher: true,
		Variants: []Variant{
			zerocopySetup{payload: payload, copying: true, same: true}.variant("copy-same"),
			zerocopySetup{payload: payload, copying: true}.variant("copy-other"),
			zerocopySetup{payload: payload, same: true}.variant("zerocopy-same"),
			zerocopySetup{payload: payload}.variant("zerocopy-other"),
		},
	}
	lbl := func(n string) string { return (&Variant{Name: n, Extra: map[string]any{"size": payload}}).Label() }
	e.Goals = []Goal{{Variant: lbl("zerocopy-other"), Against: lbl("copy-other"), Bound: 1.3}}
	return e
}

var zerocopyExperiments = []*Experiment{zerocopyLadder(1472), zerocopyLadder(65000)}

// app is the application's loop body: it consumes what is waiting, up to
// a batch, and returns the payload bytes.
type app struct {
	ep    *endpoint.Endpoint
	copy  bool
	views []endpoint.View
	buf   []byte
	sink  byte // what the application "reads", so that the reads stay
	bytes atomic.Uint64
}

func (a *app) step() int {
	n := 0
	if a.copy {
		for range 64 {
			k, _, ok, err := a.ep.TryReadFrom(a.buf)
			if !ok || err != nil {
				break
			}
			a.sink ^= a.buf[0] ^ a.buf[k-1]
			n += k
		}
	} else {
		k, err := a.ep.Receive(a.views)
		if err != nil || k == 0 {
			// One call when nothing waits, as the copying application.
			return 0
		}
		// The same work on the data as the copying application does after
		// its copy: read the first and last byte.
		for _, v := range a.views[:k] {
			a.sink ^= v.Payload[0] ^ v.Payload[len(v.Payload)-1]
			n += len(v.Payload)
		}
		_ = a.ep.Release(a.views[:k]...)
	}
	if n > 0 {
		a.bytes.Store(a.bytes.Load() + uint64(n))
	}
	return n
}

// pollSpins is how many empty steps in a row the application on its own
// goroutine makes before it sleeps in Wait. An empty step costs about 20
// ns (more while the worker writes the ring), so this is a few hundred
// microseconds: the worker delivers a batch every few microseconds, and
// pauses longer than this only when the OS takes its core away or the
// traffic stops.
const pollSpins = 1 << 14

// busyPoll is the application on its own goroutine until ctx is done,
// polling as a busy-polling application does (SO_BUSY_POLL, io_uring's
// SQPOLL): each sleep in Wait costs the worker a wake-up through the
// notify channel (a futex) and this goroutine a reschedule, and while it
// sleeps the receive ring fills and overflows. Spinning on its own core
// avoids both while packets keep coming. The policy is the
// application's, so it is here rather than in Endpoint.Wait, which
// stays a plain blocking wait.
func (a *app) busyPoll(ctx context.Context) {
	idle := 0
	for ctx.Err() == nil {
		if a.step() > 0 {
			idle = 0
			continue
		}
		if idle++; idle < pollSpins {
			continue
		}
		idle = 0
		_ = a.ep.Wait(ctx)
	}
}

// Poll makes the application a Poller: it runs on the worker.
func (a *app) Poll(int, *buffer.Cache) int { return a.step() }

func prepareZerocopy(s zerocopySetup) (func(context.Context, int) int, func() error, error) {
	pool, err := buffer.NewPool(buffer.Config{Classes: []buffer.ClassConfig{{Room: frameRoom, Count: 4096}, {Room: 65536, Count: 1024}}})
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (func(context.Context, int) int, func() error, error) {
		pool.Close()
		return nil, nil, err
	}
	// With zero-copy receive, payloads are written by a NIC, by DMA, at no
	// cost to the CPU. A generator that wrote every payload byte on the worker would
	// make the worker the slowest stage at any size, and hide what the
	// application's copy costs; HeadersOnly writes what the worker must
	// (headers and sequence numbers) and leaves the payload to the
	// "device". All four variants take the same packets.
	gen, err := memport.NewGenerator("gen", memport.GenConfig{
		Flows: 4, Sizes: []int{s.payload + packet.IPv4HeaderLen + packet.UDPHeaderLen}, Layer: packet.L3, Bulk: true, Pool: pool,
		HeadersOnly: true,
	})
	if err != nil {
		return fail(err)
	}
	table, err := endpoint.NewTable(endpoint.Config{Pool: pool, Workers: 1})
	if err != nil {
		return fail(err)
	}
	_, dst := memport.FlowAddrs(0, false)
	ep, err := table.Bind(endpoint.UDP(dst), endpoint.Options{})
	if err != nil {
		return fail(err)
	}
	a := &app{ep: ep, copy: s.copying, views: make([]endpoint.View, 64), buf: make([]byte, 65536)}
	pollers := []engine.Poller{table}
	if s.same {
		pollers = append(pollers, a)
	}
	e, err := engine.New(engine.Config{
		Pool: pool, Programs: []program.Program{table}, Consumers: []engine.Consumer{table}, Pollers: pollers,
	}, gen, table)
	if err != nil {
		return fail(err)
	}
	run := func(ctx context.Context, n int) int {
		actx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		if !s.same {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.busyPoll(actx)
			}()
		}
		moved := runEngine(ctx, e, a.bytes.Load, n)
		cancel()
		wg.Wait()
		return moved
	}
	done := func() error {
		err := e.Close()
		// Every lent buffer came home through the refill ring, or was
		// taken back when the engine closed: none was freed elsewhere.
		st := ep.Stats()
		if st.Lent != st.Refilled+st.Reclaimed || st.Rejected != 0 || st.BadReleases != 0 {
			err = errors.Join(err, fmt.Errorf("endpoint: lent %d, refilled %d, reclaimed %d, rejected %d, bad releases %d",
				st.Lent, st.Refilled, st.Reclaimed, st.Rejected, st.BadReleases))
		}
		return errors.Join(err, pool.Close())
	}
	return run, done, nil
}
