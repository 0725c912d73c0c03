package vswitch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/endpoint"
	"softnet.dev/engine"
	"softnet.dev/port"
	"softnet.dev/program"
	"softnet.dev/tun"
)

// stopTimeout bounds how long Run waits for the workers once told to stop.
const stopTimeout = 2 * time.Second

// Switch is an opened switch: its devices exist and its engine is built.
type Switch struct {
	cfg     Config
	log     *slog.Logger
	pool    *buffer.Pool
	devices []*tun.Device
	engine  *engine.Engine
	table   *endpoint.Table // the services' endpoints, nil without services
	svcs    []*service
}

// Open creates or attaches every device, sizes the buffer pool and builds
// the engine. On error everything opened so far is closed again.
func Open(cfg Config, log *slog.Logger) (sw *Switch, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sw = &Switch{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			sw.closeDevices()
		}
	}()
	queues := 0
	for _, spec := range cfg.Ports {
		q := spec.Queues
		if q == 0 {
			q = cfg.Workers
		}
		d, err := tun.Open(tun.Config{Name: spec.Name, TAP: spec.TAP, NetNS: spec.NetNS, Queues: q, Offload: spec.Offload, GRO: spec.GRO})
		if err != nil {
			return nil, err
		}
		sw.devices = append(sw.devices, d)
		queues += q
		how := "attached to existing"
		if d.Created() {
			how = "created"
		}
		log.Info("port", "spec", spec.String(), "device", how, "info", d.Info().String())
	}
	sw.pool, err = buffer.NewPool(buffer.Config{Classes: PoolClasses(queues)})
	if err != nil {
		return nil, err
	}
	ports := make([]port.Port, len(sw.devices))
	for i, d := range sw.devices {
		ports[i] = d
	}
	ecfg := engine.Config{Pool: sw.pool, Workers: cfg.Workers, Log: log}
	if len(cfg.Services) > 0 {
		if err := sw.openServices(); err != nil {
			sw.pool.Close()
			return nil, err
		}
		// The table's program goes first so that datagrams for a service
		// are delivered before the forwarder routes them.
		ports = append(ports, sw.table)
		ecfg.Programs = append(ecfg.Programs, sw.table)
		ecfg.Consumers = []engine.Consumer{sw.table}
		ecfg.Pollers = []engine.Poller{sw.table}
	}
	prog, err := sw.program()
	if err != nil {
		sw.pool.Close()
		return nil, err
	}
	ecfg.Programs = append(ecfg.Programs, prog)
	sw.engine, err = engine.New(ecfg, ports...)
	if err != nil {
		sw.pool.Close()
		return nil, err
	}
	log.Info("switch ready", "workers", cfg.Workers, "program", prog.Name(), "pool", fmt.Sprintf("%d buffers", sw.pool.Stats().Capacity))
	return sw, nil
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

// PoolClasses sizes the buffer pool of a switch whose ports have queues
// queues in all: every RX queue may hold a burst of 64 KiB frames in
// flight, and the MTU class feeds software segmentation and copies.
func PoolClasses(queues int) []buffer.ClassConfig {
	return []buffer.ClassConfig{
		{Room: 2048, Count: 8192 + 256*queues},
		{Room: 65536 + 64, Count: 128 + 2*engine.DefaultBatch*queues},
	}
}

// program picks the bridge for TAP ports and the L3 forwarder, with the
// configured routes, for TUN ports.
func (sw *Switch) program() (program.Program, error) {
	var routes []program.Route
	for _, rt := range sw.cfg.Routes {
		for i, p := range sw.cfg.Ports {
			if p.Name == rt.Port {
				routes = append(routes, program.Route{Prefix: rt.Prefix, Port: i})
			}
		}
	}
	// Each service address is routed to the endpoint port (the last):
	// traffic to it that no endpoint takes (another port, say) is dropped
	// there with NO_ROUTE instead of being flooded or misrouted.
	for _, sv := range sw.cfg.Services {
		bits := 32
		if sv.Addr.Addr().Is6() {
			bits = 128
		}
		routes = append(routes, program.Route{Prefix: netip.PrefixFrom(sv.Addr.Addr(), bits), Port: len(sw.devices)})
	}
	return Program(sw.cfg.Ports[0].TAP, routes)
}

// Program is the switch's program: the learning bridge for TAP ports, the
// L3 forwarder with routes for TUN ports (unknown destinations dropped
// with NO_ROUTE, TTL decremented).
func Program(tap bool, routes []program.Route) (program.Program, error) {
	if tap {
		return program.NewBridge(program.BridgeConfig{}), nil
	}
	return program.NewL3Forwarder(program.L3Config{Routes: routes, Unknown: program.DropUnknown, DecrementTTL: true})
}

// Engine returns the switch's engine, for live statistics.
func (sw *Switch) Engine() *engine.Engine { return sw.engine }

// Run forwards until ctx is done, then stops the workers (within
// stopTimeout), closes every port — which removes the devices Open
// created — and returns the final report. The report's Leaked is non-zero
// if buffers did not come home.
func (sw *Switch) Run(ctx context.Context) (*Report, error) {
	if err := sw.engine.Start(); err != nil {
		return nil, err
	}
	svcCtx, stopServices := context.WithCancel(context.Background())
	var svcWG sync.WaitGroup
	for _, s := range sw.svcs {
		svcWG.Add(1)
		go s.run(svcCtx, &svcWG)
	}
	<-ctx.Done()
	stopServices()
	svcWG.Wait()
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
	rep := newReport(sw.engine.Stats())
	for _, d := range sw.devices {
		rep.Devices = append(rep.Devices, DeviceStats{Port: d.Info().Name, Stats: d.Stats()})
	}
	var errs []error
	if err := sw.engine.Close(); err != nil {
		errs = append(errs, err)
	}
	for _, s := range sw.svcs {
		rep.Services = append(rep.Services, s.stats())
	}
	sw.devices = nil // closed by the engine
	rep.setLeak(sw.pool.Close())
	return rep, errors.Join(errs...)
}

func (sw *Switch) closeDevices() {
	if len(sw.devices) == 0 {
		return
	}
	// No engine or its workers: a throwaway cache takes what the devices
	// still hold.
	pool, err := buffer.NewPool(buffer.Config{Classes: []buffer.ClassConfig{{Room: 2048, Count: 16}}})
	if err != nil {
		return
	}
	c, _ := pool.NewCache(nil)
	for _, d := range sw.devices {
		if err := d.Close(c); err != nil {
			sw.log.Error("close port", "port", d.Info().Name, "err", err)
		}
	}
	pool.Close()
	sw.devices = nil
}
