package main

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"softnet.dev/internal/statefile"
	"softnet.dev/internal/vswitch"
)

// DefaultState is the state file of a switch that serves the default
// control socket: the node's switch, a root service. A switch on another
// socket is another switch, and names its own (or none).
const DefaultState = "/var/lib/softnet/state.json"

// switchState is `softnet switch --state FILE`: the file, locked, and
// what it held at start.
type switchState struct {
	file  *statefile.File
	saved vswitch.Config
}

// openState locks the state file at path and reads it. A file that is
// not a valid state is an error naming it and what is wrong, and the way
// out; reset moves any file aside and starts without it.
func openState(path string, reset bool, log *slog.Logger) (*switchState, error) {
	f, err := statefile.Open(path)
	if err != nil {
		return nil, err
	}
	st := &switchState{file: f}
	b, err := f.Load()
	if err == nil && b != nil {
		st.saved, err = vswitch.ParseState(path, b)
	}
	switch {
	case reset && (b != nil || err != nil):
		aside, merr := f.MoveAside()
		if merr != nil {
			f.Close()
			return nil, errors.Join(fmt.Errorf("--state-reset: %w", merr), err)
		}
		st.saved = vswitch.Config{}
		log.Warn("--state-reset: starting without the state file's ports and routes; the file is kept aside", "file", path, "aside", aside, "its_error", errString(err))
	case err != nil:
		f.Close()
		return nil, fmt.Errorf("%w; nothing was started (--state-reset starts without it, keeping it aside as %s.bad-TIME)", err, path)
	}
	return st, nil
}

// stopping saves the state the switch stops with, before it closes its
// ports: with keep, the guests' devices stay (vswitch.KeepGuests) and the
// state says so, for the next switch to adopt them; without, they go,
// and the state says that none is kept (a crash in between leaves the
// devices, which the next switch attaches to as existing ones).
func (st *switchState) stopping(sw *vswitch.Switch, keep bool, log *slog.Logger) {
	var cfg vswitch.Config
	if keep {
		var err error
		if cfg, err = sw.KeepGuests(); err != nil {
			log.Error("keeping the guests' devices", "err", err)
		}
		var kept []string
		for _, p := range cfg.Ports {
			if p.Kept {
				kept = append(kept, p.Name)
			}
		}
		log.Info("switch stopping: the guests' devices stay for the next switch", "kept", kept, "file", st.file.Path())
	} else {
		cfg = sw.Config()
		for i := range cfg.Ports {
			cfg.Ports[i].Kept = false
		}
	}
	if err := st.file.Save(cfg.MarshalState()); err != nil {
		log.Error("state file: the state the switch stops with was not saved", "err", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "none"
	}
	return err.Error()
}

// merge returns the configuration the switch opens with: cfg's (the
// file's and flags') ports and routes and the saved ones the API made,
// which win a conflict (vswitch.Merge). A saved state that the
// configuration cannot take (ports of another kind than the file's) is
// an error naming the file.
func (st *switchState) merge(cfg vswitch.Config, log *slog.Logger) (vswitch.Config, error) {
	all, notes := vswitch.Merge(st.saved, cfg)
	if err := all.Validate(); err != nil {
		return cfg, fmt.Errorf("state file %s: its ports and routes with the configuration's: %w; nothing was started (--state-reset starts without them)", st.file.Path(), err)
	}
	for _, n := range notes {
		log.Warn("state file: "+n.Msg, append(n.Attrs, "file", st.file.Path())...)
	}
	// The configuration's ports adopt the devices the switch before
	// kept for them, if they are the same ports; a kept device that no
	// port takes is removed, as that switch would have removed it.
	for i, p := range all.Ports {
		if p.Origin == vswitch.FromAPI {
			continue
		}
		j := slices.IndexFunc(st.saved.Ports, func(s vswitch.PortSpec) bool { return s.Name == p.Name })
		if j >= 0 && st.saved.Ports[j].Kept && st.saved.Ports[j].String() == p.String() {
			all.Ports[i].Kept = true
		}
	}
	for _, s := range st.saved.Ports {
		if !s.Kept || slices.ContainsFunc(all.Ports, func(p vswitch.PortSpec) bool { return p.Kept && p.Name == s.Name }) {
			continue
		}
		if err := vswitch.DiscardKept(s, st.saved.Workers, log); err != nil {
			log.Error("state file: a kept device that no port takes could not be removed", "port", s.Name, "spec", s.String(), "err", err)
		} else {
			log.Info("state file: removed a kept device that no port takes", "port", s.Name, "spec", s.String())
		}
	}
	return all, nil
}

// restored reports what of the state the switch, opened with merge's
// configuration and vswitch.Tuning.Restore, has: a port the API made
// whose device could not be opened (its namespace or, for a kept
// device, the device itself went away while no switch ran) is reported,
// and was left out with its routes; the others came up. Then the state
// is saved as the switch runs, and every change after is saved before
// it is acknowledged.
func (st *switchState) restored(sw *vswitch.Switch, log *slog.Logger) error {
	for _, s := range sw.Skipped() {
		log.Error("state file: port skipped; its routes too", "port", s.Spec.Name, "spec", s.Spec.String(), "err", s.Err, "file", st.file.Path())
	}
	cfg := sw.Config()
	if err := st.file.Save(cfg.MarshalState()); err != nil {
		return err
	}
	sw.SetSave(func(cfg vswitch.Config) error { return st.file.Save(cfg.MarshalState()) })
	api := 0
	for _, p := range cfg.Ports {
		if p.Origin == vswitch.FromAPI {
			api++
		}
	}
	log.Info("state restored", "file", st.file.Path(), "api_ports", api, "skipped_ports", len(sw.Skipped()))
	return nil
}
