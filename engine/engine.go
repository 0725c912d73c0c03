package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/port"
)

// Engine runs workers over a fixed set of ports. Start and Stop may be
// called repeatedly; Close is final.
type Engine struct {
	cfg     Config
	ports   []*portState
	workers []*worker
	// epoch is when Batch.Now is 0, the same for every worker, so that
	// times programs store (a table entry's last-seen) compare across
	// workers and with Now.
	epoch time.Time

	mu      sync.Mutex // serializes Start, Stop and Close
	running bool
	closed  bool
	wg      sync.WaitGroup

	monitor atomic.Pointer[monitorRef] // SetDropMonitor
}

// portState is what every worker shares about a port.
type portState struct {
	index int
	port  port.Port
	info  port.Info
	down  atomic.Bool
	tap   atomic.Pointer[tapRef] // SetTap

	mu  sync.Mutex
	err error // why it went down
}

// New validates the ports against the configuration and prepares one
// worker per Config.Workers, each with its own cache, batch and poller.
// Every port that transmits needs a TX queue per worker.
func New(cfg Config, ports ...port.Port) (*Engine, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(ports) == 0 {
		return nil, fmt.Errorf("engine: no ports")
	}
	e := &Engine{cfg: cfg, epoch: time.Now()}
	names := map[string]bool{}
	for i, p := range ports {
		info := p.Info()
		switch {
		case names[info.Name]:
			return nil, fmt.Errorf("engine: two ports named %q", info.Name)
		case info.Queues < 1:
			return nil, fmt.Errorf("engine: port %s has no queues", info.Name)
		case p.TxQueue(0) != nil && info.Queues < cfg.Workers:
			return nil, fmt.Errorf("engine: port %s has %d queues; %d workers need one TX queue each", info.Name, info.Queues, cfg.Workers)
		}
		names[info.Name] = true
		e.ports = append(e.ports, &portState{index: i, port: p, info: info})
	}
	for w := range cfg.Workers {
		wk, err := newWorker(e, w)
		if err != nil {
			e.closeWorkers()
			return nil, err
		}
		e.workers = append(e.workers, wk)
	}
	return e, nil
}

// PortIndex returns the index of the port with the given name, as
// program verdicts use it.
func (e *Engine) PortIndex(name string) (int, bool) {
	for _, p := range e.ports {
		if p.info.Name == name {
			return p.index, true
		}
	}
	return 0, false
}

// Ports returns the ports' descriptions, by index.
func (e *Engine) Ports() []port.Info {
	out := make([]port.Info, len(e.ports))
	for i, p := range e.ports {
		out[i] = p.info
	}
	return out
}

// Start launches the workers.
func (e *Engine) Start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errors.New("engine: closed")
	}
	if e.running {
		return nil
	}
	e.running = true
	for _, w := range e.workers {
		w.stop.Store(false)
		e.wg.Add(1)
		go w.run(&e.wg)
	}
	return nil
}

// Stop asks every worker to finish its round and waits for them. Packets
// already queued inside ports stay there for the next Start, or are
// purged by Close.
func (e *Engine) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.running {
		return
	}
	for _, w := range e.workers {
		w.stop.Store(true)
		w.wake()
	}
	e.wg.Wait()
	e.running = false
}

// Close stops the engine, closes every port (purging what they still
// hold with drop.QueuePurge) and returns the workers' buffers to the pool.
// The pool's leak check (buffer.Pool.Close) then balances.
func (e *Engine) Close() error {
	e.Stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	// The workers have stopped: worker 0's cache is free for this
	// goroutine to use.
	var errs []error
	c := e.workers[0].cache
	for _, p := range e.ports {
		if err := p.port.Close(c); err != nil {
			errs = append(errs, fmt.Errorf("engine: close port %s: %w", p.info.Name, err))
		}
	}
	e.closeWorkers()
	return errors.Join(errs...)
}

func (e *Engine) closeWorkers() {
	for _, w := range e.workers {
		w.close()
	}
}

// fail marks a port down after an error from one of its queues; the first
// error is kept for Stats.
func (e *Engine) fail(p *portState, err error) {
	p.mu.Lock()
	first := p.err == nil
	if first {
		p.err = err
	}
	p.mu.Unlock()
	p.down.Store(true)
	if first {
		e.cfg.Log.Error("port down", "port", p.info.Name, "err", err)
	}
}

// Err returns why the named port went down, or nil.
func (e *Engine) Err(portIndex int) error {
	p := e.ports[portIndex]
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Now returns the engine's clock as programs see it in Batch.Now:
// monotonic nanoseconds since New. Workers read it once per few dozen
// rounds and after sleeping, never per packet; Now is for the control
// side, such as calling a program's Age.
func (e *Engine) Now() int64 { return int64(time.Since(e.epoch)) }

// Pool returns the engine's buffer pool.
func (e *Engine) Pool() *buffer.Pool { return e.cfg.Pool }
