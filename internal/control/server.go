package control

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"softnet.dev/internal/vswitch"
	"softnet.dev/program"
)

// Limits that keep a misbehaving client from holding the server.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 16 << 10
	maxClients        = 64
)

// Server serves a switch's API. See docs/api.md.
type Server struct {
	sw   *vswitch.Switch
	http *http.Server
	log  *slog.Logger
}

// NewServer returns the API server of sw.
func NewServer(sw *vswitch.Switch, log *slog.Logger) *Server {
	s := &Server{sw: sw, log: log}
	mux := http.NewServeMux()
	resources := map[string]http.HandlerFunc{
		"/v1/stats":    s.stats,
		"/v1/ports":    s.ports,
		"/v1/routes":   s.routes,
		"/v1/services": s.services,
		"/v1/config":   s.config,
	}
	for path, h := range resources {
		mux.HandleFunc("GET "+path, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := resources[r.URL.Path]; ok {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": this version of the switch has its ports and routes fixed at start; the resource is read-only")
			return
		}
		writeError(w, http.StatusNotFound, "no such resource: "+r.URL.Path)
	})
	s.http = &http.Server{
		Handler:           limitClients(mux, maxClients),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s
}

// Serve answers requests on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting, waits for requests in progress up to ctx, and
// closes the listeners (removing the socket file).
func (s *Server) Shutdown(ctx context.Context) error { return s.http.Shutdown(ctx) }

// limitClients answers 503 once n requests are in progress, so that a
// crowd of clients cannot pile up goroutines without bound.
func limitClients(h http.Handler, n int) http.Handler {
	slots := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			h.ServeHTTP(w, r)
		default:
			writeError(w, http.StatusServiceUnavailable, "too many requests in progress")
		}
	})
}

// Port is one port in GET /v1/ports.
type Port struct {
	Name    string `json:"name"`
	Spec    string `json:"spec"` // as --port takes it
	Info    string `json:"info"` // layer, queues, max frame, offloads
	Down    bool   `json:"down"`
	Error   string `json:"error,omitempty"`
	Created bool   `json:"created"` // created by the switch, removed when it stops
	// Port security in force, defaults included: the source addresses
	// the guest may send from (allow= syntax), its MAC lock and whether
	// it may answer DHCP.
	Allow      string `json:"allow"`
	MACs       string `json:"macs,omitempty"`
	DHCPServer bool   `json:"dhcp_server"`
}

// Route is one route in GET /v1/routes.
type Route struct {
	Prefix string `json:"prefix"`
	Port   string `json:"port"`
}

// Config is GET /v1/config: the running configuration in configuration
// file syntax.
type Config struct {
	Text string `json:"text"`
}

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
}

func (s *Server) stats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.sw.Stats())
}

func (s *Server) ports(w http.ResponseWriter, _ *http.Request) {
	st := s.sw.Stats()
	cfg := s.sw.Config()
	out := []Port{}
	for i, d := range s.sw.Devices() {
		p := Port{Name: d.Info().Name, Spec: cfg.Ports[i].String(), Info: d.Info().String(), Created: d.Created()}
		if pol, ok := s.sw.Policy(i); ok {
			p.Allow, p.MACs, p.DHCPServer = pol.Allow.String(), program.FormatMACs(pol.MACs), pol.DHCPServer
		}
		if i < len(st.Ports) {
			p.Down, p.Error = st.Ports[i].Down, st.Ports[i].Err
		}
		out = append(out, p)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) routes(w http.ResponseWriter, _ *http.Request) {
	out := []Route{}
	for _, r := range s.sw.Config().Routes {
		out = append(out, Route{Prefix: r.Prefix.String(), Port: r.Port})
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

func (s *Server) config(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, Config{Text: s.sw.Config().Text()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away: nothing to tell it
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, Error{Error: msg})
}
