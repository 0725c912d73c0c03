package vswitch

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"softnet.dev/engine"
	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/port"
	"softnet.dev/program"
)

// Errors of the changes a running switch refuses, for callers that map
// them (the control API to HTTP statuses). Each comes wrapped in a
// message that says what was refused.
var (
	ErrInvalid  = errors.New("invalid")        // the change would make an invalid configuration
	ErrNotFound = errors.New("not found")      // no such port or route
	ErrExists   = errors.New("already exists") // a port of that name, a route to that prefix
	ErrRestart  = errors.New("needs a restart")
	// ErrDevice is a well-formed port whose device cannot be opened: no
	// such namespace, a device of another kind, busy, no permission.
	ErrDevice = errors.New("device cannot be opened")
)

// BySignal is the by of a change a signal asked for (SIGHUP: the
// configuration file read again).
func BySignal(sig string) slog.Attr { return slog.Group("by", "signal", sig) }

// AddPort opens the device of spec and adds it to the running switch,
// with the port security its options (or the routes to it) give it
// before its first packet. Traffic between the other ports goes on.
//
// by says who asked, in the line that logs the change: the control
// API's caller, BySignal, or the zero Attr for no one in particular. The
// other changes take it too.
func (sw *Switch) AddPort(spec PortSpec, by slog.Attr) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	// A port of the name just removed may still be closing its device,
	// which the new one may be again: wait for that, letting other
	// changes go on meanwhile.
	for {
		closed := sw.closed(spec.Name)
		if closed == nil {
			break
		}
		sw.mu.Unlock()
		<-closed
		sw.mu.Lock()
	}
	next, err := sw.withPort(spec)
	if err != nil {
		return err
	}
	lp, err := sw.openPort(spec)
	if err != nil {
		return err
	}
	next.Ports[len(next.Ports)-1] = lp.spec // Kept as it is now
	if err := sw.persist(next); err != nil {
		return errors.Join(err, lp.port.CloseInto(nil))
	}
	if err := sw.addPort(next, lp, spec.policy(next.Routes), by); err != nil {
		sw.unpersist()
		return err
	}
	return nil
}

// ErrState is a change refused because the state file could not record
// it (SetSave): the switch is as it was.
var ErrState = errors.New("state not saved")

// SetSave makes the switch call save with the configuration it is about
// to run before each change it makes (AddPort, RemovePort, AddRoute,
// RemoveRoute) and after each Apply that changed something: a change
// that save refuses is not made, so that what a caller is told was done
// is saved. If the change fails once saved, save is called again with
// the configuration the switch is left with. save runs under the lock
// that serializes changes.
func (sw *Switch) SetSave(save func(Config) error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.save = save
}

// persist saves next, the configuration a change is about to make.
func (sw *Switch) persist(next Config) error {
	if sw.save == nil {
		return nil
	}
	if err := sw.save(next); err != nil {
		return fmt.Errorf("%w, so not made: %w", ErrState, err)
	}
	return nil
}

// unpersist saves the configuration the switch runs, after a change
// saved by persist failed: the state file must not keep a change that
// was refused (a crash before this leaves it there, as if the change
// had been the last made before the crash).
func (sw *Switch) unpersist() {
	if err := sw.persist(sw.cfg); err != nil {
		sw.log.Error("a change failed once saved, and the state before it could not be saved again: a restart makes it", "err", err)
	}
}

// withPort returns the configuration with spec added, if valid.
func (sw *Switch) withPort(spec PortSpec) (Config, error) {
	if sw.cfg.portIndex(spec.Name) >= 0 {
		return Config{}, fmt.Errorf("port %s: %w: a port named %s", spec, ErrExists, spec.Name)
	}
	next := sw.cfg.clone()
	next.Ports = append(next.Ports, spec)
	if err := next.Validate(); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := sw.takes(spec); err != nil {
		return Config{}, err
	}
	return next, nil
}

// takes says whether the running switch can take a port of spec's kind:
// its programs are those of the ports it started with.
func (sw *Switch) takes(spec PortSpec) error {
	if routed := spec.Routed(); !routed && sw.chain.bridge == nil || routed && sw.chain.fwd == nil {
		return fmt.Errorf("port %s: %w: this switch started with ports of the other kind; one that starts with none takes either", spec, ErrRestart)
	}
	return nil
}

