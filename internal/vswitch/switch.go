package vswitch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/endpoint"
	"softnet.dev/engine"
	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/port"
	"softnet.dev/program"
	"softnet.dev/tun"
)

// stopTimeout bounds how long Close waits for the workers once told to
// stop.
const stopTimeout = 2 * time.Second

// Busy polling of `softnet switch --busy-poll`. The default is what
// measured best on the 2-core reference machine (docs/benchmarks.md):
// it brings a ping-pong's latency below the kernel's veth (from about
// 70 to 35-45 µs one way), for up to a tenth of the throughput and CPU
// per packet in some runs (the spinning worker takes CPU the guests
// want), and an idle switch still sleeps.
const (
	DefaultBusyPoll = 200 * time.Microsecond
	MaxBusyPoll     = time.Second
)

// Tuning is how `softnet switch` runs beside its configuration: its
// flags that a reload does not change. The zero value is the default.
type Tuning struct {
	// BusyPoll is engine.Config.BusyPoll (`softnet switch --busy-poll`):
	// zero is DefaultBusyPoll, a negative value turns busy polling off.
	BusyPoll time.Duration
	// CPUs, if not empty, is a list of CPUs (ParseCPUs) to pin the
	// workers to, worker i to the i-th (`softnet switch --cpus`): a worker
	// that polls guests' rings, as a vhost-user back-end does, should own
	// a CPU the guests do not run on. Unpinned, the scheduler wakes it on
	// the CPU of the guest that kicked it, and the two take turns there.
	CPUs string
	// Persist makes the devices of the ports the switch creates outlive
	// it if it dies (portkind.Keeper), for a switch with a state file:
	// the next one adopts those its state says are kept (PortSpec.Kept).
	// Close still removes them, unless KeepGuests.
	Persist bool
	// Restore makes Open leave out a port the API or agent made (Live) whose
	// device cannot be opened, with its routes, rather than fail: a
	// switch restoring its state, whose guest went away while no switch
	// ran. Skipped lists them.
	Restore bool
}

// Plan is everything Open builds, worked out from a Config and a Tuning
// without touching the system, so that two ways of describing a switch
// (the command line and the lab) can be compared, and so that the lab
// can change it to measure one mechanism at a time (OpenVariant).
type Plan struct {
	// Ports are the ports Open opens, in cfg's order, each with its
	// kind's options (not nil).
	Ports []PortSpec
	Pool  buffer.Config
	// Engine lacks the parts that are objects: the pool, the programs,
	// consumers, pollers and the logger.
	Engine engine.Config
	TAP    bool // bridge TAP ports rather than route TUN ports
	// Live is a switch that starts with fewer than two ports and gets
	// the rest while it runs: it has both the bridge and the forwarder,
	// and the first port added decides which one works.
	Live    bool
	Routes  []program.Route // by index in Ports; services route to len(Ports)
	Filters []program.Rule
	// Policies are the guests' port security, by index in Ports; the
	// services' port, the switch's own, has none.
	Policies map[int]program.PortPolicy
	Persist  bool // Tuning.Persist
}

