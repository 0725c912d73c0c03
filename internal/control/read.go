package control

import (
	"net/http"

	"softnet.dev/engine"
	"softnet.dev/internal/buildinfo"
	"softnet.dev/internal/vswitch"
)

// Port is one port in GET /v1/ports.
type Port struct {
	Name    string `json:"name"`
	Spec    string `json:"spec"` // as --port takes it
	Info    string `json:"info"` // layer, queues, max frame, offloads
	Down    bool   `json:"down"`
	Error   string `json:"error,omitempty"`
	Created bool   `json:"created"` // created by the switch, removed when it stops
	// Origin is who made the port: "config" (the configuration file or
	// the command line, which a reload changes) or "api".
	Origin string `json:"origin"`
	// Port security in force, defaults included: the source addresses
	// the guest may send from (allow= syntax), its MAC lock, whether it
	// may answer DHCP and whether it may send router advertisements.
	Allow      string `json:"allow"`
	MACs       string `json:"macs,omitempty"`
	DHCPServer bool   `json:"dhcp_server"`
	Router     bool   `json:"router"`
}

// Route is one route in GET /v1/routes.
type Route struct {
	Prefix string `json:"prefix"`
	Port   string `json:"port"`
	Via    string `json:"via,omitempty"` // a routed vxlan port's remote
	// Origin is who made the route, as Port's; POST /v1/routes ignores
	// it: a route made through the API is the API's.
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
	writeJSON(w, http.StatusOK, s.sw.Stats())
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
	p := Port{Name: info.Name, Spec: pv.Spec.String(), Info: info.String(), Created: created, Origin: pv.Spec.Origin.String(),
		Allow: pv.Policy.Allow.String(), MACs: vswitch.FormatMACs(pv.Policy.MACs), DHCPServer: pv.Policy.DHCPServer,
		Router: pv.Policy.Router}
	for _, ps := range st.Ports {
		if ps.Index == pv.Index {
			p.Down, p.Error = ps.Down, ps.Err
		}
	}
	return p
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