// addPort adds lp, whose device is open, with its policy pol, making
// next the configuration. pol's default sources are the prefixes routes
// route to it: next's, or (Apply) those of the configuration being
// applied, whose routes follow.
func (sw *Switch) addPort(next Config, lp *livePort, pol program.PortPolicy, by slog.Attr) error {
	spec := lp.spec
	// The policy first, at the index the port gets: its first packet is
	// checked.
	at := -1
	index, err := sw.engine.AddPort(lp.port, func(index int) error {
		at = index
		if sw.stale[index] {
			sw.forgetIndex(index)
			delete(sw.stale, index)
		}
		if err := sw.chain.police.SetLimits(index, spec.Ingress, spec.Egress); err != nil {
			return err
		}
		return sw.chain.sec.SetPolicy(index, pol)
	})
	if err != nil {
		err = fmt.Errorf("port %s: %w", spec, err)
		if errors.Is(err, engine.ErrNotAdopted) {
			// The engine closes the device once no worker can use it;
			// until then the policy keeps checking what it sends.
			if at >= 0 {
				sw.markStale(at)
			}
			return err
		}
		return errors.Join(err, lp.port.CloseInto(nil))
	}
	lp.index = index
	sw.cfg, sw.ports = next, append(sw.ports, lp)
	sw.warnNoSources(spec.Name, pol)
	sw.resizeShares()
	sw.log.Info("port added", "port", spec.Name, "index", lp.index, by)
	return nil
}

