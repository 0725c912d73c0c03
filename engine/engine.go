package engine

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/port"
)

// Engine runs workers over a set of ports that AddPort and RemovePort
// change while they run. Start and Stop may be called repeatedly; Close
// is final.
type Engine struct {
	cfg Config
	// set is the ports as workers see them: an immutable snapshot that a
	// change replaces (RCU). Workers load it once per round.
	set atomic.Pointer[portSet]
	// ctl is the cache removed ports are closed into while the workers
	// run, the first of the closers' caches: up to maxClosers ports
	// close at once, each into a cache of its own, which waits in
	// closerCaches while no close uses it.
	ctl          *buffer.Cache
	closerCaches chan *buffer.Cache
	closerMade   atomic.Int32
	// detached holds the ports taken out of the workers' ports whose
	// closing is DetachPort's caller's: their indexes stay reserved
	// until they are closed. closers counts the closes in progress
	// outside mu, which Close waits for.
	detached []*detachedPort
	closers  sync.WaitGroup
	// quarantine holds the ports that left while a worker may still use
	// them (it did not take up the change in time): their indexes stay
	// reserved until every worker has let them go (release), and Close
	// closes those left.
	quarantine []quarantined
	// adoptTimeout bounds the wait for every worker to take up a change;
	// tests shorten it.
	adoptTimeout time.Duration
	workers      []*worker
	// epoch is when Batch.Now is 0, the same for every worker, so that
	// times programs store (a table entry's last-seen) compare across
	// workers and with Now.
	epoch time.Time

	// adoptedSignal is written (without blocking) by a worker that took
	// up a generation, so that publish waits for no longer than that.
	adoptedSignal chan struct{}

	mu      sync.Mutex // serializes Start, Stop, Close, AddPort, DetachPort and RemovePort
	closeMu sync.Mutex // serializes Close
	running bool
	closed  bool
	wg      sync.WaitGroup

	monitor atomic.Pointer[monitorRef] // SetDropMonitor
}

// portSet is one generation of the engine's ports.
type portSet struct {
	gen   uint64
	ports []*portState // by index; nil where a removed port was
}

func (s *portSet) port(i int) *portState {
	if i < 0 || i >= len(s.ports) {
		return nil
	}
	return s.ports[i]
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
// Every port that transmits needs a TX queue per worker. An engine may
// start with no ports and get them from AddPort.
func New(cfg Config, ports ...port.Port) (*Engine, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, epoch: time.Now(), adoptTimeout: defaultAdoptTimeout,
		adoptedSignal: make(chan struct{}, 1), closerCaches: make(chan *buffer.Cache, maxClosers)}
	set := &portSet{}
	for _, p := range ports {
		ps, err := e.checkPort(set, p)
		if err != nil {
			return nil, err
		}
		ps.index = len(set.ports)
		set.ports = append(set.ports, ps)
	}
	e.set.Store(set)
	for w := range cfg.Workers {
		wk, err := newWorker(e, w)
		if err != nil {
			e.closeWorkers()
			return nil, err
		}
		e.workers = append(e.workers, wk)
	}
	if e.ctl, err = cfg.Pool.NewCache(nil); err != nil {
		e.closeWorkers()
		return nil, fmt.Errorf("engine: %w", err)
	}
	e.closerMade.Store(1)
	e.closerCaches <- e.ctl
	return e, nil
}

// checkPort validates p against the configuration and the ports of set.
func (e *Engine) checkPort(set *portSet, p port.Port) (*portState, error) {
	info := p.Info()
	switch {
	case info.Name == "":
		return nil, fmt.Errorf("engine: a port has no name")
	case e.portIndex(set, info.Name) >= 0:
		return nil, fmt.Errorf("engine: two ports named %q", info.Name)
	case info.Queues < 1:
		return nil, fmt.Errorf("engine: port %s has no queues", info.Name)
	case p.TxQueue(0) != nil && info.Queues < e.cfg.Workers:
		return nil, fmt.Errorf("engine: port %s has %d queues; %d workers need one TX queue each", info.Name, info.Queues, e.cfg.Workers)
	}
	return &portState{port: p, info: info}, nil
}

func (e *Engine) portIndex(set *portSet, name string) int {
	for _, p := range set.ports {
		if p != nil && p.info.Name == name {
			return p.index
		}
	}
	return -1
}

// PortIndex returns the index of the port with the given name, as
// program verdicts use it.
func (e *Engine) PortIndex(name string) (int, bool) {
	i := e.portIndex(e.set.Load(), name)
	return i, i >= 0
}

// Ports returns the ports' descriptions, by index; a removed port's
// index has the zero Info until AddPort reuses it.
func (e *Engine) Ports() []port.Info {
	set := e.set.Load()
	out := make([]port.Info, len(set.ports))
	for i, p := range set.ports {
		if p != nil {
			out[i] = p.info
		}
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
	// Close lets go of mu while closes in progress finish: a second
	// Close waits here until the first is done.
	e.closeMu.Lock()
	defer e.closeMu.Unlock()
	e.Stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	// The closes in progress finish first: they take mu again to give
	// up their ports' indexes, and their caches come home.
	e.mu.Unlock()
	e.closers.Wait()
	e.mu.Lock()
	var errs []error
	ports := slices.Clone(e.set.Load().ports)
	for _, q := range e.quarantine {
		ports = append(ports, q.ps)
	}
	e.quarantine = nil
	for _, d := range e.detached {
		ports = append(ports, d.ps) // detached, never closed by the caller
	}
	e.detached = nil
	for _, p := range ports {
		if p == nil {
			continue
		}
		if err := p.port.CloseInto(e.ctl); err != nil {
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
	// No close is in progress: every closer's cache waits in
	// closerCaches.
	for len(e.closerCaches) > 0 {
		(<-e.closerCaches).Close()
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

// Err returns why the port with the given index went down, or nil.
func (e *Engine) Err(portIndex int) error {
	p := e.set.Load().port(portIndex)
	if p == nil {
		return nil
	}
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
