package vswitch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"softnet.dev/program"
)

// stateVersion is the version of the state MarshalState writes; a state
// of another version is refused, not guessed at.
const stateVersion = 1

// stateJSON is the state file's form: each item in its text syntax (as
// --port, --route, --service and --filter take it), the ports and routes
// with their origin.
type stateJSON struct {
	Version  int         `json:"version"`
	Workers  int         `json:"workers"`
	Ports    []stateItem `json:"ports"`
	Routes   []stateItem `json:"routes"`
	Services []string    `json:"services"`
	Filters  []string    `json:"filters"`
}

type stateItem struct {
	Spec   string `json:"spec"`
	Origin Origin `json:"origin"`
	Kept   bool   `json:"kept,omitempty"` // a port's: PortSpec.Kept
	Pod    *Pod   `json:"pod,omitempty"`  // a port's, if it has one
}

// MarshalState returns cfg as a state file holds it: every port, route,
// service and filter, and who made each port and route.
func (cfg Config) MarshalState() []byte {
	s := stateJSON{Version: stateVersion, Workers: cfg.Workers,
		Ports: []stateItem{}, Routes: []stateItem{}, Services: []string{}, Filters: []string{}}
	for _, p := range cfg.Ports {
		it := stateItem{Spec: p.String(), Origin: p.Origin, Kept: p.Kept}
		if !p.Pod.IsZero() {
			pod := p.Pod
			it.Pod = &pod
		}
		s.Ports = append(s.Ports, it)
	}
	for _, r := range cfg.Routes {
		s.Routes = append(s.Routes, stateItem{Spec: r.String(), Origin: r.Origin})
	}
	for _, sv := range cfg.Services {
		s.Services = append(s.Services, sv.String())
	}
	for _, f := range cfg.Filters {
		s.Filters = append(s.Filters, f.String())
	}
	b, _ := json.MarshalIndent(s, "", "  ") // strings and numbers only
	return append(b, '\n')
}

// ParseState reads what MarshalState wrote, from the state file name
// (for errors), and checks it as a configuration: a truncated or
// garbled file, an unknown version, a bad item or an invalid whole is
// an error naming the file and what is wrong, and no Config.
func ParseState(name string, b []byte) (Config, error) {
	var s stateJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Config{}, fmt.Errorf("state file %s: not a state (truncated or garbled?): %w", name, err)
	}
	if dec.More() {
		return Config{}, fmt.Errorf("state file %s: not a state (garbled?): more than one JSON value", name)
	}
	if s.Version != stateVersion {
		return Config{}, fmt.Errorf("state file %s: version %d, want %d", name, s.Version, stateVersion)
	}
	cfg := Config{Workers: s.Workers}
	var errs []error
	for i, it := range s.Ports {
		p, err := ParsePort(it.Spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("port %d: %w", i+1, err))
			continue
		}
		p.Origin, p.Kept = it.Origin, it.Kept
		if it.Pod != nil {
			p.Pod = *it.Pod // checked with the rest by Validate
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	for i, it := range s.Routes {
		r, err := ParseRoute(it.Spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("route %d: %w", i+1, err))
			continue
		}
		r.Origin = it.Origin
		cfg.Routes = append(cfg.Routes, r)
	}
	var err error
	cfg.Services, err = parseAll(cfg.Services, s.Services, "service", ParseService)
	errs = append(errs, err)
	cfg.Filters, err = parseAll(cfg.Filters, s.Filters, "filter", program.ParseRule)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("state file %s: %w", name, err)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("state file %s: %w", name, err)
	}
	return cfg, nil
}

func parseAll[T any](list []T, texts []string, what string, parse func(string) (T, error)) ([]T, error) {
	var errs []error
	for i, s := range texts {
		v, err := parse(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %d: %w", what, i+1, err))
			continue
		}
		list = append(list, v)
	}
	return list, errors.Join(errs...)
}
