package vswitch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"softnet.dev/internal/vswitch/portkind"
	"softnet.dev/packet"
	"softnet.dev/tun"
)

// PortSpec is a port: a kind, a name, the options every port has and
// the kind's own, as a --port argument writes it:
// KIND:NAME[,OPTION=VALUE...] (PortHelp). It reads and writes itself as
// JSON too: {"kind": KIND, "name": NAME, "options": {OPTION: VALUE or
// [VALUE...]}}, the options as the text writes them.
type PortSpec struct {
	Kind string // a kind of the switch's table (Kinds)
	Name string
	portkind.Common
	// Options are the kind's own, as ParsePort sets them from the kind's
	// defaults; a spec without is not valid.
	Options portkind.Options
	// Pod is the pod whose network the port is (the CNI plugin's), or
	// none.
	Pod Pod
	// Origin says who made the port; not part of its spec's text.
	Origin Origin
	// Kept says that the port's device outlives the switch (a
	// portkind.Keeper's, made persistent with Tuning.Persist or kept by
	// KeepGuests), for the next switch to adopt; a state file records it.
	Kept bool

	at string // "file:line" of a configuration file's directive, for errors
}

// commonOptions are the options every port has, in the order a spec
// writes them.
var commonOptions = []struct {
	opt  portkind.Option
	name string
}{
	{portkind.NetNS, "netns"}, {portkind.Dev, "dev"}, {portkind.Queues, "queues"}, {portkind.Offload, "offload"},
	{portkind.GRO, "gro"}, {portkind.IO, "io"}, {portkind.Allow, "allow"}, {portkind.MAC, "mac"},
	{portkind.DHCPServer, "dhcp-server"}, {portkind.Router, "router"},
	{portkind.IngressRate, "ingress-rate"}, {portkind.IngressBurst, "ingress-burst"},
	{portkind.EgressRate, "egress-rate"}, {portkind.EgressBurst, "egress-burst"},
}

// commonOption returns the option every port has named name.
func commonOption(name string) (portkind.Option, bool) {
	for _, c := range commonOptions {
		if c.name == name {
			return c.opt, true
		}
	}
	return 0, false
}

// ParsePort parses a --port value.
func ParsePort(s string) (PortSpec, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		return PortSpec{}, fmt.Errorf("port %q: want %s", s, kindList(func(k *portkind.Kind) string { return k.Synopsis }))
	}
	fields := strings.Split(rest, ",")
	var opts []portkind.Field
	for _, f := range fields[1:] {
		key, v, _ := strings.Cut(f, "=")
		opts = append(opts, portkind.Field{Key: key, Value: v})
	}
	p, err := newPort(kind, fields[0], opts, fields[1:])
	if err != nil {
		return PortSpec{}, fmt.Errorf("port %q: %w", s, err)
	}
	return p, nil
}

// newPort makes the port name of kind from its options, each as written
// (raw, for errors: "" for none), and checks it.
func newPort(kind, name string, opts []portkind.Field, raw []string) (PortSpec, error) {
	k := kindOf(kind)
	if k == nil {
		return PortSpec{}, fmt.Errorf("unknown kind %q (%s)", kind, kindList(func(k *portkind.Kind) string { return k.Name }))
	}
	if name == "" {
		return PortSpec{}, fmt.Errorf("no port name: want %s", k.Synopsis)
	}
	p := PortSpec{Kind: kind, Name: name, Options: k.New()}
	p.Offload, p.GRO = true, k.Takes&portkind.GRO != 0
	given := map[string]bool{}
	for i, f := range opts {
		if f.Value == "" {
			written := f.Key + "="
			if i < len(raw) {
				written = raw[i]
			}
			return PortSpec{}, fmt.Errorf("option %q: want key=value", written)
		}
		if err := p.set(k, f.Key, f.Value); err != nil {
			return PortSpec{}, err
		}
		given[f.Key] = true
	}
	for _, n := range k.Needs {
		if !given[n.Key] {
			return PortSpec{}, errors.New(n.Missing)
		}
	}
	if k.Takes&portkind.GRO != 0 && !p.Offload {
		if given["gro"] && p.GRO {
			return PortSpec{}, errors.New("gro=on needs offload=on: without a vnet header the device cannot take GSO packets")
		}
		p.GRO = false
	}
	if err := p.checkLimits(); err != nil {
		return PortSpec{}, err
	}
	if err := p.Options.Check(p.Name, p.Common, p.Queues); err != nil {
		return PortSpec{}, err
	}
	return p, nil
}

