package engine

import (
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/program"
)

// Defaults used where a Config field is zero.
const (
	DefaultBatch     = 64 // the NAPI budget
	DefaultIdlePolls = 8  // empty rounds before a worker sleeps
	maxBatch         = 4096
	maxBusyPoll      = time.Second
)

// Consumer receives packets delivered locally (program.Deliver). Deliver
// takes ownership of every buffer; it runs on the worker's goroutine, with
// the worker's index and cache (a consumer that keeps per-worker state,
// such as package endpoint's lending tables, indexes it without a lookup),
// and must not block.
type Consumer interface {
	Deliver(worker int, c *buffer.Cache, bufs []*buffer.Buf)
}

// Poller is called by every worker at the top of each round, before its
// RX queues are polled, with the worker's own cache: the place to take
// back buffers that applications returned through a refill ring, so that
// they are freed on the worker (NAPI) side without a lock. Poll returns
// the amount of work it did; a worker whose pollers keep finding work does
// not go to sleep. Poll must not block.
type Poller interface {
	Poll(worker int, c *buffer.Cache) int
}

// Config sets up an engine.
type Config struct {
	Pool     *buffer.Pool // where every worker's cache comes from
	Workers  int          // default 1
	Batch    int          // packets per queue per round, default DefaultBatch
	Programs []program.Program
	// Egress, if not nil, sees each round's packets for a port before
	// they are sent, and keeps those that may leave (a policer of what
	// guests receive); it drops the rest, counted on that port.
	Egress    program.Egress
	Consumers []Consumer // indexed by program.DeliverVerdict's argument
	Pollers   []Poller   // called at the top of every round, in order
	// IdlePolls is the number of rounds without work after which a
	// worker sleeps; -1 never sleeps (busy polling).
	IdlePolls int
	// BusyPoll keeps a worker that found work polling for this long
	// after its last work before it sleeps (the kernel's
	// napi_busy_poll): a packet that follows soon is taken without the
	// cost of a wake-up. A worker that found nothing sleeps after
	// IdlePolls rounds as without it, so an idle engine stays idle.
	BusyPoll time.Duration
	// LockOSThread pins each worker goroutine to an OS thread, and CPUs,
	// if set, sets worker i's thread affinity to CPUs[i%len(CPUs)].
	LockOSThread bool
	CPUs         []int
	Log          *slog.Logger // default: discard
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Pool == nil {
		return cfg, fmt.Errorf("engine: no buffer pool")
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.IdlePolls == 0 {
		cfg.IdlePolls = DefaultIdlePolls
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.Workers < 1 || cfg.Workers > 4*runtime.NumCPU()+64:
		return cfg, fmt.Errorf("engine: %d workers", cfg.Workers)
	case cfg.Batch < 1 || cfg.Batch > maxBatch:
		return cfg, fmt.Errorf("engine: batch %d outside [1, %d]", cfg.Batch, maxBatch)
	case cfg.IdlePolls < -1:
		return cfg, fmt.Errorf("engine: idle polls %d", cfg.IdlePolls)
	case cfg.BusyPoll < 0 || cfg.BusyPoll > maxBusyPoll:
		return cfg, fmt.Errorf("engine: busy poll %v outside [0, %v]", cfg.BusyPoll, maxBusyPoll)
	}
	for _, cpu := range cfg.CPUs {
		if cpu < 0 || cpu >= 1024 {
			return cfg, fmt.Errorf("engine: cpu %d", cpu)
		}
	}
	if len(cfg.CPUs) > 0 && !cfg.LockOSThread {
		return cfg, fmt.Errorf("engine: CPU affinity needs LockOSThread")
	}
	return cfg, nil
}
