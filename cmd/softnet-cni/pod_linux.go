package main

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// pod is the container's network namespace, reached through a netlink
// socket opened in it: no thread of the plugin changes namespace.
type pod struct {
	path string
	nl   *netlink.Handle
}

// openPod opens the network namespace at path (CNI_NETNS). Its errors
// are CNI errors that name the variable.
func openPod(path string) (*pod, error) {
	bad := func(why string) error {
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("CNI_NETNS=%s: %s; want the path of the container's network namespace (/proc/PID/ns/net, /var/run/netns/NAME)", path, why), "")
	}
	// The switch takes the path in a port spec, whose options are
	// separated by commas.
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || strings.ContainsAny(path, ",\x00") {
		return nil, bad("not a clean absolute path without commas")
	}
	h, err := netns.GetFromPath(path)
	if err != nil {
		return nil, bad(err.Error())
	}
	defer h.Close()
	kind, err := unix.IoctlRetInt(int(h), unix.NS_GET_NSTYPE)
	if err != nil || kind != unix.CLONE_NEWNET {
		return nil, bad("not a network namespace")
	}
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, types.NewError(types.ErrInternal, "netlink in "+path, err.Error())
	}
	return &pod{path: path, nl: nl}, nil
}

func (p *pod) close() { p.nl.Close() }

// link returns the named device, or nil if there is none.
func (p *pod) link(name string) (netlink.Link, error) {
	l, err := p.nl.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil, nil
	}
	return l, err
}

// configure gives the device its MTU, the result's addresses and routes
// (adding a default route per address family that has none: on a routed
// port's device through the device, on a bridged port's through the
// family's gateway, if IPAM gave one) and completes the result's
// interface (a bridged port's device has a MAC).
func (p *pod) configure(ifname string, mtu int, bridged bool, res *current.Result) error {
	link, err := p.nl.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", ifname, p.path, err)
	}
	if err := p.nl.LinkSetMTU(link, mtu); err != nil {
		return fmt.Errorf("%s in %s: set MTU %d: %w", ifname, p.path, mtu, err)
	}
	if bridged {
		res.Interfaces[0].Mac = link.Attrs().HardwareAddr.String()
	}
	for _, ip := range res.IPs {
		addr := &netlink.Addr{IPNet: &ip.Address}
		if ip.Address.IP.To4() == nil {
			addr.Flags = unix.IFA_F_NODAD // the switch owns the link: nothing to detect
		}
		if err := p.nl.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("%s in %s: add address %s: %w", ifname, p.path, ip.Address.String(), err)
		}
	}
	for _, fam := range []struct {
		v4  bool
		dst string
	}{{true, "0.0.0.0/0"}, {false, "::/0"}} {
		var gw net.IP
		has := false
		for _, ip := range res.IPs {
			if (ip.Address.IP.To4() != nil) == fam.v4 {
				has = true
				if gw == nil {
					gw = ip.Gateway
				}
			}
		}
		if !has || hasDefault(res.Routes, fam.v4) || bridged && gw == nil {
			continue
		}
		_, dst, _ := net.ParseCIDR(fam.dst)
		rt := &types.Route{Dst: *dst}
		if bridged {
			rt.GW = gw
		}
		res.Routes = append(res.Routes, rt)
	}
	for _, rt := range res.Routes {
		r := routeOf(link.Attrs().Index, rt)
		if err := p.nl.RouteAdd(r); err != nil {
			return fmt.Errorf("%s in %s: add route %s: %w", ifname, p.path, routeString(rt), err)
		}
	}
	return nil
}

func hasDefault(routes []*types.Route, v4 bool) bool {
	for _, rt := range routes {
		ones, _ := rt.Dst.Mask.Size()
		if ones == 0 && (rt.Dst.IP.To4() != nil) == v4 {
			return true
		}
	}
	return false
}

func routeOf(index int, rt *types.Route) *netlink.Route {
	dst := rt.Dst
	r := &netlink.Route{LinkIndex: index, Dst: &dst, Gw: rt.GW, MTU: rt.MTU, AdvMSS: rt.AdvMSS, Priority: rt.Priority}
	if rt.GW == nil {
		r.Scope = netlink.SCOPE_LINK
	}
	if rt.Table != nil {
		r.Table = *rt.Table
	}
	if rt.Scope != nil {
		r.Scope = netlink.Scope(*rt.Scope)
	}
	return r
}

// check verifies that the device (a veth's end, or the switch's TUN or
// TAP device), its addresses and its routes are as prev says.
func (p *pod) check(ifname string, veth bool, prev *current.Result) error {
	link, err := p.link(ifname)
	switch {
	case err != nil:
		return fmt.Errorf("%s in %s: %w", ifname, p.path, err)
	case link == nil:
		return fmt.Errorf("%s: no such device in %s", ifname, p.path)
	case veth && link.Type() != "veth":
		return fmt.Errorf("%s in %s: a %s device, not the plugin's veth", ifname, p.path, link.Type())
	case !veth && link.Type() != "tuntap":
		return fmt.Errorf("%s in %s: a %s device, not the switch's TUN/TAP device", ifname, p.path, link.Type())
	case link.Attrs().Flags&net.FlagUp == 0:
		return fmt.Errorf("%s in %s: down", ifname, p.path)
	}
	addrs, err := p.nl.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("%s in %s: list addresses: %w", ifname, p.path, err)
	}
	for _, ip := range prev.IPs {
		found := false
		for _, a := range addrs {
			found = found || a.IPNet.String() == ip.Address.String()
		}
		if !found {
			return fmt.Errorf("%s in %s: address %s is missing", ifname, p.path, ip.Address.String())
		}
	}
	routes, err := p.nl.RouteList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("%s in %s: list routes: %w", ifname, p.path, err)
	}
	for _, want := range prev.Routes {
		if !slices.ContainsFunc(routes, func(r netlink.Route) bool { return sameRoute(r, want) }) {
			return fmt.Errorf("%s in %s: route %s is missing", ifname, p.path, routeString(want))
		}
	}
	return nil
}

func routeString(rt *types.Route) string {
	if rt.GW == nil {
		return rt.Dst.String()
	}
	return rt.Dst.String() + " via " + rt.GW.String()
}

// sameRoute says whether the kernel's route r is want.
func sameRoute(r netlink.Route, want *types.Route) bool {
	if !r.Gw.Equal(want.GW) {
		return false
	}
	if r.Dst == nil { // a default route, as some kernels and netlink versions report it
		ones, _ := want.Dst.Mask.Size()
		return ones == 0 && (r.Family == netlink.FAMILY_V4) == (want.Dst.IP.To4() != nil)
	}
	return r.Dst.String() == want.Dst.String()
}