// NewPlan validates cfg and works out the switch it describes.
func NewPlan(cfg Config, t Tuning) (Plan, error) {
	if err := cfg.Validate(); err != nil {
		return Plan{}, err
	}
	p := Plan{
		// Each worker keeps its OS thread: its CPU time can then be read
		// per thread, and a thread's caches stay warm.
		Engine:  engine.Config{Workers: cfg.Workers, Batch: engine.DefaultBatch, LockOSThread: true, BusyPoll: max(t.BusyPoll, 0)},
		Filters: cfg.Filters,
		Persist: t.Persist,
	}
	if t.BusyPoll == 0 {
		p.Engine.BusyPoll = DefaultBusyPoll
	}
	cpus, err := ParseCPUs(t.CPUs)
	if err != nil {
		return Plan{}, fmt.Errorf("cpus: %w", err)
	}
	p.Engine.CPUs = cpus
	if len(cfg.Ports) > 0 {
		p.TAP = !cfg.Ports[0].Routed()
	}
	p.Live = len(cfg.Ports) < 2
	p.Ports = slices.Clone(cfg.Ports)
	p.Pool = buffer.Config{Classes: PoolClasses(cfg.Workers)}
	for _, rt := range cfg.Routes {
		p.Routes = append(p.Routes, program.Route{Prefix: rt.Prefix, Port: cfg.portIndex(rt.Port)})
	}
	// Each service address is routed to the endpoint port (the last):
	// traffic to it that no endpoint takes (another port, say) is dropped
	// there with NO_ROUTE instead of being flooded or misrouted.
	for _, sv := range cfg.Services {
		p.Routes = append(p.Routes, program.Route{Prefix: netip.PrefixFrom(sv.Addr.Addr(), sv.Addr.Addr().BitLen()), Port: len(cfg.Ports)})
	}
	p.Policies = map[int]program.PortPolicy{}
	for i, spec := range cfg.Ports {
		p.Policies[i] = spec.policy(cfg.Routes)
	}
	return p, nil
}

// policy is the port's security policy with routes: its explicit
// allow= or, by default, the prefixes routed to a routed port (strict
// reverse-path filtering: a guest sends only from where its replies
// would be routed) and any address on a bridged port.
func (p PortSpec) policy(routes []RouteSpec) program.PortPolicy {
	pol := program.PortPolicy{MACs: p.MACs, DHCPServer: p.DHCPServer, Router: p.Router}
	switch {
	case p.Allow != nil:
		pol.Allow = *p.Allow
	case !p.Routed():
		pol.Allow.Any = true
	default:
		// A prefix counts once toward the policy's bound, however many
		// routes name it: a change lists the old and the new routes.
		seen := map[netip.Prefix]bool{}
		for _, rt := range routes {
			if rt.Port == p.Name && !seen[rt.Prefix] {
				seen[rt.Prefix] = true
				pol.Allow.Prefixes = append(pol.Allow.Prefixes, rt.Prefix)
			}
		}
	}
	return pol
}

// PoolClasses sizes the buffer pool of a switch with workers workers:
// the pool is the workers' budget, whatever the number of ports. Each
// worker lends the kernel up to tun.RingBuffers buffers of a class for
// all of its TUN and TAP RX queues, and needs as many again for the
// bursts it has in flight and its cache; the MTU class also feeds
// software segmentation and copies, and holds what the kinds lend the
// kernel beyond that (an AF_XDP port's fill rings: portkind.Kind.Lends).
// Memory is mapped, not touched: a buffer costs RSS once a packet was
// in it.
func PoolClasses(workers int) []buffer.ClassConfig {
	perWorker := 2 * tun.RingBuffers
	lends := 0
	for _, k := range kinds {
		lends += k.Lends
	}
	return []buffer.ClassConfig{
		{Room: 2048, Count: 8192 + (perWorker+lends)*workers},
		// At least four workers' worth: a worker lends at most a quarter
		// of a class.
		{Room: 65536 + 64, Count: 128 + perWorker*max(workers, 2)},
	}
}

// Switch is an opened switch: its devices exist and its engine is built.
// Its ports and routes change while it runs (AddPort, RemovePort,
// AddRoute, RemoveRoute, Apply).
type Switch struct {
	plan   Plan
	log    *slog.Logger
	pool   *buffer.Pool
	engine *engine.Engine
	table  *endpoint.Table // the services' endpoints, nil without services
	svcs   []*service
	chain  chain

	// mu serializes changes and guards what they change.
	mu    sync.Mutex
	cfg   Config      // what runs now
	ports []*livePort // in cfg.Ports order
	// stale are the indexes of ports that a late worker may have used
	// after they were forgotten (engine.ErrNotAdopted): the next port
	// there forgets what the worker learned.
	stale map[int]bool
	// closing are the ports removed whose devices are being closed,
	// outside mu, by name: each channel closes when its device is
	// closed, and a port of that name is added only then.
	closingMu sync.Mutex
	closing   map[string]chan struct{}
	// save records each configuration before the switch runs it
	// (SetSave); nil for none.
	save func(Config) error

	tuning  Tuning    // Open's
	skipped []Skipped // Tuning.Restore's

	stopServices context.CancelFunc
	svcWG        sync.WaitGroup
}