// ChangePort changes the named port's options while it runs: each of
// opts replaces the port's options of its key, or, with no value,
// removes them (the default again). Only what changes in place, as a
// reload would change it (its rate limits; the kind's own options that
// its kind takes live), is taken; anything else is ErrRestart: remove
// the port and add it again. The change keeps the port's origin: a
// reload sets a port the configuration made back to the file's options.
// It returns the port's spec now.
func (sw *Switch) ChangePort(name string, opts []portkind.Field, by slog.Attr) (PortSpec, error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	i := sw.cfg.portIndex(name)
	if i < 0 {
		return PortSpec{}, fmt.Errorf("port %s: %w", name, ErrNotFound)
	}
	lp := sw.ports[i]
	spec, err := sw.changedSpec(lp, opts)
	if err != nil {
		return PortSpec{}, err
	}
	if lp.reloadTo(spec) == kept {
		return spec, nil
	}
	next := sw.cfg.clone()
	next.Ports[i] = spec
	if err := next.Validate(); err != nil {
		return PortSpec{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := sw.persist(next); err != nil {
		return PortSpec{}, err
	}
	if err := sw.change(lp, spec, by); err != nil {
		sw.unpersist()
		return PortSpec{}, err
	}
	return spec, nil
}

// RemovePort removes the named port while the switch runs: its routes go
// with it (as the kernel's go with a deleted device), the workers give
// up its queues, what it held comes home and its device is closed
// (removed, if the switch created it). What was learned on it is
// forgotten. The device closes outside the lock that serializes
// changes: the kernel takes its time to unregister a device, and other
// changes, removals among them, go on meanwhile.
func (sw *Switch) RemovePort(name string, by slog.Attr) error {
	sw.mu.Lock()
	var closeDevice func() error
	err := sw.persistWithout(name)
	if err == nil {
		if closeDevice, err = sw.removePort(name, by); err != nil {
			sw.unpersist()
		}
	}
	sw.mu.Unlock()
	if err != nil {
		return err
	}
	return closeDevice()
}

// persistWithout saves the configuration without the named port and
// its routes, before removing it.
func (sw *Switch) persistWithout(name string) error {
	i := sw.cfg.portIndex(name)
	if i < 0 {
		return fmt.Errorf("port %s: %w", name, ErrNotFound)
	}
	next := sw.cfg.clone()
	next.Ports = slices.Delete(next.Ports, i, i+1)
	next.Routes = slices.DeleteFunc(next.Routes, func(rt RouteSpec) bool { return rt.Port == name })
	return sw.persist(next)
}

// removePort takes the named port out of the switch and returns the
// function that closes its device and logs the removal, to be called
// once, best without sw.mu: until it returns, the port's index is no
// other port's and its name waits (closed).
func (sw *Switch) removePort(name string, by slog.Attr) (closeDevice func() error, err error) {
	i := sw.cfg.portIndex(name)
	if i < 0 {
		return nil, fmt.Errorf("port %s: %w", name, ErrNotFound)
	}
	for _, rt := range slices.Clone(sw.cfg.Routes) {
		if rt.Port == name {
			if err := sw.removeRoute(rt.Prefix, by); err != nil {
				return nil, err
			}
		}
	}
	lp := sw.ports[i]
	closePort, err := sw.engine.DetachPort(lp.index)
	switch {
	case errors.Is(err, engine.ErrNotAdopted):
		// Removed all the same; a late worker may still read the port,
		// so its policy stays (the next port at the index replaces it).
		sw.log.Warn("port removed; its device is closed once every worker has let it go", "port", name, "err", err)
		sw.markStale(lp.index)
	case err != nil:
		return nil, fmt.Errorf("port %s: %w", name, err)
	default:
		sw.chain.sec.RemovePolicy(lp.index)
		// Zero limits are valid: no error.
		_ = sw.chain.police.SetLimits(lp.index, program.Limit{}, program.Limit{})
	}
	sw.forgetIndex(lp.index)
	sw.cfg.Ports = slices.Delete(sw.cfg.Ports, i, i+1)
	sw.ports = slices.Delete(sw.ports, i, i+1)
	sw.resizeShares()
	closed := make(chan struct{})
	sw.closingMu.Lock()
	if sw.closing == nil {
		sw.closing = map[string]chan struct{}{}
	}
	sw.closing[name] = closed
	sw.closingMu.Unlock()
	return func() error {
		err := closePort()
		sw.closingMu.Lock()
		delete(sw.closing, name)
		sw.closingMu.Unlock()
		close(closed)
		if err != nil {
			sw.log.Error("port removed; its device did not close cleanly", "port", name, "err", err, by)
			return fmt.Errorf("port %s: %w", name, err)
		}
		sw.log.Info("port removed", "port", name, by)
		return nil
	}, nil
}

// closed returns the channel that closes once the device of the port
// of that name, removed, is closed; nil if none is closing.
func (sw *Switch) closed(name string) <-chan struct{} {
	sw.closingMu.Lock()
	defer sw.closingMu.Unlock()
	return sw.closing[name]
}

func (sw *Switch) markStale(index int) {
	if sw.stale == nil {
		sw.stale = map[int]bool{}
	}
	sw.stale[index] = true
}

// forgetIndex forgets what the forwarder and the bridge learned on the
// port at index (each table is copied: not for every port added).
func (sw *Switch) forgetIndex(index int) {
	if sw.chain.fwd != nil {
		sw.chain.fwd.ForgetPort(index)
	}
	if sw.chain.bridge != nil {
		sw.chain.bridge.ForgetPort(index)
	}
}

// AddRoute routes rt.Prefix to the TUN port rt.Port. A port whose
// sources are its routes (no allow=) may then send from the prefix too.
func (sw *Switch) AddRoute(rt RouteSpec, by slog.Attr) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.addRoute(rt, by)
}

func (sw *Switch) addRoute(rt RouteSpec, by slog.Attr) error {
	if sw.cfg.portIndex(rt.Port) < 0 {
		return fmt.Errorf("route %s: %w: no port %s", rt, ErrNotFound, rt.Port)
	}
	if sw.routeIndex(rt.Prefix) >= 0 {
		return fmt.Errorf("route %s: %w: a route to %s", rt, ErrExists, rt.Prefix)
	}
	next := sw.cfg.clone()
	next.Routes = append(next.Routes, rt)
	if err := next.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	lp := sw.ports[sw.cfg.portIndex(rt.Port)]
	if err := sw.persist(next); err != nil {
		return err
	}
	if err := sw.route(lp, rt, next, lp.spec.policy(next.Routes), by); err != nil {
		sw.unpersist()
		return err
	}
	return nil
}

// route routes rt to lp, whose policy becomes pol, making next, which
// has the route, the configuration.
func (sw *Switch) route(lp *livePort, rt RouteSpec, next Config, pol program.PortPolicy, by slog.Attr) error {
	// The policy before the route: the guest's replies from the prefix
	// must not be dropped as spoofed.
	if err := sw.setPolicy(lp, pol); err != nil {
		return err
	}
	undo := func() error { return sw.setPolicy(lp, lp.spec.policy(sw.cfg.Routes)) }
	// A port that routes what is sent to it learns the route first:
	// what is routed to the port must find its next hop.
	if err := lp.setRoutes(next.Routes); err != nil {
		return errors.Join(err, undo())
	}
	if err := sw.chain.fwd.AddRoute(program.Route{Prefix: rt.Prefix, Port: lp.index}); err != nil {
		return errors.Join(fmt.Errorf("route %s: %w", rt, err), undo(), lp.setRoutes(sw.cfg.Routes))
	}
	sw.cfg = next
	sw.log.Info("route added", "route", rt.String(), by)
	return nil
}

// RemoveRoute removes the route to prefix.
func (sw *Switch) RemoveRoute(prefix netip.Prefix, by slog.Attr) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	i := sw.routeIndex(prefix)
	if i < 0 {
		return fmt.Errorf("route %s: %w", prefix, ErrNotFound)
	}
	next := sw.cfg.clone()
	next.Routes = slices.Delete(next.Routes, i, i+1)
	if err := sw.persist(next); err != nil {
		return err
	}
	if err := sw.removeRoute(prefix, by); err != nil {
		sw.unpersist()
		return err
	}
	return nil
}

