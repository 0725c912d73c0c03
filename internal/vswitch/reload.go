package vswitch

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"softnet.dev/program"
)

// Apply changes the running switch into cfg (a configuration file read
// again, on SIGHUP): ports and routes that are gone are removed, new
// ones added. A port whose spec changed is changed in place if only its
// kind's own options changed and its kind takes that change live
// (portkind.Options.Live), else removed and added again.
// It returns what it changed, one line each. The whole change is
// checked before anything is touched: an invalid cfg, one that differs
// in what cannot change live (workers, services, filters, the kind of
// ports the switch forwards) or gives a port a policy that does not
// compile, changes nothing. New ports (and changed ones that move to
// another namespace) are opened before anything is removed, so a port
// that cannot be opened changes nothing either, and those opened are
// closed again. Only an error after that (a changed port that cannot be
// opened again once closed, a worker that does not take up a change)
// leaves the switch part-way, with the returned lines saying how far it
// got. by says who asked, as for AddPort.
func (sw *Switch) Apply(cfg Config, by slog.Attr) ([]string, error) {
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	// Devices that RemovePort is closing may be opened again: their
	// closes take no lock of ours, so waiting for them here is safe.
	for _, p := range cfg.Ports {
		if closed := sw.closed(p.Name); closed != nil {
			<-closed
		}
	}
	r, err := sw.newReload(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w; nothing was changed", err)
	}
	defer r.closeUnused()
	err = r.run(sw, by)
	return r.done, err
}

// reload is the change Apply makes, worked out and checked before
// anything is touched.
type reload struct {
	cfg Config
	// gone are the ports removed: those cfg lacks, and those it changes
	// in a way their kind does not take live, which are added again.
	gone []string
	// changed are the ports changed in place, added those added (again),
	// as cfg has them.
	changed, added []PortSpec
	// policies are the port security of cfg's ports, by name.
	policies map[string]program.PortPolicy
	// opened are new ports opened ahead, by name, until added.
	opened map[string]*livePort
	done   []string // what was changed, one line each
}

// newReload works out and checks the change into cfg, and opens the
// ports it adds where no port it removes is in the way.
func (sw *Switch) newReload(cfg Config) (*reload, error) {
	var fixed []string
	if cfg.Workers != sw.cfg.Workers {
		fixed = append(fixed, fmt.Sprintf("workers %d → %d", sw.cfg.Workers, cfg.Workers))
	}
	if !slices.EqualFunc(cfg.Services, sw.cfg.Services, func(a, b ServiceSpec) bool { return a.String() == b.String() }) {
		fixed = append(fixed, "services")
	}
	if !slices.EqualFunc(cfg.Filters, sw.cfg.Filters, func(a, b program.Rule) bool { return a.String() == b.String() }) {
		fixed = append(fixed, "filters")
	}
	if len(fixed) > 0 {
		return nil, fmt.Errorf("%s changed: %w", strings.Join(fixed, ", "), ErrRestart)
	}
	r := &reload{cfg: cfg, policies: map[string]program.PortPolicy{}, opened: map[string]*livePort{}}
	reopen := map[string]bool{} // by name: in the same namespace
	for i, old := range sw.cfg.Ports {
		j := cfg.portIndex(old.Name)
		if j < 0 {
			r.gone = append(r.gone, old.Name)
			continue
		}
		switch sw.ports[i].reloadTo(cfg.Ports[j]) {
		case inPlace:
			r.changed = append(r.changed, cfg.Ports[j])
		case reopened:
			r.gone = append(r.gone, old.Name)
			reopen[old.Name] = old.NetNS == cfg.Ports[j].NetNS
		}
	}
	// What adding the ports would refuse: a kind the running switch
	// cannot take (its programs are those of the ports it started
	// with), a policy that does not compile.
	byIndex := map[int]program.PortPolicy{}
	for i, p := range cfg.Ports {
		if err := sw.takes(p); err != nil {
			return nil, err
		}
		r.policies[p.Name] = p.policy(cfg.Routes)
		byIndex[i] = r.policies[p.Name]
	}
	if _, err := program.NewPortSecurity(byIndex); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for _, p := range cfg.Ports {
		sameNetNS, reopened := reopen[p.Name]
		if !reopened && sw.cfg.portIndex(p.Name) >= 0 {
			continue // it stays, or changes in place
		}
		r.added = append(r.added, p)
		if sameNetNS {
			// It would take what the port open now has (its device, its
			// socket): it opens once that one is closed.
			continue
		}
		lp, err := sw.openPort(p)
		if err != nil {
			r.closeUnused()
			return nil, err
		}
		r.opened[p.Name] = lp
	}
	return r, nil
}