// livePort is one of the switch's ports.
type livePort struct {
	spec  PortSpec
	open  portkind.Opened // as its kind opened it
	port  port.Port       // open's port, or a variant's wrapper (OpenVariant)
	index int             // the engine's
}

// chain is the switch's own programs.
type chain struct {
	police *program.Policer // the ports' rate limits, both ways
	sec    *program.PortSecurity
	filter *program.Filter      // nil without filter rules
	fwd    *program.L3Forwarder // for TUN ports
	bridge *program.Bridge      // for TAP ports
}

// agers are the forwarder and the bridge, whose tables age.
func (c *chain) agers() []interface{ Age(now int64) } {
	var out []interface{ Age(now int64) }
	if c.bridge != nil {
		out = append(out, c.bridge)
	}
	if c.fwd != nil {
		out = append(out, c.fwd)
	}
	return out
}

// Open creates or attaches every device, sizes the buffer pool and builds
// the engine, as t says. On error everything opened so far is closed
// again and the error says which part failed.
func Open(cfg Config, t Tuning, log *slog.Logger) (*Switch, error) {
	plan, err := NewPlan(cfg, t)
	if err != nil {
		return nil, err
	}
	sw := newSwitch(cfg, plan, log)
	sw.tuning = t
	if err := sw.openPorts(); err != nil {
		return nil, errors.Join(err, sw.abandon())
	}
	if err := sw.build(); err != nil {
		return nil, errors.Join(err, sw.abandon())
	}
	return sw, nil
}

// Wrap stands between a port and the engine, as internal/txthread.Wrap
// does for the lab's +defer step.
type Wrap func(port.Port, *buffer.Pool) (port.Port, error)

// OpenVariant opens a switch as softnet's lab builds the steps of its
// ladder, to measure one mechanism at a time: plan is NewPlan's for cfg,
// with the pool's, the ports' or the engine's configuration changed
// (knobs included), and wrap, if not nil, stands between each port and
// the engine. The ports a later AddPort or Apply opens are as
// Open's: the lab does not change a running variant. Open never comes
// here, so that nothing of the lab's runs in `softnet switch`.
func OpenVariant(cfg Config, plan Plan, wrap Wrap, log *slog.Logger) (*Switch, error) {
	sw := newSwitch(cfg, plan, log)
	err := sw.openPorts()
	if err == nil && wrap != nil {
		err = sw.wrapPorts(wrap)
	}
	if err == nil {
		err = sw.build()
	}
	if err != nil {
		return nil, errors.Join(err, sw.abandon())
	}
	return sw, nil
}

// wrapPorts puts wrap between each port and the engine.
func (sw *Switch) wrapPorts(wrap Wrap) error {
	for _, lp := range sw.ports {
		w, err := wrap(lp.port, sw.pool)
		if err != nil {
			return fmt.Errorf("port %s: %w", lp.spec, err)
		}
		lp.port = w
	}
	return nil
}

func newSwitch(cfg Config, plan Plan, log *slog.Logger) *Switch {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Workers = plan.Engine.Workers // the default worked out
	return &Switch{cfg: cfg, plan: plan, log: log}
}

