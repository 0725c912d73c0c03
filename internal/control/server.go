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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"softnet.dev/engine"
	"softnet.dev/internal/vswitch"
	"softnet.dev/port"
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

	// stopping ends with Shutdown: every request's context derives from
	// it, so that streams end before the switch they read closes.
	stopping   context.Context
	endStreams context.CancelFunc
	handlers   sync.WaitGroup // requests being answered

	mu        sync.Mutex
	stopped   bool               // Shutdown began: no new requests
	watching  bool               // a drop watch runs
	capturing map[port.Port]bool // ports with a capture running
}

// endpoint is one method of one path of the API.
type endpoint struct {
	method, pattern string // as http.ServeMux takes them
	handle          http.HandlerFunc
}

// allowed returns the Allow header of the resource at path, "" if no
// endpoint has that path.
func allowed(endpoints []endpoint, path string) string {
	var ms []string
	for _, e := range endpoints {
		if matches(e.pattern, path) && !slices.Contains(ms, e.method) {
			ms = append(ms, e.method)
			if e.method == http.MethodGet {
				ms = append(ms, http.MethodHead) // GET patterns answer HEAD
			}
		}
	}
	return strings.Join(ms, ", ")
}

// matches reports whether path matches pattern, whose last segment may
// be a wildcard ({name}: one segment, {name...}: the rest).
func matches(pattern, path string) bool {
	base, wild, ok := strings.Cut(pattern, "{")
	switch {
	case !ok:
		return path == pattern
	case !strings.HasPrefix(path, base) || len(path) == len(base):
		return false
	}
	return strings.HasSuffix(wild, "...}") || !strings.Contains(path[len(base):], "/")
}

// NewServer returns the API server of sw.
func NewServer(sw *vswitch.Switch, log *slog.Logger) *Server {
	s := &Server{sw: sw, log: log, capturing: map[port.Port]bool{}}
	s.stopping, s.endStreams = context.WithCancel(context.Background())
	endpoints := []endpoint{
		{"GET", "/v1/stats", s.stats},
		{"GET", "/v1/ports", s.ports},
		{"POST", "/v1/ports", s.addPort},
		{"DELETE", "/v1/ports/{name}", s.removePort},
		{"GET", "/v1/routes", s.routes},
		{"POST", "/v1/routes", s.addRoute},
		{"DELETE", "/v1/routes/{prefix...}", s.removeRoute},
		{"GET", "/v1/services", s.services},
		{"GET", "/v1/config", s.config},
		{"GET", "/v1/drops", s.drops},
		{"GET", "/v1/capture", s.capture},
	}
	mux := http.NewServeMux()
	for _, e := range endpoints {
		mux.HandleFunc(e.method+" "+e.pattern, e.handle)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := allowed(endpoints, r.URL.Path); allow != "" {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: the resource takes %s", r.Method, r.URL.Path, allow))
			return
		}
		writeError(w, http.StatusNotFound, "no such resource: "+r.URL.Path)
	})
	s.http = &http.Server{
		Handler:           s.track(limitClients(mux, maxClients)),
		BaseContext:       func(net.Listener) context.Context { return s.stopping },
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// Who connected, for the log of the changes they make.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			p, err := peerOf(c)
			return context.WithValue(ctx, peerKey{}, peerInfo{p, err})
		},
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

// Shutdown stops accepting, ends the streams (captures and drop watches,
// which send their trailers saying the switch stopped), waits for
// requests in progress up to ctx, and closes the listeners (removing the
// socket file). When it returns, no handler runs: the switch can close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.endStreams()
	err := s.http.Shutdown(ctx)
	if err != nil {
		// Past ctx, a client that does not read can hold its handler in
		// a write; closing the connections frees it.
		err = errors.Join(err, s.http.Close())
	}
	s.handlers.Wait()
	return err
}

// switchStopped reports whether the server ends its streams because the
// switch stops.
func (s *Server) switchStopped() bool { return s.stopping.Err() != nil }

// track counts the requests being answered, for Shutdown to wait for,
// and turns away those that arrive once it began.
func (s *Server) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			writeError(w, http.StatusServiceUnavailable, "the switch is stopping")
			return
		}
		s.handlers.Add(1)
		s.mu.Unlock()
		defer s.handlers.Done()
		h.ServeHTTP(w, r)
	})
}

type peerKey struct{}

// peerInfo is a connection's peer, or why it is not known.
type peerInfo struct {
	peer Peer
	err  error
}

// caller is who sent r, as the log of a change names them.
func caller(r *http.Request) slog.Attr {
	pi, ok := r.Context().Value(peerKey{}).(peerInfo)
	switch {
	case !ok:
		return slog.String("by", "unknown")
	case pi.err != nil:
		return slog.String("by", "unknown: "+pi.err.Error())
	}
	return pi.peer.By()
}

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
}

// routeOf is rt as the API shows it.
func routeOf(rt vswitch.RouteSpec) Route {
	r := Route{Prefix: rt.Prefix.String(), Port: rt.Port}
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
		out = append(out, portOf(pv, st))
	}
	writeJSON(w, http.StatusOK, out)
}

