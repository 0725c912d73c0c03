package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
	stopped   bool                        // Shutdown began: no new requests
	watching  bool                        // a drop watch runs
	capturing map[port.Port]bool          // ports with a capture running
	stop      func(keepGuests bool) error // OnShutdown's
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
	endpoints := s.endpoints()
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

// endpoints are the API's resources, each method of each path: those
// docs/api.md describes.
func (s *Server) endpoints() []endpoint {
	return []endpoint{
		{"GET", "/v1/stats", s.stats},
		{"GET", "/v1/ports", s.ports},
		{"POST", "/v1/ports", s.addPort},
		{"GET", "/v1/ports/{name}", s.port},
		{"PATCH", "/v1/ports/{name}", s.changePort},
		{"DELETE", "/v1/ports/{name}", s.removePort},
		{"GET", "/v1/fdb", s.fdb},
		{"GET", "/v1/routes", s.routes},
		{"POST", "/v1/routes", s.addRoute},
		{"DELETE", "/v1/routes/{prefix...}", s.removeRoute},
		{"GET", "/v1/services", s.services},
		{"GET", "/v1/config", s.config},
		{"GET", "/v1/version", s.version},
		{"GET", "/v1/drops", s.drops},
		{"GET", "/v1/capture", s.capture},
		{"POST", "/v1/shutdown", s.shutdown},
	}
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

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
}