// openPorts makes the pool and opens the plan's ports.
func (sw *Switch) openPorts() error {
	var err error
	if sw.pool, err = buffer.NewPool(sw.plan.Pool); err != nil {
		return err
	}
	// A few at a time: opening a device is mostly waiting for the
	// kernel (netlink, its namespace), and a node's switch restarting
	// with its guests opens a hundred while they wait.
	opened := make([]*livePort, len(sw.plan.Ports))
	errs := make([]error, len(sw.plan.Ports))
	var wg sync.WaitGroup
	sem := make(chan struct{}, openParallel)
	for i, spec := range sw.plan.Ports {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			opened[i], errs[i] = sw.openPort(spec)
		})
	}
	wg.Wait()
	var failed []error
	for i, spec := range sw.plan.Ports {
		switch {
		case errs[i] == nil:
			sw.ports = append(sw.ports, opened[i])
		case sw.tuning.Restore && spec.Origin.Live():
			sw.skipped = append(sw.skipped, Skipped{spec, errs[i]})
		default:
			failed = append(failed, errs[i])
		}
	}
	if len(failed) > 0 {
		return errors.Join(failed...) // abandon closes those opened
	}
	if len(sw.skipped) > 0 {
		// The switch the plan describes, without the ports left out
		// and their routes.
		cfg := sw.cfg.clone()
		for _, s := range sw.skipped {
			cfg.Ports = slices.DeleteFunc(cfg.Ports, func(p PortSpec) bool { return p.Name == s.Spec.Name })
			cfg.Routes = slices.DeleteFunc(cfg.Routes, func(r RouteSpec) bool { return r.Port == s.Spec.Name })
		}
		plan, err := NewPlan(cfg, sw.tuning)
		if err != nil {
			return err
		}
		sw.cfg, sw.plan = cfg, plan
	}
	for i, lp := range sw.ports {
		lp.index = i
		sw.cfg.Ports[i] = lp.spec // Kept as it is now
		if err := lp.setRoutes(sw.cfg.Routes); err != nil {
			return err
		}
	}
	return nil
}

// openParallel bounds the ports Open opens at a time.
const openParallel = 8

// Skipped is a port that Open left out (Tuning.Restore): its spec, and
// why its device could not be opened.
type Skipped struct {
	Spec PortSpec
	Err  error
}

// Skipped returns the ports Open left out, with Tuning.Restore.
func (sw *Switch) Skipped() []Skipped { return sw.skipped }

// build makes the chain, the services and the engine over the ports.
func (sw *Switch) build() error {
	var err error
	ecfg := sw.plan.Engine
	ecfg.Pool, ecfg.Log = sw.pool, sw.log
	if sw.chain, err = sw.plan.newChain(sw.log); err != nil {
		return err
	}
	for i, pol := range sw.plan.Policies {
		sw.warnNoSources(sw.cfg.Ports[i].Name, pol)
	}
	// The policer goes first, as the kernel's tc ingress comes before
	// anything else: a guest over its rate costs no more than the drop.
	// Port security next, before the services' table too: nothing a
	// guest sends as someone else is delivered, filtered or learned.
	ecfg.Programs = append(ecfg.Programs, sw.chain.police, sw.chain.sec)
	ecfg.Egress = sw.chain.police
	if len(sw.cfg.Services) > 0 {
		if err := sw.openServices(); err != nil {
			return err
		}
		// The table's program goes first so that datagrams for a service
		// are delivered before the forwarder routes them.
		ecfg.Programs = append(ecfg.Programs, sw.table)
		ecfg.Consumers = []engine.Consumer{sw.table}
		ecfg.Pollers = []engine.Poller{sw.table}
	}
	ecfg.Programs = append(ecfg.Programs, sw.chain.programs()...)
	var ports []port.Port
	for _, lp := range sw.ports {
		ports = append(ports, lp.port)
	}
	if sw.table != nil {
		ports = append(ports, sw.table)
	}
	if sw.engine, err = engine.New(ecfg, ports...); err != nil {
		return err
	}
	sw.log.Info("switch ready", "workers", ecfg.Workers, "programs", programNames(ecfg.Programs), "pool", fmt.Sprintf("%d buffers", sw.pool.Stats().Capacity))
	return nil
}