// portOf is pv as GET /v1/ports shows it, with its state from st.
func portOf(pv vswitch.PortView, st engine.Stats) Port {
	info := pv.Port.Info()
	created := pv.Device != nil && pv.Device.Created()
	p := Port{Name: info.Name, Spec: pv.Spec.String(), Info: info.String(), Created: created,
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
	// The last status line says why the watch ended: "count" or
	// EndStopped. (A client that went away is sent nothing.)
	End string `json:"end,omitempty"`
}

// EndStopped ends a drop watch (DropEvent.End) or a capture (the
// Softnet-End trailer, beside the ends capture.go lists) when the switch
// stops.
const EndStopped = "switch-stopped"

// claim marks a drop watch (dev nil) or a port's capture as running,
// or reports that one already is.
func (s *Server) claim(dev port.Port) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dev == nil {
		if s.watching {
			return false
		}
		s.watching = true
		return true
	}
	if s.capturing[dev] {
		return false
	}
	s.capturing[dev] = true
	return true
}

func (s *Server) release(dev port.Port) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dev == nil {
		s.watching = false
	} else {
		delete(s.capturing, dev)
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
	if !s.claim(nil) {
		writeError(w, http.StatusConflict, "a drop watch is already running")
		return
	}
	defer s.release(nil)
	eng := s.sw.Engine()
	dw, err := newDropWatch(rate, len(eng.Stats().Workers))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	eng.SetDropMonitor(dw)
	defer eng.SetDropMonitor(nil)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	var sent uint64
	status := func(end string) error {
		out, lost := dw.counts()
		return enc.Encode(DropEvent{Type: "status", Sent: sent, SampledOut: out, Lost: lost, End: end})
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lastStatus := time.Now()
	for stopping := false; ; {
		// Read again each time: ports come and go, and a removed port's
		// index goes to the next one added. A drop sampled just before a
		// port was removed, and drained after another took its index,
		// would be shown with the new port's name; the ports are read
		// every tick (20 ms) to keep that window to one tick.
		infos := eng.Ports()
		for i := range dw.lanes {
			for {
				ev, ok := dw.lanes[i].events.Dequeue()
				if !ok {
					break
				}
				out := DropEvent{Type: "drop", Time: ev.at, Worker: ev.worker, Reason: ev.reason.String(), Length: ev.length, Port: "-"}
				if ev.port >= 0 && ev.port < len(infos) && infos[ev.port].Name != "" {
					out.Port = infos[ev.port].Name
					out.Summary = Summary(ev.head[:ev.n], infos[ev.port].Layer, ev.length)
				}
				if enc.Encode(out) != nil {
					return
				}
				if sent++; count > 0 && sent == uint64(count) {
					status(endCount)
					return
				}
			}
		}
		if stopping {
			// The pass after the switch began to stop sent what the
			// lanes held; the monitor comes off before it closes.
			status(EndStopped)
			return
		}
		if time.Since(lastStatus) >= time.Second {
			if status("") != nil {
				return
			}
			lastStatus = time.Now()
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-r.Context().Done():
			if !s.switchStopped() {
				return // the client went away
			}
			stopping = true
		case <-tick.C:
		}
	}
}

// capture streams a port's packets as pcap, until count packets, the
// client goes away or the port is removed.
func (s *Server) capture(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	eng := s.sw.Engine()
	pv, ok := s.portView(q.Get("port"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no port %q", q.Get("port")))
		return
	}
	info := pv.Port.Info()
	o := captureOptions{port: pv.Index, layer: info.Layer}
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
			if o.buffer, err = queryInt(r, "buffer", DefaultCaptureBufferKiB, MinCaptureBufferKiB, MaxCaptureBufferKiB); err == nil {
				o.buffer <<= 10
				o.filter, err = parseCaptureFilter(q.Get("filter"))
			}
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.claim(pv.Port) {
		writeError(w, http.StatusConflict, fmt.Sprintf("port %s: a capture is already running", info.Name))
		return
	}
	defer s.release(pv.Port)
	c, err := newCapture(o)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	// The port is the one looked up as long as the switch runs that
	// device at that index: a port removed and added again under the
	// same name is another port.
	present := func() bool {
		cur, ok := s.portView(info.Name)
		return ok && cur.Port == pv.Port && cur.Index == pv.Index
	}
	if err := eng.SetTap(pv.Index, c); err != nil || !present() {
		// Removed since the look-up; the tap, if set on a port that took
		// the index since, comes off again.
		eng.ClearTap(pv.Index, c)
		if errors.Is(err, engine.ErrTapBusy) && present() {
			writeError(w, http.StatusConflict, fmt.Sprintf("port %s: a capture is already running", info.Name))
		} else {
			writeError(w, http.StatusNotFound, fmt.Sprintf("port %s: removed", info.Name))
		}
		return
	}
	w.Header().Set("Content-Type", "application/vnd.tcpdump.pcap")
	w.Header().Set("Trailer", "Softnet-Captured, Softnet-Lost, Softnet-End")
	w.WriteHeader(http.StatusOK)
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	n, end, err := c.write(r.Context(), w, flush, present)
	// Only its own: the index may be another port's by now.
	eng.ClearTap(pv.Index, c)
	if end == endClient && s.switchStopped() {
		end = EndStopped
	}
	w.Header().Set("Softnet-Captured", strconv.Itoa(n))
	w.Header().Set("Softnet-Lost", strconv.FormatUint(c.lost(), 10))
	w.Header().Set("Softnet-End", end)
	s.log.Info("capture ended", "port", info.Name, "captured", n, "lost", c.lost(), "end", end, "err", err)
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
