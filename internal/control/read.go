package control

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"

	"softnet.dev/engine"
	"softnet.dev/internal/buildinfo"
	"softnet.dev/internal/vswitch"
	"softnet.dev/internal/vswitch/portkind"
)

// Port is one port in GET /v1/ports, and GET /v1/ports/NAME.
type Port struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	Spec string `json:"spec"` // as --port takes it
	// Options are the kind's own options, as its spec writes them (the
	// kind formats them: portkind.Options.Fields); those every port has
	// are the fields below and in Spec.
	Options Fields `json:"options,omitempty"`
	// Origin is who made the port: "config" (the configuration file or
	// the command line, which a reload changes) or "api".
	Origin string `json:"origin"`
	Info   string `json:"info"` // layer, queues, max frame, offloads
	Queues int    `json:"queues"`
	Netns  string `json:"netns,omitempty"`  // "" for the switch's own namespace
	Device string `json:"device,omitempty"` // its device there, for a kind that has one
	Down   bool   `json:"down"`
	Error  string `json:"error,omitempty"`
	// State is the port's state as its kind says it, in a few words
	// ("no front-end connected" for a vhost-user port waiting for its
	// VM), and StateDetail its parts; both absent for a kind that says
	// none.
	State       string `json:"state,omitempty"`
	StateDetail Fields `json:"state_detail,omitempty"`
	Created     bool   `json:"created"` // created by the switch, removed when it stops
	// Port security in force, defaults included: the source addresses
	// the guest may send from (allow= syntax), its MAC lock, whether it
	// may answer DHCP and whether it may send router advertisements.
	Allow      string `json:"allow"`
	MACs       string `json:"macs,omitempty"`
	DHCPServer bool   `json:"dhcp_server"`
	Router     bool   `json:"router"`
	// Pod is the pod whose network the port is, if it was added for one.
	Pod *vswitch.Pod `json:"pod,omitempty"`
}

// Fields are keys and values in the order a port's kind gives them,
// as a JSON object whose keys come in that order; an option given more
// than once (a vxlan port's remote=) is one key, its values joined by
// commas in the spec's order.
type Fields []portkind.Field

// fieldsOf is fs with each key once, nil for none.
func fieldsOf(fs []portkind.Field) Fields {
	var out Fields
	for _, f := range fs {
		if i := slices.IndexFunc(out, func(o portkind.Field) bool { return o.Key == f.Key }); i >= 0 {
			out[i].Value += "," + f.Value
		} else {
			out = append(out, f)
		}
	}
	return out
}

// Get returns the value of key, "" if there is none.
func (fs Fields) Get(key string) string {
	for _, f := range fs {
		if f.Key == key {
			return f.Value
		}
	}
	return ""
}

// String is the fields as a spec writes them: key=value,key=value.
func (fs Fields) String() string {
	var b strings.Builder
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(f.Key + "=" + f.Value)
	}
	return b.String()
}

// MarshalJSON writes an object, its keys in order.
func (fs Fields) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.Key) // strings marshal without error
		v, _ := json.Marshal(f.Value)
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an object of strings, keeping its keys' order.
func (fs *Fields) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("fields: want an object of strings")
	}
	*fs = nil
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return fmt.Errorf("fields: %w", err)
		}
		var v string
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("fields: %q: want a string", k)
		}
		*fs = append(*fs, portkind.Field{Key: k.(string), Value: v})
	}
	_, err := dec.Token() // the closing brace
	return err
}

// Route is one route in GET /v1/routes.
type Route struct {
	Prefix string `json:"prefix"`
	Port   string `json:"port"`
	Via    string `json:"via,omitempty"` // a routed vxlan port's remote
	// Origin is who made the route, as Port's; POST /v1/routes takes
	// "api" (or none: "config" is the API's too) or "agent".
	Origin string `json:"origin,omitempty"`
}

// routeOf is rt as the API shows it.
func routeOf(rt vswitch.RouteSpec) Route {
	r := Route{Prefix: rt.Prefix.String(), Port: rt.Port, Origin: rt.Origin.String()}
	if rt.Via.IsValid() {
		r.Via = rt.Via.String()
	}
	return r
}

// Config is GET /v1/config: the running configuration in configuration
// file syntax.
type Config struct {
	Text string `json:"text"`
}

