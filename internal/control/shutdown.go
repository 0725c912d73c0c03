package control

import (
	"net/http"
)

// ShutdownRequest is the body of POST /v1/shutdown.
type ShutdownRequest struct {
	// KeepGuests leaves the guests' devices in place, configured, for
	// the next switch to adopt (a restart or an upgrade); false removes
	// what the switch created, as SIGTERM does.
	KeepGuests bool `json:"keep_guests"`
}

// OnShutdown makes POST /v1/shutdown call stop, which asks the switch to
// stop (and returns at once) or says why it will not; without it, the
// API does not stop the switch (404).
func (s *Server) OnShutdown(stop func(keepGuests bool) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop = stop
}

// shutdown is POST /v1/shutdown: 202 once the switch is asked to stop;
// the answer comes before the server stops with it.
func (s *Server) shutdown(w http.ResponseWriter, r *http.Request) {
	var req ShutdownRequest
	if !decodeBody(w, r, &req) {
		return
	}
	s.mu.Lock()
	stop := s.stop
	s.mu.Unlock()
	if stop == nil {
		writeError(w, http.StatusNotFound, "this switch does not stop through its API")
		return
	}
	if err := stop(req.KeepGuests); err != nil {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	s.log.Info("switch stopping", "keep_guests", req.KeepGuests, caller(r))
	writeJSON(w, http.StatusAccepted, req)
}
