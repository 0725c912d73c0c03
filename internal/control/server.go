package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
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

	mu        sync.Mutex
	watching  bool         // a drop watch runs
	capturing map[int]bool // ports with a capture running
}

// NewServer returns the API server of sw.
func NewServer(sw *vswitch.Switch, log *slog.Logger) *Server {
	s := &Server{sw: sw, log: log, capturing: map[int]bool{}}
	mux := http.NewServeMux()
	resources := map[string]http.HandlerFunc{
		"/v1/stats":    s.stats,
		"/v1/ports":    s.ports,
		"/v1/routes":   s.routes,
		"/v1/services": s.services,
		"/v1/config":   s.config,
		"/v1/drops":    s.drops,
		"/v1/capture":  s.capture,
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
	st := s.sw.Engine().Stats()
	out := []Port{}
	for _, pv := range s.sw.Ports() {
		d := pv.Device
		p := Port{Name: d.Info().Name, Spec: pv.Spec.String(), Info: d.Info().String(), Created: d.Created(),
			Allow: pv.Policy.Allow.String(), MACs: program.FormatMACs(pv.Policy.MACs), DHCPServer: pv.Policy.DHCPServer}
		for _, ps := range st.Ports {
			if ps.Index == pv.Index {
				p.Down, p.Error = ps.Down, ps.Err
			}
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

// DropEvent is one line of GET /v1/drops: a sampled drop, or (Type
// "status") what the sampler skipped and lost so far.
type DropEvent struct {
	Type       string    `json:"type"` // "drop" or "status"
	Time       time.Time `json:"time,omitzero"`
	Port       string    `json:"port,omitempty"`
	Worker     int       `json:"worker"`
	Reason     string    `json:"reason,omitempty"`
	Length     int       `json:"length,omitempty"`
	Summary    string    `json:"summary,omitempty"`
	Sent       uint64    `json:"sent,omitempty"`
	SampledOut uint64    `json:"sampled_out,omitempty"`
	Lost       uint64    `json:"lost,omitempty"`
}

// claim marks a watch or a port's capture as running, or reports that
// one already is.
func (s *Server) claim(port int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if port < 0 {
		if s.watching {
			return false
		}
		s.watching = true
		return true
	}
	if s.capturing[port] {
		return false
	}
	s.capturing[port] = true
	return true
}

func (s *Server) release(port int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if port < 0 {
		s.watching = false
	} else {
		delete(s.capturing, port)
	}
}

// queryInt reads an integer parameter in [lo, hi], or def if absent.
func queryInt(r *http.Request, name string, def, lo, hi int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s=%q: want %d to %d", name, v, lo, hi)
	}
	return n, nil
}

// drops streams sampled drops as JSON lines until the client goes away
// or count drops were sent.
func (s *Server) drops(w http.ResponseWriter, r *http.Request) {
	rate, err := queryInt(r, "rate", DefaultDropRate, 1, maxDropRate)
	if err == nil {
		var count int
		if count, err = queryInt(r, "count", 0, 0, math.MaxInt32); err == nil {
			s.watchDrops(w, r, rate, count)
			return
		}
	}
	writeError(w, http.StatusBadRequest, err.Error())
}

func (s *Server) watchDrops(w http.ResponseWriter, r *http.Request, rate, count int) {
	if !s.claim(-1) {
		writeError(w, http.StatusConflict, "a drop watch is already running")
		return
	}
	defer s.release(-1)
	eng := s.sw.Engine()
	dw, err := newDropWatch(rate, len(eng.Stats().Workers))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	eng.SetDropMonitor(dw)
	defer eng.SetDropMonitor(nil)
	infos := eng.Ports()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	var sent uint64
	status := func() error {
		out, lost := dw.counts()
		return enc.Encode(DropEvent{Type: "status", Sent: sent, SampledOut: out, Lost: lost})
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lastStatus := time.Now()
	for {
		for i := range dw.lanes {
			for {
				ev, ok := dw.lanes[i].events.Dequeue()
				if !ok {
					break
				}
				out := DropEvent{Type: "drop", Time: ev.at, Worker: ev.worker, Reason: ev.reason.String(), Length: ev.length, Port: "-"}
				if ev.port >= 0 && ev.port < len(infos) {
					out.Port = infos[ev.port].Name
					out.Summary = Summary(ev.head[:ev.n], infos[ev.port].Layer, ev.length)
				}
				if enc.Encode(out) != nil {
					return
				}
				if sent++; count > 0 && sent == uint64(count) {
					status()
					return
				}
			}
		}
		if time.Since(lastStatus) >= time.Second {
			if status() != nil {
				return
			}
			lastStatus = time.Now()
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// capture streams a port's packets as pcap.
func (s *Server) capture(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	eng := s.sw.Engine()
	idx, ok := eng.PortIndex(q.Get("port"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no port %q", q.Get("port")))
		return
	}
	info := eng.Ports()[idx]
	o := captureOptions{port: idx, layer: info.Layer}
	switch q.Get("dir") {
	case "", "both":
		o.rx, o.tx = true, true
	case "rx":
		o.rx = true
	case "tx":
		o.tx = true
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("dir=%q: want rx, tx or both", q.Get("dir")))
		return
	}
	var err error
	if o.snaplen, err = queryInt(r, "snaplen", info.MaxFrame, 64, max(info.MaxFrame, 64)); err == nil {
		if o.count, err = queryInt(r, "count", 0, 0, math.MaxInt32); err == nil {
			o.filter, err = parseCaptureFilter(q.Get("filter"))
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.claim(idx) {
		writeError(w, http.StatusConflict, fmt.Sprintf("port %s: a capture is already running", info.Name))
		return
	}
	defer s.release(idx)
	c, err := newCapture(o, len(eng.Stats().Workers))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if err := eng.SetTap(idx, c); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/vnd.tcpdump.pcap")
	w.Header().Set("Trailer", "Softnet-Captured, Softnet-Lost")
	w.WriteHeader(http.StatusOK)
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	n, err := c.write(r.Context(), w, flush)
	_ = eng.SetTap(idx, nil)
	w.Header().Set("Softnet-Captured", strconv.Itoa(n))
	w.Header().Set("Softnet-Lost", strconv.FormatUint(c.lost(), 10))
	s.log.Info("capture ended", "port", info.Name, "captured", n, "lost", c.lost(), "err", err)
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