func (s *Server) stats(w http.ResponseWriter, _ *http.Request) {
	// Counted first, so that what building the answer allocates falls
	// after it: a client that asks twice in a row learns what one request
	// costs. runtime.ReadMemStats stops the world for a moment but counts
	// exactly; runtime/metrics (and so go_memstats_mallocs_total in
	// /metrics) counts a small allocation only when its span leaves the
	// P's cache, long after it was made.
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rep := s.sw.Stats()
	rep.HeapAllocs = ms.Mallocs
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) ports(w http.ResponseWriter, _ *http.Request) {
	st := s.sw.Engine().Stats()
	out := []Port{}
	for _, pv := range s.sw.Ports() {
		out = append(out, portOf(pv, st))
	}
	writeJSON(w, http.StatusOK, out)
}

// portOf is pv as GET /v1/ports shows it, with its state from st.
func portOf(pv vswitch.PortView, st engine.Stats) Port {
	info := pv.Port.Info()
	// A kernel device that the switch created, and removes at exit.
	c, ok := pv.Port.(interface{ Created() bool })
	created := ok && c.Created()
	p := Port{Name: info.Name, Kind: pv.Spec.Kind, Spec: pv.Spec.String(), Origin: pv.Spec.Origin.String(), Info: info.String(), Queues: info.Queues,
		Netns: pv.Spec.NetNS, Device: pv.Spec.Device(), Created: created, State: pv.State.Summary,
		Allow: pv.Policy.Allow.String(), MACs: vswitch.FormatMACs(pv.Policy.MACs), DHCPServer: pv.Policy.DHCPServer,
		Router: pv.Policy.Router}
	p.Options, p.StateDetail = fieldsOf(pv.Spec.KindOptions()), fieldsOf(pv.State.Fields)
	if !pv.Spec.Pod.IsZero() {
		pod := pv.Spec.Pod
		p.Pod = &pod
	}
	for _, ps := range st.Ports {
		if ps.Index == pv.Index {
			p.Down, p.Error = ps.Down, ps.Err
		}
	}
	return p
}

// port is GET /v1/ports/NAME: one port, as GET /v1/ports shows it.
func (s *Server) port(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	pv, ok := s.portView(name)
	if !ok {
		writeError(w, http.StatusNotFound, "no such port: "+name)
		return
	}
	writeJSON(w, http.StatusOK, portOf(pv, s.sw.Engine().Stats()))
}

// Station is one entry of GET /v1/fdb.
type Station struct {
	MAC    string `json:"mac"`
	Port   string `json:"port"`
	Dst    string `json:"dst,omitempty"` // a port's own entry's destination: a vxlan remote
	Static bool   `json:"static"`        // configured, not learned
	// AgeSeconds is the time since the station was last seen, to within
	// a second; 0 for a static one.
	AgeSeconds float64 `json:"age_seconds"`
}

// fdb is GET /v1/fdb: the stations the switch knows (vswitch.Switch.FDB).
func (s *Server) fdb(w http.ResponseWriter, _ *http.Request) {
	out := []Station{}
	for _, e := range s.sw.FDB() {
		out = append(out, Station{MAC: net.HardwareAddr(e.MAC[:]).String(), Port: e.Port, Dst: e.Dst, Static: e.Static,
			AgeSeconds: e.Age.Seconds()})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) routes(w http.ResponseWriter, _ *http.Request) {
	out := []Route{}
	for _, r := range s.sw.Config().Routes {
		out = append(out, routeOf(r))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) services(w http.ResponseWriter, _ *http.Request) {
	out := s.sw.Stats().Services
	if out == nil {
		out = []vswitch.ServiceStats{}
	}
	writeJSON(w, http.StatusOK, out)
}

// version is GET /v1/version: which softnet the switch is.
func (s *Server) version(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, buildinfo.Get())
}

func (s *Server) config(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, Config{Text: s.sw.Config().Text()})
}

// portView returns the switch's port of that name.
func (s *Server) portView(name string) (vswitch.PortView, bool) {
	for _, pv := range s.sw.Ports() {
		if pv.Spec.Name == name {
			return pv, true
		}
	}
	return vswitch.PortView{}, false
}
