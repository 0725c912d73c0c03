package lab

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/engine"
	"softnet.dev/internal/knob"
	"softnet.dev/internal/txthread"
	"softnet.dev/internal/vswitch"
	"softnet.dev/port"
	"softnet.dev/program"
	"softnet.dev/tun"
)

// softnetPath is a softnet switch built in this process from the same
// parts as `softnet switch` (package vswitch), with the knobs the ladder
// turns: one worker locked to its OS thread, a TUN or TAP port in each
// guest.
type softnetPath struct {
	devs   []*tun.Device
	pool   *buffer.Pool
	engine *engine.Engine
	tids   *threadRecorder
}

// openSoftnet creates the devices, the pool and the engine, and starts
// it. On error everything made so far is closed again.
func openSoftnet(p *guestPair, c softnetConfig, tap bool, log *slog.Logger) (_ *softnetPath, err error) {
	var (
		devs  []*tun.Device
		ports []port.Port // devs[i] or its txthread wrapper
		pool  *buffer.Pool
	)
	defer func() {
		if err == nil {
			return
		}
		// No worker ever ran: nothing holds buffers, and the ports take no
		// cache to close. The wrappers' caches go before the pool.
		for _, pt := range ports {
			_ = pt.Close(nil)
		}
		for _, d := range devs[len(ports):] {
			_ = d.Close(nil)
		}
		if pool != nil {
			_ = pool.Close()
		}
	}()
	for _, g := range p.guests() {
		tcfg := tun.Config{Name: g.dev, TAP: tap, NetNS: g.ns, Offload: c.Offload, GRO: c.GRO}
		if !c.Bulk {
			knob.TUNSingleGets(&tcfg)
		}
		d, err := tun.Open(tcfg)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	pcfg := buffer.Config{Classes: vswitch.PoolClasses(len(devs))}
	if c.Uncached {
		knob.PoolUncached(&pcfg)
	}
	if pool, err = buffer.NewPool(pcfg); err != nil {
		return nil, err
	}
	for _, d := range devs {
		var pt port.Port = d
		if c.Defer {
			if pt, err = txthread.Wrap(d, pool); err != nil {
				return nil, err
			}
		}
		ports = append(ports, pt)
	}
	prog, err := switchProgram(p, tap)
	if err != nil {
		return nil, err
	}
	rec := &threadRecorder{inner: prog, tids: make([]atomic.Int32, 1)}
	eng, err := engine.New(engine.Config{
		Pool: pool, Workers: 1, Batch: c.Batch, Programs: []program.Program{rec},
		// A locked worker keeps one thread, whose CPU time is then the
		// worker's own.
		LockOSThread: true,
		Log:          log,
	}, ports...)
	if err != nil {
		return nil, err
	}
	if err := eng.Start(); err != nil {
		cerr := eng.Close() // closes the ports; the pool is left to the deferred cleanup
		ports, devs = nil, nil
		return nil, errors.Join(err, cerr)
	}
	return &softnetPath{devs: devs, pool: pool, engine: eng, tids: rec}, nil
}

// switchProgram is `softnet switch`'s program with a route to each
// guest's subnets.
func switchProgram(p *guestPair, tap bool) (program.Program, error) {
	var routes []program.Route
	for i, g := range p.guests() {
		routes = append(routes, program.Route{Prefix: g.v4.Masked(), Port: i}, program.Route{Prefix: g.v6.Masked(), Port: i})
	}
	return vswitch.Program(tap, routes)
}

func (s *softnetPath) counters() (forwarded, bool) {
	var c forwarded
	for _, p := range s.engine.Stats().Ports {
		c.packets += p.TxPackets
		c.bytes += p.TxBytes
	}
	return c, true
}

func (s *softnetPath) buffers() (buffer.Stats, bool) { return s.pool.Stats(), true }

// deviceNoMem counts the receive bursts the devices cut short because
// the pool had no buffer. Those packets are not lost to softnet: they stay
// queued in the kernel, which drops them only if its queue overflows
// meanwhile (counted on the sending guest's device).
func (s *softnetPath) deviceNoMem() uint64 {
	var n uint64
	for _, d := range s.devs {
		n += d.Stats().RxDrops[drop.NoMem]
	}
	return n
}

func (s *softnetPath) workerThreads() []int { return s.tids.threads() }

func (s *softnetPath) poolBytes() int64 {
	var n int64
	headroom := s.pool.Config().Headroom
	for _, c := range s.pool.Stats().Classes {
		frame := (headroom + c.Room + 63) &^ 63 // frames start on cache lines
		n += int64(frame) * int64(c.Count)
	}
	return n
}

// close stops the worker, closes the ports (removing the devices) and
// closes the pool, whose leak check must balance.
func (s *softnetPath) close() (string, error) {
	err := s.engine.Close()
	leak := "ok"
	if lerr := s.pool.Close(); lerr != nil {
		leak = lerr.Error()
	}
	if err != nil {
		return leak, fmt.Errorf("softnet: %w", err)
	}
	return leak, nil
}

// threadRecorder runs a program and notes, per worker, the OS thread its
// first batch ran on. With engine.Config.LockOSThread that thread is the
// worker's for as long as it runs, so /proc/self/task/TID/stat then gives
// the worker's own CPU time. It costs one atomic load per batch.
type threadRecorder struct {
	inner program.Program
	tids  []atomic.Int32 // by worker
}

func (r *threadRecorder) Name() string { return r.inner.Name() }

func (r *threadRecorder) Run(b *program.Batch) {
	if t := &r.tids[b.Worker]; t.Load() == 0 {
		t.Store(int32(unix.Gettid()))
	}
	r.inner.Run(b)
}

// threads returns the workers' threads recorded so far.
func (r *threadRecorder) threads() []int {
	var out []int
	for i := range r.tids {
		if t := r.tids[i].Load(); t != 0 {
			out = append(out, int(t))
		}
	}
	return out
}
