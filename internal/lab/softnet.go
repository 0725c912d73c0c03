package lab

import (
	"fmt"
	"log/slog"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/knob"
	"softnet.dev/internal/txthread"
	"softnet.dev/internal/vswitch"
	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/internal/vswitch/portkind/tunkind"
	"softnet.dev/tun"
)

// softnetPath is a softnet switch built in this process from the same
// plan as `softnet switch`, changed as the ladder's step says: one
// worker, a TUN or TAP port in each guest, a route to each guest's
// subnets.
type softnetPath struct {
	sw *vswitch.Switch
}

// switchConfig is the configuration of `softnet switch` that joins the
// pair: a port in each guest, routed (TUN) or bridged (TAP).
func switchConfig(p *guestPair, c softnetConfig, tap bool) vswitch.Config {
	cfg := vswitch.Config{Workers: max(c.Workers, 1)}
	for _, g := range p.guests() {
		spec := guestPort(tap, g)
		spec.Offload, spec.GRO, spec.IO = c.Offload, c.GRO, c.IO
		cfg.Ports = append(cfg.Ports, spec)
		if !tap {
			cfg.Routes = append(cfg.Routes, vswitch.RouteSpec{Prefix: g.v4.Masked(), Port: g.dev}, vswitch.RouteSpec{Prefix: g.v6.Masked(), Port: g.dev})
		}
	}
	return cfg
}

// plan is the switch c runs for cfg: `softnet switch`'s plan, with the
// mechanisms c turns off.
func (c softnetConfig) plan(cfg vswitch.Config) (vswitch.Plan, error) {
	p, err := vswitch.NewPlan(cfg, vswitch.Tuning{BusyPoll: c.BusyPoll})
	if err != nil {
		return p, err
	}
	if c.Uncached {
		p.Pool.Knobs = knob.PoolUncached()
	}
	if c.SingleGets {
		for i := range p.Ports {
			if o, ok := p.Ports[i].Options.(*tunkind.Options); ok {
				single := *o
				single.Knobs = knob.TUNSingleGets()
				p.Ports[i].Options = &single
			}
		}
	}
	if c.Batch != 0 {
		p.Engine.Batch = c.Batch
	}
	return p, nil
}

// wrap is what stands between c's devices and the engine, if anything.
func (c softnetConfig) wrap() vswitch.Wrap {
	if c.DeferTX {
		return txthread.Wrap
	}
	return nil
}

// openPairSwitch opens the switch that joins the pair and starts it.
func openPairSwitch(p *guestPair, c softnetConfig, tap bool, log *slog.Logger) (*softnetPath, error) {
	cfg := switchConfig(p, c, tap)
	plan, err := c.plan(cfg)
	if err != nil {
		return nil, err
	}
	return startSoftnet(vswitch.OpenVariant(cfg, plan, c.wrap(), log))
}

// openSoftnet opens a switch as `softnet switch` does and starts it. On
// error everything made so far is closed again.
func openSoftnet(cfg vswitch.Config, t vswitch.Tuning, log *slog.Logger) (*softnetPath, error) {
	return startSoftnet(vswitch.Open(cfg, t, log))
}

// startSoftnet starts the switch Open or OpenVariant returned.
func startSoftnet(sw *vswitch.Switch, err error) (*softnetPath, error) {
	if err != nil {
		return nil, err
	}
	if err := sw.Start(); err != nil {
		_, cerr := sw.Close()
		return nil, fmt.Errorf("softnet: start: %w (close: %v)", err, cerr)
	}
	return &softnetPath{sw: sw}, nil
}

func (s *softnetPath) counters() (forwarded, bool) {
	var c forwarded
	for _, p := range s.sw.Engine().Stats().Ports {
		c.packets += p.TxPackets
		c.bytes += p.TxBytes
		c.rxPackets += p.RxPackets
		c.rxBytes += p.RxBytes
	}
	return c, true
}

func (s *softnetPath) buffers() (buffer.Stats, bool) { return s.sw.Pool().Stats(), true }

// deviceNoMem counts the receive bursts the devices cut short because
// the pool had no buffer. Those packets are not lost to softnet: they stay
// queued in the kernel, which drops them only if its queue overflows
// meanwhile (counted on the sending guest's device).
func (s *softnetPath) deviceNoMem() uint64 {
	var n uint64
	for _, d := range s.devices() {
		n += d.Stats().RxDrops[drop.NoMem]
	}
	return n
}

// devices returns the switch's ports that are TUN or TAP devices.
func (s *softnetPath) devices() []*tun.Device {
	var out []*tun.Device
	for _, pv := range s.sw.Ports() {
		if d, ok := pv.Port.(*tun.Device); ok {
			out = append(out, d)
		}
	}
	return out
}

// guestPort is guest g's device as a port of the switch, tap (bridged)
// or tun (routed), with the defaults of `softnet switch --port`.
func guestPort(tap bool, g *guest) vswitch.PortSpec {
	k := tunkind.TUN
	if tap {
		k = tunkind.TAP
	}
	return vswitch.PortSpec{Kind: k.Name, Name: g.dev, Common: portkind.Common{NetNS: g.ns, Offload: true, GRO: true}, Options: k.New()}
}

// workerThreads returns the workers' OS threads (the switch locks each
// worker to one), whose CPU time /proc/self/task gives.
func (s *softnetPath) workerThreads() []int {
	var tids []int
	for _, w := range s.sw.Engine().Stats().Workers {
		if w.Thread != 0 {
			tids = append(tids, w.Thread)
		}
	}
	return tids
}

func (s *softnetPath) poolBytes() int64 {
	var n int64
	pool := s.sw.Pool()
	headroom := pool.Config().Headroom
	for _, c := range pool.Stats().Classes {
		frame := (headroom + c.Room + 63) &^ 63 // frames start on cache lines
		n += int64(frame) * int64(c.Count)
	}
	return n
}

// close stops the workers, closes the ports (removing the devices) and
// closes the pool, whose leak check must balance.
func (s *softnetPath) close() (string, error) {
	rep, err := s.sw.Close()
	leak := "not checked"
	if rep != nil {
		leak = rep.Leak
	}
	if err != nil {
		return leak, fmt.Errorf("softnet: %w", err)
	}
	return leak, nil
}