// set sets option key of port p of kind k: the kind's own first, then
// those every port has that the kind takes.
func (p *PortSpec) set(k *portkind.Kind, key, v string) error {
	if known, err := p.Options.Set(key, v); known {
		return err
	}
	opt, common := commonOption(key)
	switch {
	case common && k.Takes&opt == 0:
		return fmt.Errorf(k.NotTaken, key)
	case common:
		return p.setCommon(opt, key, v)
	}
	if other := ownerOf(key); other != nil {
		return fmt.Errorf("%s= applies to %s ports", key, other.Name)
	}
	names := slices.Clone(k.Keys)
	for _, c := range commonOptions {
		if k.Takes&c.opt != 0 {
			names = append(names, c.name)
		}
	}
	return fmt.Errorf("unknown option %q (%s)", key, strings.Join(names, ", "))
}

// setCommon sets one of the options every port has.
func (p *PortSpec) setCommon(opt portkind.Option, key, v string) error {
	switch opt {
	case portkind.NetNS:
		p.NetNS = v
	case portkind.Dev:
		p.Dev = v
	case portkind.Queues:
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("queues %q: want a positive number", v)
		}
		p.Queues = n
	case portkind.IO:
		return p.IO.UnmarshalText([]byte(v))
	case portkind.Allow:
		a, err := parseAllow(v)
		if err != nil {
			return err
		}
		p.Allow = &a
	case portkind.MAC:
		m, err := parseMACs(v)
		if err != nil {
			return err
		}
		p.MACs = m
	case portkind.IngressRate, portkind.IngressBurst, portkind.EgressRate, portkind.EgressBurst:
		return p.setLimit(key, v)
	default:
		on := v == "on"
		if !on && v != "off" {
			return fmt.Errorf("%s %q: want on or off", key, v)
		}
		switch opt {
		case portkind.Offload:
			p.Offload = on
		case portkind.GRO:
			p.GRO = on
		case portkind.DHCPServer:
			p.DHCPServer = on
		case portkind.Router:
			p.Router = on
		}
	}
	return nil
}

// fields are p's options as its spec writes them: the kind's own, then
// those every port has.
func (p PortSpec) fields() []portkind.Field {
	var out []portkind.Field
	if p.Options != nil {
		out = p.Options.Fields()
	}
	var takes portkind.Option
	if k := kindOf(p.Kind); k != nil {
		takes = k.Takes
	}
	add := func(key, v string) { out = append(out, portkind.Field{Key: key, Value: v}) }
	if p.NetNS != "" {
		add("netns", p.NetNS)
	}
	if p.Dev != "" {
		add("dev", p.Dev)
	}
	if p.Queues > 0 {
		add("queues", strconv.Itoa(p.Queues))
	}
	if takes&portkind.Offload != 0 && !p.Offload {
		add("offload", "off")
	} else if takes&portkind.GRO != 0 && !p.GRO {
		add("gro", "off")
	}
	if p.IO != tun.IOAuto {
		add("io", p.IO.String())
	}
	if p.Allow != nil {
		add("allow", p.Allow.String())
	}
	if len(p.MACs) > 0 {
		add("mac", FormatMACs(p.MACs))
	}
	if p.DHCPServer {
		add("dhcp-server", "on")
	}
	if p.Router {
		add("router", "on")
	}
	return append(out, p.limitFields()...)
}

func (p PortSpec) String() string {
	var b strings.Builder
	b.WriteString(p.Kind + ":" + p.Name)
	for _, f := range p.fields() {
		b.WriteString("," + f.Key + "=" + f.Value)
	}
	return b.String()
}