func (sw *Switch) removeRoute(prefix netip.Prefix, by slog.Attr) error {
	i := sw.routeIndex(prefix)
	if i < 0 {
		return fmt.Errorf("route %s: %w", prefix, ErrNotFound)
	}
	rt := sw.cfg.Routes[i]
	if err := sw.chain.fwd.RemoveRoute(rt.Prefix); err != nil {
		return fmt.Errorf("route %s: %w", rt, err)
	}
	sw.cfg.Routes = slices.Delete(sw.cfg.Routes, i, i+1)
	lp := sw.ports[sw.cfg.portIndex(rt.Port)]
	if err := sw.setPolicy(lp, lp.spec.policy(sw.cfg.Routes)); err != nil {
		return err
	}
	if err := lp.setRoutes(sw.cfg.Routes); err != nil {
		return err
	}
	sw.log.Info("route removed", "route", rt.String(), by)
	return nil
}

func (sw *Switch) routeIndex(prefix netip.Prefix) int {
	return slices.IndexFunc(sw.cfg.Routes, func(r RouteSpec) bool { return r.Prefix == prefix })
}

// setPolicy gives lp the policy pol.
func (sw *Switch) setPolicy(lp *livePort, pol program.PortPolicy) error {
	if err := sw.chain.sec.SetPolicy(lp.index, pol); err != nil {
		return fmt.Errorf("port %s: %w", lp.spec.Name, err)
	}
	return nil
}

// resizeShares gives each port its share of the bridge's table.
func (sw *Switch) resizeShares() {
	if sw.chain.bridge != nil {
		sw.chain.bridge.SetMaxPerPort(bridgeShare(len(sw.ports)))
	}
}

// PortView is one port as the switch runs it.
type PortView struct {
	Spec PortSpec
	// Port is the port itself, as its kind opened it: a value of its
	// port package's type (a *tun.Device for a tun port).
	Port   port.Port
	Index  int                // the engine's, as in engine.PortStats
	Policy program.PortPolicy // port security in force, defaults worked out
	// State is the port's state as its kind says it (portkind.Stater):
	// a vhost-user port's front-end; empty for a kind that says none.
	State portkind.State
}

// Ports returns the switch's ports now, in configuration order.
func (sw *Switch) Ports() []PortView {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	out := make([]PortView, len(sw.ports))
	for i, lp := range sw.ports {
		pol, _ := sw.chain.sec.Policy(lp.index)
		out[i] = PortView{Spec: lp.spec, Port: lp.open.Port(), Index: lp.index, Policy: pol}
		if st, ok := lp.open.(portkind.Stater); ok {
			out[i].State = st.State()
		}
	}
	return out
}

// Station is one entry of the switch's forwarding tables, as `bridge
// fdb show` lists the kernel's: a station the bridge learned on a port,
// or one of a port's own table (a vxlan port's, with the remote it is
// behind).
type Station struct {
	MAC    [6]byte
	Port   string
	Dst    string        // a port's own entry's destination (portkind.Station)
	Static bool          // configured, not learned
	Age    time.Duration // since last seen, to within a second; 0 if static
}

// FDB returns the stations the switch knows: those the bridge learned
// (none on a switch of routed ports), by MAC, then each port's own
// (portkind.Stationer), by port and MAC. It reads the tables the workers
// read, lock-free snapshots that no reader can hold up, and takes no
// lock a worker takes (only the switch's own, which orders it with port
// changes, so that an index names the port it was learned on): a
// station learned, moved or aged while it reads may be shown as it was.
func (sw *Switch) FDB() []Station {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	var learned []program.BridgeEntry
	if sw.chain.bridge != nil {
		learned = sw.chain.bridge.Table()
	}
	names := map[int]string{}
	for _, lp := range sw.ports {
		names[lp.index] = lp.spec.Name
	}
	var out []Station
	for _, e := range learned {
		if name, ok := names[e.Port]; ok {
			out = append(out, Station{MAC: e.MAC, Port: name, Age: e.Age})
		}
	}
	for _, lp := range sw.ports {
		if st, ok := lp.open.(portkind.Stationer); ok {
			for _, e := range st.Stations() {
				out = append(out, Station{MAC: e.MAC, Port: lp.spec.Name, Dst: e.Dst, Static: e.Static, Age: e.Age})
			}
		}
	}
	return out
}
