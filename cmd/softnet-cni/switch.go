package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/containernetworking/cni/pkg/types"

	"softnet.dev/internal/control"
	"softnet.dev/internal/vswitch"
)

// switchAPI is the switch serving a network's control socket.
type switchAPI struct {
	socket string
	client *control.Client
}

func newSwitch(conf *netConf) *switchAPI {
	return &switchAPI{socket: conf.Socket, client: control.NewClient(conf.Socket)}
}

// addPort adds the attachment's port: a device named ifname in the
// namespace at netnsPath, with the port options opts (",KEY=VALUE...");
// in veth mode, the afxdp port on the host end of the pod's veth, named
// as the port; of pod (if a runtime named one).
func (s *switchAPI) addPort(ctx context.Context, mode, name, netnsPath, ifname, opts string, pod vswitch.Pod) error {
	kind := mode
	if mode == vethMode {
		kind = vethKind
	}
	port, err := vswitch.ParsePort(kind + ":" + name + opts)
	if err != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "invalid port: "+err.Error(), "")
	}
	if mode != vethMode {
		port.NetNS, port.Dev = netnsPath, ifname
	}
	spec := port.String()
	var p control.Port
	req := control.PortRequest{Spec: spec}
	if !pod.IsZero() {
		req.Pod = &pod
	}
	if err := s.client.Post(ctx, "/v1/ports", req, &p); err != nil {
		return s.fail("add port "+spec, err)
	}
	return nil
}

// podMode reports whether mode is a kind of port that is a pod's own
// interface, which the switch creates in the pod's namespace, or veth.
func podMode(mode string) bool {
	return mode == vethMode || slices.Contains(vswitch.GuestDeviceKinds(), mode)
}

// routedMode reports whether the switch routes ports of kind mode (and
// so each of their addresses needs a route), rather than bridging them.
func routedMode(mode string) bool {
	p, err := vswitch.ParsePort(mode + ":cni0")
	return err == nil && p.Routed()
}

// podModes lists the modes podMode takes, each routed or bridged.
func podModes() string {
	var modes []string
	for _, k := range append(vswitch.GuestDeviceKinds(), vethMode) {
		how := "bridged"
		if routedMode(k) {
			how = "routed"
		}
		modes = append(modes, fmt.Sprintf("%q (%s)", k, how))
	}
	if len(modes) < 2 {
		return strings.Join(modes, "")
	}
	return strings.Join(modes[:len(modes)-1], ", ") + " or " + modes[len(modes)-1]
}

// devicePort returns a port's netns= and dev= as the switch lists it
// (its spec); ok is false for a spec that does not parse.
func devicePort(spec string) (netns, dev string, ok bool) {
	p, err := vswitch.ParsePort(spec)
	return p.NetNS, p.Dev, err == nil
}

// vethPort reports whether the spec is of an afxdp port on a veth's
// host end, as veth mode adds them: named as its interface.
func vethPort(spec string) bool {
	p, err := vswitch.ParsePort(spec)
	return err == nil && p.Kind == vethKind && p.NetNS == "" && p.Dev == ""
}

// removePort removes the named port; one the switch does not have, or a
// switch that is not running (whose devices went with it), is not an
// error.
func (s *switchAPI) removePort(ctx context.Context, name string) error {
	err := s.client.Delete(ctx, "/v1/ports/"+name)
	var refused *control.RefusedError
	switch {
	case err == nil, errors.Is(err, control.ErrNoSwitch):
		return nil
	case errors.As(err, &refused) && refused.Status == http.StatusNotFound:
		return nil
	}
	return s.fail("remove port "+name, err)
}

// addRoute routes prefix to the named port.
func (s *switchAPI) addRoute(ctx context.Context, prefix netip.Prefix, port string) error {
	rt := control.Route{Prefix: prefix.String(), Port: port}
	if err := s.client.Post(ctx, "/v1/routes", rt, &rt); err != nil {
		return s.fail("add route "+prefix.String()+" to port "+port, err)
	}
	return nil
}

// ports lists the switch's ports; its error is the client's, which
// fail turns into a CNI error.
func (s *switchAPI) ports(ctx context.Context) ([]control.Port, error) {
	var ps []control.Port
	err := s.client.Get(ctx, "/v1/ports", &ps)
	return ps, err
}

func (s *switchAPI) routes(ctx context.Context) ([]control.Route, error) {
	var rs []control.Route
	if err := s.client.Get(ctx, "/v1/routes", &rs); err != nil {
		return nil, s.fail("list routes", err)
	}
	return rs, nil
}

// fail turns an error of the control API into a CNI error with the code
// a runtime acts on: 11 (try again later) while the switch is not there
// or busy, 7 (invalid network configuration) for a mode the switch does
// not run, and 999 for the rest, each with what to do about it.
func (s *switchAPI) fail(what string, err error) *types.Error {
	var refused *control.RefusedError
	var opErr *net.OpError
	switch {
	case errors.Is(err, control.ErrNoSwitch):
		return types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("no softnet switch is running on %s: start `softnet switch --control %s` (in Kubernetes, the softnet DaemonSet) or fix \"socket\" in the network configuration", s.socket, s.socket),
			what+": "+err.Error())
	case errors.Is(err, os.ErrPermission):
		return types.NewError(types.ErrPluginNotAvailable,
			fmt.Sprintf("no permission to use the switch's socket %s: run the plugin as root or as a member of the switch's --control-group", s.socket),
			what+": "+err.Error())
	case errors.As(err, &refused) && refused.Status == http.StatusServiceUnavailable:
		return types.NewError(types.ErrTryAgainLater, "the switch at "+s.socket+" is busy: try again", what+": "+refused.Message)
	case errors.As(err, &refused) && (refused.Status == http.StatusConflict && strings.Contains(refused.Message, "needs a restart") ||
		refused.Status == http.StatusBadRequest && strings.Contains(refused.Message, "mixing tun and ")):
		return types.NewError(types.ErrInvalidNetworkConfig,
			`invalid network configuration: "mode" is not the kind of port the switch at `+s.socket+` runs: set "mode" to the kind of its ports, `+podModes(),
			what+": "+refused.Message)
	case errors.As(err, &refused):
		return types.NewError(types.ErrInternal, "the switch at "+s.socket+" refused to "+what+": "+refused.Message, "")
	case errors.As(err, &opErr) && opErr.Timeout(), errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.EAGAIN):
		return types.NewError(types.ErrTryAgainLater, "the switch at "+s.socket+" did not answer in time: try again", what+": "+err.Error())
	}
	return types.NewError(types.ErrInternal, "cannot "+what+" on the switch at "+s.socket, err.Error())
}
