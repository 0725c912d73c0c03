package vswitch

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/program"
)

// ChangePortRoutes changes the named port's options as ChangePort does
// (opts nil: none) and makes the routes to it exactly routes, each made
// by origin, in one change: one validation, one save and one new route
// table for the workers, however many routes change. It is how the node
// agent keeps its routed vxlan port in step with the cluster: a node
// joining adds a remote, its VTEP MAC and the routes to its pod CIDRs
// at once, a node leaving takes them away at once, and a node whose
// VTEP moved has its routes follow it.
//
// The steps keep every route's next hop known to the port while it
// runs: the routes that go or change their next hop leave first, then
// the port's options change, then the new routes come. Packets to a
// prefix whose next hop changes are dropped, with a reason, for the
// moment between.
func (sw *Switch) ChangePortRoutes(name string, opts []portkind.Field, routes []RouteSpec, origin Origin, by slog.Attr) (PortSpec, error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	i := sw.cfg.portIndex(name)
	if i < 0 {
		return PortSpec{}, fmt.Errorf("port %s: %w", name, ErrNotFound)
	}
	lp := sw.ports[i]
	spec := lp.spec
	if opts != nil {
		var err error
		if spec, err = sw.changedSpec(lp, opts); err != nil {
			return PortSpec{}, err
		}
	}
	next := sw.cfg.clone()
	next.Ports[i] = spec
	next.Routes = next.Routes[:0]
	old := map[netip.Prefix]RouteSpec{}
	for _, rt := range sw.cfg.Routes {
		if rt.Port == name {
			old[rt.Prefix] = rt
			continue
		}
		next.Routes = append(next.Routes, rt)
	}
	want := map[netip.Prefix]RouteSpec{}
	for _, rt := range routes {
		rt.Port, rt.Origin = name, origin
		if _, dup := want[rt.Prefix]; dup {
			return PortSpec{}, fmt.Errorf("route %s: %w: given twice", rt, ErrInvalid)
		}
		if j := sw.routeIndex(rt.Prefix); j >= 0 && sw.cfg.Routes[j].Port != name {
			return PortSpec{}, fmt.Errorf("route %s: %w: a route to %s", rt, ErrExists, sw.cfg.Routes[j])
		}
		want[rt.Prefix] = rt
		next.Routes = append(next.Routes, rt)
	}
	if err := next.Validate(); err != nil {
		return PortSpec{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := sw.persist(next); err != nil {
		return PortSpec{}, err
	}
	var gone []netip.Prefix
	var added []program.Route
	for p, rt := range old {
		if w, ok := want[p]; !ok || w.Via != rt.Via {
			gone = append(gone, p)
		}
	}
	for p, rt := range want {
		if o, ok := old[p]; !ok || o.Via != rt.Via {
			added = append(added, program.Route{Prefix: p, Port: lp.index})
		}
	}
	if err := sw.changeRoutes(lp, spec, next, gone, added, by); err != nil {
		sw.unpersist()
		return PortSpec{}, err
	}
	sw.log.Info("port and routes changed", "port", name, "spec", spec.String(), "routes", len(want),
		"routes_added", len(added), "routes_removed", len(gone), "origin", origin.String(), by)
	return spec, nil
}

// changedSpec is lp's spec with opts, as ChangePort makes it: refused
// (ErrRestart) if the port cannot take it in place.
func (sw *Switch) changedSpec(lp *livePort, opts []portkind.Field) (PortSpec, error) {
	given := map[string]bool{}
	for _, o := range opts {
		given[o.Key] = true
	}
	var fields []portkind.Field
	for _, f := range lp.spec.fields() {
		if !given[f.Key] {
			fields = append(fields, f)
		}
	}
	for _, o := range opts {
		if o.Value != "" {
			fields = append(fields, o)
		}
	}
	name := lp.spec.Name
	spec, err := newPort(lp.spec.Kind, name, fields, nil)
	if err != nil {
		return PortSpec{}, fmt.Errorf("port %s: %w: %w", name, ErrInvalid, err)
	}
	spec.at, spec.Origin, spec.Kept, spec.Pod = lp.spec.at, lp.spec.Origin, lp.spec.Kept, lp.spec.Pod
	if lp.reloadTo(spec) == reopened {
		return PortSpec{}, fmt.Errorf("port %s: %w: %s does not change in place; remove the port and add it again", name, ErrRestart, spec)
	}
	return spec, nil
}

// changeRoutes makes next, whose port lp becomes spec, the running
// configuration: the forwarder's routes gone removed, lp's routes
// (those staying) and options changed, then the routes added.
func (sw *Switch) changeRoutes(lp *livePort, spec PortSpec, next Config, gone []netip.Prefix, added []program.Route, by slog.Attr) error {
	// The port may send from what is routed to it before and after:
	// replies from a prefix must not be dropped as spoofed meanwhile.
	both := slices.Concat(sw.cfg.Routes, next.Routes)
	if err := sw.setPolicy(lp, spec.policy(both)); err != nil {
		return err
	}
	if err := sw.chain.fwd.ChangeRoutes(gone, nil); err != nil {
		return fmt.Errorf("port %s: %w", spec.Name, err)
	}
	var staying []RouteSpec
	for _, rt := range sw.cfg.Routes {
		if !slices.Contains(gone, rt.Prefix) {
			staying = append(staying, rt)
		}
	}
	sw.cfg.Routes = staying
	if err := lp.setRoutes(staying); err != nil {
		return err
	}
	if spec.String() != lp.spec.String() {
		if err := sw.change(lp, spec, by); err != nil {
			return err
		}
	}
	if err := lp.setRoutes(next.Routes); err != nil {
		return err
	}
	if err := sw.chain.fwd.ChangeRoutes(nil, added); err != nil {
		return errors.Join(fmt.Errorf("port %s: %w", spec.Name, err), lp.setRoutes(sw.cfg.Routes))
	}
	sw.cfg = next
	return sw.setPolicy(lp, spec.policy(next.Routes))
}
