package vswitch

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"

	"softnet.dev/program"
)

// Apply changes the running switch into cfg (a configuration file read
// again, on SIGHUP): ports and routes that are gone are removed, new
// ones added. A port whose spec changed is changed in place if only its
// rate limits changed, or its kind's own options and its kind takes that
// change live (portkind.Options.Live), else removed and added again.
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
//
// cfg is the configuration's: Apply changes only the ports and routes
// the configuration made, and keeps those the control API made (see
// Merge), logging at warn each item of cfg it does not apply because
// the API made one of that name.
func (sw *Switch) Apply(cfg Config, by slog.Attr) ([]string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	cfg, notes := Merge(sw.cfg, cfg)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: with the ports and routes the control API made: %w; nothing was changed", ErrInvalid, err)
	}
	for _, n := range notes {
		sw.log.Warn("config reload: "+n.Msg, append(n.Attrs, by)...)
	}
	r, err := sw.newReload(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w; nothing was changed", err)
	}
	defer r.closeUnused()
	err = r.run(sw, by)
	if len(r.done) > 0 {
		// After the change, not before: the change is the configuration
		// file's, which a restart reads again, but for the API's routes
		// it removed with their ports.
		if serr := sw.persist(sw.cfg); serr != nil {
			sw.log.Error("config reload: the state file does not have the reload's changes", "err", serr)
		}
	}
	if err != nil {
		so := "nothing"
		if len(r.done) > 0 {
			so = strings.Join(r.done, "; ")
		}
		return r.done, fmt.Errorf("%w; changed before the error: %s", err, so)
	}
	return r.done, nil
}

// Note is something Merge did not do as the configuration said, and
// why: a message and its details, for a log line.
type Note struct {
	Msg   string
	Attrs []any
}

// Merge returns the configuration a switch that runs running is to
// run once file, the configuration's own (its file and flags), is
// applied: file's ports and routes, marked FromConfig, then those of
// running that the control API or the agent made (Origin.Live), unchanged; file's
// workers, services and filters. What the API made is never replaced:
// a port of file named as one the API made is not applied (nor file's
// routes to it), nor a route of file to a prefix the API routed; a
// route the API made to a port that file no longer has goes with its
// port. Each such case is a Note. The result is not validated.
func Merge(running, file Config) (Config, []Note) {
	out := Config{Workers: file.Workers, Services: file.Services, Filters: file.Filters}
	var notes []Note
	api := map[string]PortSpec{}
	for _, p := range running.Ports {
		if p.Origin.Live() {
			api[p.Name] = p
		}
	}
	apiRoutes := map[netip.Prefix]RouteSpec{}
	for _, rt := range running.Routes {
		if rt.Origin.Live() {
			apiRoutes[rt.Prefix] = rt
		}
	}
	const why = "the control API made it, and a reload changes only what the configuration made; softnet ctl can remove it, and the next reload applies the configuration's"
	ignored := map[string]bool{}
	for _, p := range file.Ports {
		if kept, ok := api[p.Name]; ok {
			ignored[p.Name] = true
			notes = append(notes, Note{"kept the API's port, not the configuration's", []any{"port", p.Name, "kept", kept.String(), "ignored", p.String(), "at", p.at, "why", why}})
			continue
		}
		p.Origin = FromConfig
		out.Ports = append(out.Ports, p)
	}
	for _, rt := range file.Routes {
		switch kept, ok := apiRoutes[rt.Prefix]; {
		case ignored[rt.Port]:
			notes = append(notes, Note{"ignored the configuration's route to the API's port", []any{"route", rt.String(), "at", rt.at, "why", "port " + rt.Port + " is the API's, kept for the reason logged with it"}})
		case ok:
			notes = append(notes, Note{"kept the API's route, not the configuration's", []any{"route", rt.Prefix.String(), "kept", kept.String(), "ignored", rt.String(), "at", rt.at, "why", why}})
		default:
			rt.Origin = FromConfig
			out.Routes = append(out.Routes, rt)
		}
	}
	for _, p := range running.Ports {
		if p.Origin.Live() {
			out.Ports = append(out.Ports, p)
		}
	}
	for _, rt := range running.Routes {
		if !rt.Origin.Live() {
			continue
		}
		if out.portIndex(rt.Port) < 0 {
			notes = append(notes, Note{"removing the API's route: its port is gone from the configuration", []any{"route", rt.String()}})
			continue
		}
		out.Routes = append(out.Routes, rt)
	}
	return out, notes
}

// reload is the change Apply makes, worked out and checked before
// anything is touched, then run step by step.
type reload struct {
	// unrouted are the running routes removed: those the new
	// configuration lacks, and those to the ports gone.
	unrouted []RouteSpec
	// gone are the running ports removed: those the new configuration
	// lacks, and those it changes in a way their kind does not take
	// live, which are added again.
	gone []string
	// changed are the running ports changed in place, each with its
	// new spec.
	changed []change
	// added are the new configuration's ports added (again), routed its
	// routes added (again), in its order.
	added  []PortSpec
	routed []RouteSpec
	// policies are the port security of the new configuration's ports,
	// by name.
	policies map[string]program.PortPolicy
	// opened are new ports opened ahead, by name, until added.
	opened map[string]*livePort
	done   []string // what was changed, one line each
}

// change is a running port changed in place into spec.
type change struct {
	lp   *livePort
	spec PortSpec
}