// Device is the name of the port's device in its namespace (dev=, or
// the port's name) for a kind whose port is an interface: a guest's own
// (portkind.Kind.GuestDevice) or one that is there (a kind that takes
// dev=, afxdp); "" for one that has none (a socket, an overlay).
func (p PortSpec) Device() string {
	if k := kindOf(p.Kind); k == nil || (!k.GuestDevice && k.Takes&portkind.Dev == 0) {
		return ""
	}
	if p.Dev != "" {
		return p.Dev
	}
	return p.Name
}

// KindOptions are the options of the port's kind, as its spec writes
// them (portkind.Options.Fields): those every port has are not among
// them.
func (p PortSpec) KindOptions() []portkind.Field {
	if p.Options == nil {
		return nil
	}
	return p.Options.Fields()
}

// Routed reports whether the port carries IP packets and is routed by
// the L3 forwarder, rather than Ethernet frames that are bridged: its
// kind says (portkind.Options.Layer).
func (p PortSpec) Routed() bool { return p.Options != nil && p.Options.Layer() == packet.L3 }

// portJSON is PortSpec's JSON: the options as the spec's text writes
// them, one value or, for an option given more than once, the list.
type portJSON struct {
	Kind    string                     `json:"kind"`
	Name    string                     `json:"name"`
	Options map[string]json.RawMessage `json:"options,omitempty"`
	Pod     *Pod                       `json:"pod,omitempty"`
}

// MarshalJSON writes the port as its text form's kind, name and options.
func (p PortSpec) MarshalJSON() ([]byte, error) {
	byKey := map[string][]string{}
	var order []string
	for _, f := range p.fields() {
		if _, seen := byKey[f.Key]; !seen {
			order = append(order, f.Key)
		}
		byKey[f.Key] = append(byKey[f.Key], f.Value)
	}
	var b bytes.Buffer
	b.WriteString(`{"kind":`)
	writeJSON(&b, p.Kind)
	b.WriteString(`,"name":`)
	writeJSON(&b, p.Name)
	if len(order) > 0 {
		b.WriteString(`,"options":{`)
		for i, key := range order {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(&b, key)
			b.WriteByte(':')
			if vs := byKey[key]; len(vs) == 1 {
				writeJSON(&b, vs[0])
			} else {
				writeJSON(&b, vs)
			}
		}
		b.WriteByte('}')
	}
	if !p.Pod.IsZero() {
		b.WriteString(`,"pod":`)
		writeJSON(&b, p.Pod)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeJSON(b *bytes.Buffer, v any) {
	enc, _ := json.Marshal(v) // strings and lists of them
	b.Write(enc)
}

// UnmarshalJSON reads what MarshalJSON writes, checked as ParsePort
// checks a spec.
func (p *PortSpec) UnmarshalJSON(b []byte) error {
	var j portJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	keys := make([]string, 0, len(j.Options))
	for key := range j.Options {
		keys = append(keys, key)
	}
	// The order of a spec's different options changes nothing but
	// which error comes first: sorted, that is always the same one.
	slices.Sort(keys)
	var opts []portkind.Field
	for _, key := range keys {
		var one string
		var list []string
		if err := json.Unmarshal(j.Options[key], &one); err == nil {
			list = []string{one}
		} else if err := json.Unmarshal(j.Options[key], &list); err != nil {
			return fmt.Errorf("port %s: option %q: want a string or a list of strings", j.Name, key)
		}
		for _, v := range list {
			opts = append(opts, portkind.Field{Key: key, Value: v})
		}
	}
	spec, err := newPort(j.Kind, j.Name, opts, nil)
	if err != nil {
		return fmt.Errorf("port %s:%s: %w", j.Kind, j.Name, err)
	}
	if j.Pod != nil {
		if err := j.Pod.Validate(); err != nil {
			return fmt.Errorf("port %s:%s: %w", j.Kind, j.Name, err)
		}
		spec.Pod = *j.Pod
	}
	*p = spec
	return nil
}