// openPort opens the port of spec, with a queue per worker unless it
// says, and logs what it got.
func (sw *Switch) openPort(spec PortSpec) (*livePort, error) {
	q := spec.Queues
	if q == 0 {
		q = sw.cfg.Workers
	}
	h := portkind.Host{Pool: sw.pool, Log: sw.log, Adopt: spec.Kept}
	o, err := spec.Options.Open(spec.Name, spec.Common, q, h)
	if errors.Is(err, portkind.ErrGone) && spec.Origin == FromConfig {
		// The configuration's port is the operator's: it comes back,
		// without what its guest had configured.
		sw.log.Warn("port: its kept device went away while no switch ran; creating it again", "port", spec.Name, "err", err)
		h.Adopt = false
		o, err = spec.Options.Open(spec.Name, spec.Common, q, h)
	}
	if err != nil {
		return nil, fmt.Errorf("port %s: %w", spec, deviceError{err})
	}
	spec.Kept = false
	if k, ok := o.(portkind.Keeper); ok && sw.plan.Persist {
		if err := k.Persist(); err != nil {
			return nil, errors.Join(fmt.Errorf("port %s: %w", spec, deviceError{err}), o.Port().CloseInto(nil))
		}
		spec.Kept = true
	}
	attrs := append([]any{"spec", spec.String()}, o.Describe()...)
	if h.Adopt {
		attrs = append(attrs, "adopted", true)
	}
	sw.log.Info("port", attrs...)
	return &livePort{spec: spec, open: o, port: o.Port()}, nil
}

// DiscardKept removes the device that a switch before kept for the
// port of spec (PortSpec.Kept), which this one does not have: it is
// adopted and closed at once. workers is that switch's worker count,
// which gave the port its queues; a device already gone is no error.
func DiscardKept(spec PortSpec, workers int, log *slog.Logger) error {
	q := spec.Queues
	if q == 0 {
		q = workers
	}
	o, err := spec.Options.Open(spec.Name, spec.Common, q, portkind.Host{Log: log, Adopt: true})
	if errors.Is(err, portkind.ErrGone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("port %s: %w", spec, err)
	}
	return o.Port().CloseInto(nil)
}

// KeepGuests makes the ports whose devices can outlive the switch
// (portkind.Keeper) leave them in place when it closes, each with what
// its guest configured, for the next switch to adopt; it returns the
// configuration that says which (PortSpec.Kept), for the state file.
// Other ports close as they would.
func (sw *Switch) KeepGuests() (Config, error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	var errs []error
	for i, lp := range sw.ports {
		k, ok := lp.open.(portkind.Keeper)
		if !ok {
			continue
		}
		if err := k.Keep(); err != nil {
			errs = append(errs, fmt.Errorf("port %s: %w", lp.spec.Name, err))
			continue
		}
		lp.spec.Kept, sw.cfg.Ports[i].Kept = true, true
	}
	return sw.cfg.clone(), errors.Join(errs...)
}

// setRoutes gives a port whose kind routes what is sent to it
// (portkind.Routed) the routes to it among routes, with their next
// hops; other ports need nothing.
func (lp *livePort) setRoutes(routes []RouteSpec) error {
	r, ok := lp.open.(portkind.Routed)
	if !ok {
		return nil
	}
	var to []portkind.Route
	for _, rt := range routes {
		if rt.Port == lp.spec.Name {
			to = append(to, portkind.Route{Prefix: rt.Prefix, Via: rt.Via})
		}
	}
	if err := r.SetRoutes(to); err != nil {
		return fmt.Errorf("port %s: %w", lp.spec.Name, err)
	}
	return nil
}

// deviceError is a kind's error opening a port, which is ErrDevice too.
type deviceError struct{ error }

func (e deviceError) Unwrap() []error { return []error{e.error, ErrDevice} }

func (sw *Switch) warnNoSources(name string, pol program.PortPolicy) {
	if !pol.Allow.Any && len(pol.Allow.Prefixes) == 0 {
		sw.log.Warn("port may send from no address: no route to it and no allow=; every packet from it is dropped with IP_RPFILTER", "port", name)
	}
}