// What a reload does to a running port.
const (
	kept = iota
	inPlace
	reopened
)

// reloadTo says what a reload to spec does to the running port: nothing
// for its own spec, a change in place for one that differs only in its
// kind's options and that its kind changes live, else a reopen.
func (lp *livePort) reloadTo(spec PortSpec) int {
	s := spec.String()
	if s == lp.spec.String() {
		return kept
	}
	same := lp.spec
	same.Options = spec.Options
	if same.String() == s && lp.spec.Options.Live(spec.Options) {
		return inPlace
	}
	return reopened
}

// run makes the change, in the order that keeps guests honest: routes
// go before their ports and come after them, and a port's policy is in
// force before its first packet or route.
func (r *reload) run(sw *Switch, by slog.Attr) error {
	for _, rt := range slices.Clone(sw.cfg.Routes) {
		if !slices.ContainsFunc(r.cfg.Routes, rt.same) || slices.Contains(r.gone, rt.Port) {
			if err := r.step("route removed: "+rt.String(), sw.removeRoute(rt.Prefix, by)); err != nil {
				return err
			}
		}
	}
	// A port added again may take what the removed one had: each
	// closes before the next step.
	for _, name := range r.gone {
		closePort, err := sw.removePort(name, by)
		if err == nil {
			err = closePort()
		}
		if err := r.step("port removed: "+name, err); err != nil {
			return err
		}
	}
	for _, p := range r.changed {
		if err := r.step("port changed: "+p.String(), sw.changePort(p, by)); err != nil {
			return err
		}
	}
	// What cfg has is valid: so is every step on the way to it.
	for _, p := range r.added {
		lp := r.opened[p.Name]
		var err error
		if lp == nil { // a changed port, removed above
			lp, err = sw.openPort(p)
		}
		if err == nil {
			delete(r.opened, p.Name)
			next := sw.cfg.clone()
			next.Ports = append(next.Ports, p)
			err = sw.addPort(next, lp, r.policies[p.Name], by)
		}
		if err := r.step("port added: "+p.String(), err); err != nil {
			return err
		}
	}
	for _, rt := range r.cfg.Routes {
		if !slices.ContainsFunc(sw.cfg.Routes, rt.same) {
			next := sw.cfg.clone()
			next.Routes = append(next.Routes, rt)
			lp := sw.ports[sw.cfg.portIndex(rt.Port)]
			if err := r.step("route added: "+rt.String(), sw.route(lp, rt, next, r.policies[rt.Port], by)); err != nil {
				return err
			}
		}
	}
	return nil
}

// step notes line as done, or returns err with what was done before.
func (r *reload) step(line string, err error) error {
	if err != nil {
		so := "nothing"
		if len(r.done) > 0 {
			so = strings.Join(r.done, "; ")
		}
		return fmt.Errorf("%w; changed before the error: %s", err, so)
	}
	r.done = append(r.done, line)
	return nil
}

// closeUnused closes the ports opened ahead that an error left unadded.
func (r *reload) closeUnused() {
	for name, lp := range r.opened {
		_ = lp.port.CloseInto(nil)
		delete(r.opened, name)
	}
}

// changePort changes the running port of spec's name into spec, which
// its kind takes live.
func (sw *Switch) changePort(spec PortSpec, by slog.Attr) error {
	i := sw.cfg.portIndex(spec.Name)
	if err := sw.ports[i].open.Change(spec.Options); err != nil {
		return fmt.Errorf("port %s: %w", spec, err)
	}
	sw.ports[i].spec, sw.cfg.Ports[i] = spec, spec
	sw.log.Info("port changed", "port", spec.Name, "spec", spec.String(), by)
	return nil
}

// same reports whether two routes are one: prefix, port and next hop
// (not where a file wrote them).
func (rt RouteSpec) same(o RouteSpec) bool {
	return rt.Prefix == o.Prefix && rt.Port == o.Port && rt.Via == o.Via
}