// newReload works out and checks the change into cfg, which is valid,
// and opens the ports it adds where no port it removes is in the way.
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
	r := &reload{policies: map[string]program.PortPolicy{}, opened: map[string]*livePort{}}
	// Each running port is kept, changed in place, or removed (and
	// added again if cfg still has it).
	next := map[string]PortSpec{}
	for _, p := range cfg.Ports {
		next[p.Name] = p
	}
	stays := map[string]bool{}
	sameNetNS := map[string]bool{} // the ports added again, by name: in the same namespace
	for _, lp := range sw.ports {
		name := lp.spec.Name
		p, ok := next[name]
		if !ok {
			r.gone = append(r.gone, name)
			continue
		}
		switch lp.reloadTo(p) {
		case kept:
			stays[name] = true
		case inPlace:
			stays[name] = true
			r.changed = append(r.changed, change{lp, p})
		case reopened:
			r.gone = append(r.gone, name)
			sameNetNS[name] = lp.spec.NetNS == p.NetNS
		}
	}
	// A route stays if it is the same, to a port that stays.
	for _, rt := range sw.cfg.Routes {
		if !stays[rt.Port] || !slices.ContainsFunc(cfg.Routes, rt.same) {
			r.unrouted = append(r.unrouted, rt)
		}
	}
	for _, rt := range cfg.Routes {
		if !stays[rt.Port] || !slices.ContainsFunc(sw.cfg.Routes, rt.same) {
			r.routed = append(r.routed, rt)
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
		if stays[p.Name] {
			continue
		}
		r.added = append(r.added, p)
		if sameNetNS[p.Name] {
			// It would take what the port open now has (its device, its
			// socket): it opens once that one is closed.
			continue
		}
		// A port that RemovePort is closing may be opened again: its
		// close takes no lock of ours, so waiting for it here is safe.
		if closed := sw.closed(p.Name); closed != nil {
			<-closed
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
	// Rate limits change live whatever the kind; its own options if it
	// says so.
	limits := lp.spec
	limits.Ingress, limits.Egress = spec.Ingress, spec.Egress
	if limits.String() == s {
		return inPlace
	}
	same := limits
	same.Options = spec.Options
	if same.String() == s && lp.spec.Options.Live(spec.Options) {
		return inPlace
	}
	return reopened
}

// change changes the running port lp into spec in place, which reloadTo
// allows: its kind's options if they differ, its rate limits.
func (sw *Switch) change(lp *livePort, spec PortSpec, by slog.Attr) error {
	if !slices.Equal(lp.spec.Options.Fields(), spec.Options.Fields()) {
		if err := lp.open.Change(spec.Options); err != nil {
			return fmt.Errorf("port %s: %w", spec, err)
		}
	}
	if err := sw.chain.police.SetLimits(lp.index, spec.Ingress, spec.Egress); err != nil {
		return fmt.Errorf("port %s: %w", spec, err)
	}
	spec.Kept = lp.spec.Kept // the same device
	lp.spec, sw.cfg.Ports[slices.Index(sw.ports, lp)] = spec, spec
	sw.log.Info("port changed", "port", spec.Name, "spec", spec.String(), by)
	return nil
}

// run makes the change, in the order that keeps guests honest: routes
// go before their ports and come after them, and a port's policy is in
// force before its first packet or route. Each step it made is in
// r.done, also when one fails.
func (r *reload) run(sw *Switch, by slog.Attr) error {
	for _, rt := range r.unrouted {
		if err := sw.removeRoute(rt.Prefix, by); err != nil {
			return err
		}
		r.done = append(r.done, "route removed: "+rt.String())
	}
	// A port added again may take what the removed one had: each
	// closes before the next step.
	for _, name := range r.gone {
		closePort, err := sw.removePort(name, by)
		if err == nil {
			err = closePort()
		}
		if err != nil {
			return err
		}
		r.done = append(r.done, "port removed: "+name)
	}
	for _, c := range r.changed {
		if err := sw.change(c.lp, c.spec, by); err != nil {
			return err
		}
		r.done = append(r.done, "port changed: "+c.spec.String())
	}
	// What the new configuration has is valid: so is every step on the
	// way to it.
	for _, p := range r.added {
		lp := r.opened[p.Name]
		if lp == nil { // added again in its namespace, once closed above
			var err error
			if lp, err = sw.openPort(p); err != nil {
				return err
			}
		}
		delete(r.opened, p.Name)
		next := sw.cfg.clone()
		next.Ports = append(next.Ports, lp.spec)
		if err := sw.addPort(next, lp, r.policies[p.Name], by); err != nil {
			return err
		}
		r.done = append(r.done, "port added: "+p.String())
	}
	for _, rt := range r.routed {
		next := sw.cfg.clone()
		next.Routes = append(next.Routes, rt)
		lp := sw.ports[sw.cfg.portIndex(rt.Port)]
		if err := sw.route(lp, rt, next, r.policies[rt.Port], by); err != nil {
			return err
		}
		r.done = append(r.done, "route added: "+rt.String())
	}
	return nil
}

// closeUnused closes the ports opened ahead that an error left unadded.
func (r *reload) closeUnused() {
	for name, lp := range r.opened {
		_ = lp.port.CloseInto(nil)
		delete(r.opened, name)
	}
}

// same reports whether two routes are one: prefix, port and next hop
// (not where a file wrote them).
func (rt RouteSpec) same(o RouteSpec) bool {
	return rt.Prefix == o.Prefix && rt.Port == o.Port && rt.Via == o.Via
}
