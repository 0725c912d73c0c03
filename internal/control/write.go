package control

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"softnet.dev/internal/vswitch"
	"softnet.dev/internal/vswitch/portkind"
)

// maxBody bounds a request's body: a port spec or a route is a few
// hundred bytes.
const maxBody = 64 << 10

// maxChangeBody bounds a PATCH of a port's body, which may carry every
// route to the port: a node agent's routes to the pod CIDRs of a
// 5,000-node dual-stack cluster, with the remotes and fdb entries, are
// about 1 MiB.
const maxChangeBody = 4 << 20

// PortRequest is the body of POST /v1/ports.
type PortRequest struct {
	Spec string `json:"spec"` // as --port takes it
	// Pod is the pod whose network the port is (softnet-cni's), kept
	// with the port and shown with it.
	Pod *vswitch.Pod `json:"pod,omitempty"`
	// Origin is who asks: "api" (or empty) or "agent", the node agent,
	// whose ports and routes it keeps in step with the cluster. Either
	// way a reload never touches the port.
	Origin string `json:"origin,omitempty"`
}

// originOf reads a request's origin: empty or "api" for the API's,
// "agent" for the node agent's; "config" (as GET shows it) is the API's
// too, since only the configuration makes the configuration's.
func originOf(s string) (vswitch.Origin, error) {
	var o vswitch.Origin
	if s == "" {
		return vswitch.FromAPI, nil
	}
	if err := o.UnmarshalText([]byte(s)); err != nil {
		return o, err
	}
	if o == vswitch.FromConfig {
		o = vswitch.FromAPI
	}
	return o, nil
}

// decodeBody reads r's body, exactly one JSON value of at most maxBody
// bytes with only the fields v has, into v. On error it has answered the
// request.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	return decodeBodyOf(w, r, v, maxBody)
}

// decodeBodyOf is decodeBody with limit bytes at most.
func decodeBodyOf(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
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
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s %s: body larger than %d bytes", r.Method, r.URL.Path, limit))
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
	if spec.Origin, err = originOf(req.Origin); err != nil { // a reload never touches it
		writeError(w, http.StatusBadRequest, fmt.Sprintf("port %s: %v", spec.Name, err))
		return
	}
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
// spec writes them, each replacing the port's of its key (an option
// given more than once, a vxlan port's remote=, with its values joined
// by commas, as GET shows it); an empty value removes it (its default
// again). With Routes (even empty), the routes to the port become
// exactly those, made by Origin, in the same change.
type PortChange struct {
	Options map[string]string `json:"options"`
	Routes  *[]Route          `json:"routes,omitempty"`
	Origin  string            `json:"origin,omitempty"`
}

// changePort is PATCH /v1/ports/{name}: changes the port's options that
// change in place (its rate limits, or its kind's that its kind changes
// live), without reopening it.
func (s *Server) changePort(w http.ResponseWriter, r *http.Request) {
	var req PortChange
	if !decodeBodyOf(w, r, &req, maxChangeBody) {
		return
	}
	name := r.PathValue("name")
	if len(req.Options) == 0 && req.Routes == nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf(`port %s: want {"options": {"OPTION": "VALUE", ...}} or "routes"`, name))
		return
	}
	keys := slices.Sorted(maps.Keys(req.Options))
	var opts []portkind.Field
	for _, k := range keys {
		// A spec's values never hold a comma: one joined by commas is
		// the option given once for each.
		for v := range strings.SplitSeq(req.Options[k], ",") {
			opts = append(opts, portkind.Field{Key: k, Value: v})
		}
	}
	var err error
	if req.Routes == nil {
		_, err = s.sw.ChangePort(name, opts, caller(r))
	} else {
		var origin vswitch.Origin
		if origin, err = originOf(req.Origin); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("port %s: %v", name, err))
			return
		}
		routes := make([]vswitch.RouteSpec, 0, len(*req.Routes))
		for _, rq := range *req.Routes {
			rt, err := parseRoute(rq, name)
			if err != nil {
				writeError(w, http.StatusBadRequest, err.Error())
				return
			}
			routes = append(routes, rt)
		}
		_, err = s.sw.ChangePortRoutes(name, opts, routes, origin, caller(r))
	}
	if err != nil {
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
	rt, err := parseRoute(req, req.Port)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if rt.Origin, err = originOf(req.Origin); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("route %s: %v", rt, err))
		return
	}
	if err := s.sw.AddRoute(rt, caller(r)); err != nil {
		writeRefusal(w, err)
		return
	}
	w.Header().Set("Location", "/v1/routes/"+rt.Prefix.String())
	writeJSON(w, http.StatusCreated, routeOf(rt))
}

// parseRoute reads a route of a request to port (its own, or the one a
// PATCH names, if it names none).
func parseRoute(req Route, port string) (vswitch.RouteSpec, error) {
	if req.Port == "" {
		req.Port = port
	}
	if req.Prefix == "" || req.Port == "" || req.Port != port {
		return vswitch.RouteSpec{}, fmt.Errorf(`route: want {"prefix": "PREFIX", "port": "%s"}`, cmp.Or(port, "NAME"))
	}
	spec := req.Prefix + "=" + req.Port
	if req.Via != "" {
		spec += ",via=" + req.Via
	}
	return vswitch.ParseRoute(spec)
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