// abandon closes what a failed open made. No worker ever ran, so nothing
// holds buffers and the ports need no cache to close.
func (sw *Switch) abandon() error {
	var errs []error
	if sw.engine != nil {
		errs = append(errs, sw.engine.Close()) // closes every port
	} else {
		for _, lp := range sw.ports {
			errs = append(errs, lp.port.CloseInto(nil))
		}
		if sw.table != nil {
			errs = append(errs, sw.table.CloseInto(nil))
		}
	}
	if sw.pool != nil {
		errs = append(errs, sw.pool.Close())
	}
	return errors.Join(errs...)
}

// openServices binds an endpoint for every configured service.
func (sw *Switch) openServices() error {
	var err error
	sw.table, err = endpoint.NewTable(endpoint.Config{Name: "services", Pool: sw.pool, Workers: sw.cfg.Workers})
	if err != nil {
		return err
	}
	for _, spec := range sw.cfg.Services {
		ep, err := sw.table.Bind(endpoint.UDP(spec.Addr), endpoint.Options{})
		if err != nil {
			return fmt.Errorf("service %s: %w", spec, err)
		}
		sw.svcs = append(sw.svcs, &service{
			spec: spec, ep: ep, log: sw.log,
			views: make([]endpoint.View, 64), msgs: make([]endpoint.Message, 64),
		})
		sw.log.Info("service", "spec", spec.String())
	}
	return nil
}

// newChain builds the switch's programs: the policer with the ports'
// rate limits, port security with the policies, the filter if there are rules, then the learning bridge for
// TAP ports (each port's share of the table bounded) or the L3 forwarder
// with the routes for TUN ports (unknown destinations dropped with
// NO_ROUTE, TTL decremented, learning only what the policies allow); a
// live switch gets both, since its first port decides.
func (p *Plan) newChain(log *slog.Logger) (chain, error) {
	var c chain
	var err error
	c.police = program.NewPolicer()
	for i, spec := range p.Ports {
		if err := c.police.SetLimits(i, spec.Ingress, spec.Egress); err != nil {
			return c, err
		}
	}
	if c.sec, err = program.NewPortSecurity(p.Policies); err != nil {
		return c, err
	}
	if len(p.Filters) > 0 {
		if c.filter, err = program.NewFilter(p.Filters, true); err != nil {
			return c, err
		}
	}
	if p.TAP || p.Live {
		c.bridge = program.NewBridge(program.BridgeConfig{MaxPerPort: bridgeShare(len(p.Ports))})
	}
	if !p.TAP {
		c.fwd, err = program.NewL3Forwarder(program.L3Config{Routes: p.Routes, Unknown: program.DropUnknown, DecrementTTL: true, Policy: c.sec, Log: log})
	}
	return c, err
}

// bridgeShare is each port's share of the bridge's table with ports
// ports.
func bridgeShare(ports int) int { return program.DefaultMaxEntries / max(ports, 1) }

// programs returns the chain after port security, in order.
func (c *chain) programs() []program.Program {
	var progs []program.Program
	if c.filter != nil {
		progs = append(progs, c.filter)
	}
	if c.bridge != nil {
		progs = append(progs, c.bridge)
	}
	if c.fwd != nil {
		progs = append(progs, c.fwd)
	}
	return progs
}

func programNames(progs []program.Program) []string {
	var names []string
	for _, p := range progs {
		names = append(names, p.Name())
	}
	return names
}

// Engine returns the switch's engine, for live statistics.
func (sw *Switch) Engine() *engine.Engine { return sw.engine }

// Pool returns the switch's buffer pool.
func (sw *Switch) Pool() *buffer.Pool { return sw.pool }

