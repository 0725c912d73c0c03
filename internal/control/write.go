package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"slices"

	"softnet.dev/internal/vswitch"
	"softnet.dev/internal/vswitch/portkind"
)

// maxBody bounds a request's body: a port spec or a route is a few
// hundred bytes.
const maxBody = 64 << 10

// PortRequest is the body of POST /v1/ports.
type PortRequest struct {
	Spec string `json:"spec"` // as --port takes it
	// Pod is the pod whose network the port is (softnet-cni's), kept
	// with the port and shown with it.
	Pod *vswitch.Pod `json:"pod,omitempty"`
}

// decodeBody reads r's body, exactly one JSON value of at most maxBody
// bytes with only the fields v has, into v. On error it has answered the
// request.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// Nothing but white space may follow the value.
		if _, err = dec.Token(); errors.Is(err, io.EOF) {
			return true
		} else if err == nil {
			err = errors.New("more than one JSON value")
		}
	} else if errors.Is(err, io.EOF) {
		err = errors.New("empty; want a JSON object")
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s %s: body larger than %d bytes", r.Method, r.URL.Path, maxBody))
		return false
	}
	writeError(w, http.StatusBadRequest, fmt.Sprintf("%s %s: body: %v", r.Method, r.URL.Path, err))
	return false
}

// writeRefusal answers with the status err's kind gives (see
// docs/api.md).
func writeRefusal(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, vswitch.ErrInvalid):
		status = http.StatusBadRequest
	case errors.Is(err, vswitch.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, vswitch.ErrExists), errors.Is(err, vswitch.ErrRestart):
		status = http.StatusConflict
	case errors.Is(err, vswitch.ErrDevice):
		// Well formed, but the device or its namespace cannot be opened
		// (no such namespace, busy, not a TUN device, no permission).
		status = http.StatusUnprocessableEntity
	}
	writeError(w, status, err.Error())
}

// addPort is POST /v1/ports: opens the spec's device and adds the port.
func (s *Server) addPort(w http.ResponseWriter, r *http.Request) {
	var req PortRequest
	if !decodeBody(w, r, &req) {
		return
	}
	spec, err := vswitch.ParsePort(req.Spec)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Pod != nil {
		spec.Pod = *req.Pod
	}
	spec.Origin = vswitch.FromAPI // a reload never touches it
	if err := s.sw.AddPort(spec, caller(r)); err != nil {
		writeRefusal(w, err)
		return
	}
	pv, ok := s.portView(spec.Name)
	if !ok { // removed again at once by another client
		writeError(w, http.StatusConflict, fmt.Sprintf("port %s: removed while being added", spec.Name))
		return
	}
	w.Header().Set("Location", "/v1/ports/"+spec.Name)
	writeJSON(w, http.StatusCreated, portOf(pv, s.sw.Engine().Stats()))
}

// PortChange is the body of PATCH /v1/ports/NAME: options as a --port
// spec writes them, each replacing the port's of its key; an empty value
// removes it (its default again).
type PortChange struct {
	Options map[string]string `json:"options"`
}

// changePort is PATCH /v1/ports/{name}: changes the port's options that
// change in place (its rate limits, or its kind's that its kind changes
// live), without reopening it.
func (s *Server) changePort(w http.ResponseWriter, r *http.Request) {
	var req PortChange
	if !decodeBody(w, r, &req) {
		return
	}
	name := r.PathValue("name")
	if len(req.Options) == 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf(`port %s: want {"options": {"OPTION": "VALUE", ...}}`, name))
		return
	}
	keys := slices.Sorted(maps.Keys(req.Options))
	var opts []portkind.Field
	for _, k := range keys {
		opts = append(opts, portkind.Field{Key: k, Value: req.Options[k]})
	}
	if _, err := s.sw.ChangePort(name, opts, caller(r)); err != nil {
		writeRefusal(w, err)
		return
	}
	pv, ok := s.portView(name)
	if !ok { // removed at once by another client
		writeError(w, http.StatusConflict, fmt.Sprintf("port %s: removed while being changed", name))
		return
	}
	writeJSON(w, http.StatusOK, portOf(pv, s.sw.Engine().Stats()))
}

// removePort is DELETE /v1/ports/{name}.
func (s *Server) removePort(w http.ResponseWriter, r *http.Request) {
	if err := s.sw.RemovePort(r.PathValue("name"), caller(r)); err != nil {
		writeRefusal(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// addRoute is POST /v1/routes, whose body is a Route.
func (s *Server) addRoute(w http.ResponseWriter, r *http.Request) {
	var req Route
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Prefix == "" || req.Port == "" {
		writeError(w, http.StatusBadRequest, `route: want {"prefix": "PREFIX", "port": "NAME"}`)
		return
	}
	spec := req.Prefix + "=" + req.Port
	if req.Via != "" {
		spec += ",via=" + req.Via
	}
	rt, err := vswitch.ParseRoute(spec)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rt.Origin = vswitch.FromAPI
	if err := s.sw.AddRoute(rt, caller(r)); err != nil {
		writeRefusal(w, err)
		return
	}
	w.Header().Set("Location", "/v1/routes/"+rt.Prefix.String())
	writeJSON(w, http.StatusCreated, routeOf(rt))
}

// removeRoute is DELETE /v1/routes/{prefix...}: the prefix as it is
// written, slash included (/v1/routes/198.18.3.0/24).
func (s *Server) removeRoute(w http.ResponseWriter, r *http.Request) {
	p, err := netip.ParsePrefix(r.PathValue("prefix"))
	if err == nil && p != p.Masked() {
		err = fmt.Errorf("%s has host bits set: the prefix is %s", p, p.Masked())
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("route: %v", err))
		return
	}
	if err := s.sw.RemoveRoute(p, caller(r)); err != nil {
		writeRefusal(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