// Start starts the workers and the services.
func (sw *Switch) Start() error {
	if err := sw.engine.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	sw.stopServices = cancel
	for _, s := range sw.svcs {
		sw.svcWG.Add(1)
		go s.run(ctx, &sw.svcWG)
	}
	sw.svcWG.Go(func() { sw.age(ctx) })
	return nil
}

// ageEvery is how often the learned tables are purged of hosts that went
// quiet. Lookups ignore those at once; purging gives back their memory
// and their share of the table.
const ageEvery = 5 * time.Second

func (sw *Switch) age(ctx context.Context) {
	tick := time.NewTicker(ageEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			for _, a := range sw.chain.agers() {
				a.Age(sw.engine.Now())
			}
		}
	}
}

// Policy returns the port security of the named port, with its
// defaults worked out.
func (sw *Switch) Policy(name string) (program.PortPolicy, bool) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	i := sw.cfg.portIndex(name)
	if i < 0 {
		return program.PortPolicy{}, false
	}
	return sw.chain.sec.Policy(sw.ports[i].index)
}

// Learning returns the forwarder's learning counters, or nil for TAP
// ports.
func (sw *Switch) Learning() *program.LearnStats {
	if sw.chain.fwd == nil {
		return nil
	}
	s := sw.chain.fwd.LearnStats()
	return &s
}

// BridgeStats returns the bridge's counters, or nil for TUN ports.
func (sw *Switch) BridgeStats() *program.BridgeStats {
	if sw.chain.bridge == nil {
		return nil
	}
	s := sw.chain.bridge.Stats()
	return &s
}

// Run starts the switch, forwards until ctx is done and closes it.
func (sw *Switch) Run(ctx context.Context) (*Report, error) {
	if err := sw.Start(); err != nil {
		return nil, errors.Join(err, sw.abandon())
	}
	<-ctx.Done()
	return sw.Close()
}

// Close stops the services and the workers (within stopTimeout), closes
// every port — which removes the devices Open created — and returns the
// final report. The report's Leaked is non-zero if buffers did not come
// home. Close is called once, after Start.
func (sw *Switch) Close() (*Report, error) {
	if sw.stopServices != nil {
		sw.stopServices()
	}
	sw.svcWG.Wait()
	for _, s := range sw.svcs {
		s.ep.Close() // the workers take its buffers back before they stop
	}
	stopped := make(chan struct{})
	go func() { sw.engine.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopTimeout):
		return nil, fmt.Errorf("workers did not stop within %v", stopTimeout)
	}
	rep := sw.Stats()
	err := sw.engine.Close() // closes every port
	for i, s := range sw.svcs {
		rep.Services[i] = s.stats() // with what closing took back
	}
	rep.setLeak(sw.pool.Close())
	return rep, err
}

// Stats returns the switch's counters now: the report Close returns at
// the end, without the leak check. It may be called at any time between
// Open and Close, from any goroutine.
func (sw *Switch) Stats() *Report {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	rep := newReport(sw.engine.Stats())
	rep.Learning, rep.Bridge = sw.Learning(), sw.BridgeStats()
	for _, lp := range sw.ports {
		rep.Devices = append(rep.Devices, DeviceStats{Port: lp.open.Port().Info().Name, Stats: lp.open.Stats()})
	}
	for _, s := range sw.svcs {
		rep.Services = append(rep.Services, s.stats())
	}
	return rep
}

// Config returns the configuration the switch runs now.
func (sw *Switch) Config() Config {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.cfg.clone()
}

// ParseCPUs parses a list of CPUs, "0", "2,3" or "2-5,7", in the order
// given; "" is none.
func ParseCPUs(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil || first < 0 {
			return nil, fmt.Errorf("%q: not a CPU number", part)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil || last < first {
				return nil, fmt.Errorf("%q: not a range of CPUs", part)
			}
		}
		if last >= MaxCPU {
			return nil, fmt.Errorf("%q: CPU numbers stop at %d", part, MaxCPU-1)
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// MaxCPU bounds the CPU numbers of Tuning.CPUs, as a CPU set does.
const MaxCPU = 1024
