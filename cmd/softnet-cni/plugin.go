package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"softnet.dev/internal/control"
)

// timeout bounds each command: the switch answers in milliseconds, IPAM
// plugins in about as much.
const timeout = 60 * time.Second

// ipam checks that the configuration's IPAM plugin is in CNI_PATH; code
// is the CNI error's if not: 7 (fix the configuration or install it),
// 50 for STATUS.
func ipam(conf *netConf, code uint) error {
	if _, err := invoke.FindInPath(conf.IPAM.Type, filepath.SplitList(os.Getenv("CNI_PATH"))); err != nil {
		return types.NewError(code,
			fmt.Sprintf("IPAM plugin %q is not in CNI_PATH=%s: install it there or fix \"ipam\" in the network configuration", conf.IPAM.Type, os.Getenv("CNI_PATH")),
			err.Error())
	}
	return nil
}

// ipamError names the IPAM plugin in its error, keeping its code.
func ipamError(conf *netConf, verb string, err error) error {
	var e *types.Error
	if errors.As(err, &e) {
		return types.NewError(e.Code, fmt.Sprintf("IPAM plugin %s %s: %s", conf.IPAM.Type, verb, e.Msg), e.Details)
	}
	return types.NewError(types.ErrInternal, fmt.Sprintf("IPAM plugin %s %s failed", conf.IPAM.Type, verb), err.Error())
}

func cmdAdd(args *skel.CmdArgs) (err error) {
	if err := checkIfName(args.IfName); err != nil {
		return err
	}
	pod, err := podOf(args.Args)
	if err != nil {
		return err
	}
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := ipam(conf, types.ErrInvalidNetworkConfig); err != nil {
		return err
	}
	p, err := openPod(args.Netns)
	if err != nil {
		return err
	}
	defer p.close()
	switch l, err := p.link(args.IfName); {
	case err != nil:
		return types.NewError(types.ErrInternal, "look up CNI_IFNAME="+args.IfName+" in "+args.Netns, err.Error())
	case l != nil:
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("CNI_IFNAME=%s: the namespace %s already has an interface of that name: choose another name, or DEL the attachment that made it", args.IfName, args.Netns), "")
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	sw := newSwitch(conf)
	name := portName(conf.Name, args.ContainerID, args.IfName)
	// Whatever fails from here leaves nothing behind: the veth, the port
	// (with its device, addresses and routes) and the lease go.
	if conf.Mode == vethMode {
		workers, err := sw.workers(ctx)
		if err != nil {
			return err
		}
		if err := p.addVeth(name, args.IfName, conf.MTU, workers); err != nil {
			return types.NewError(types.ErrInternal, "make the pod's veth", err.Error())
		}
		defer func() {
			if err != nil {
				if derr := delVeth(name); derr != nil {
					err = alsoFailed(err, "deleting the veth", derr)
				}
			}
		}()
	}
	if err := sw.addPort(ctx, conf.Mode, name, args.Netns, args.IfName, conf.RuntimeConfig.Bandwidth.options(), pod); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if rerr := sw.removePort(ctx, name); rerr != nil {
				err = alsoFailed(err, "removing the port", rerr)
			}
			if derr := invoke.DelegateDel(ctx, conf.IPAM.Type, conf.ipamStdin, nil); derr != nil {
				err = alsoFailed(err, "releasing the addresses", derr)
			}
		}
	}()
	r, err := invoke.DelegateAdd(ctx, conf.IPAM.Type, conf.ipamStdin, nil)
	if err != nil {
		return ipamError(conf, "ADD", err)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "IPAM plugin "+conf.IPAM.Type+" ADD: result cannot be converted", err.Error())
	}
	if len(res.IPs) == 0 {
		return types.NewError(types.ErrInvalidNetworkConfig, "invalid network configuration: IPAM plugin "+conf.IPAM.Type+" gave no address: give it a range", "")
	}
	res.Interfaces = []*current.Interface{{Name: args.IfName, Mtu: conf.MTU, Sandbox: args.Netns}}
	if conf.Mode == vethMode {
		res.Interfaces = append(res.Interfaces, &current.Interface{Name: name, Mtu: conf.MTU})
	}
	for _, ip := range res.IPs {
		ip.Interface = current.Int(0)
	}
	if err := p.configure(args.IfName, conf.MTU, !routedMode(conf.Mode), res); err != nil {
		return types.NewError(types.ErrInternal, "configure the container's interface", err.Error())
	}
	if routedMode(conf.Mode) {
		for _, ip := range res.IPs {
			if err := sw.addRoute(ctx, hostPrefix(ip), name); err != nil {
				return err
			}
		}
	}
	if !conf.DNS.IsEmpty() {
		res.DNS = conf.DNS
	}
	return types.PrintResult(res, conf.CNIVersion)
}

// alsoFailed adds to err, keeping its code, that undoing failed too.
func alsoFailed(err error, what string, undo error) error {
	e := &types.Error{Code: types.ErrInternal, Msg: err.Error()}
	errors.As(err, &e)
	details := strings.TrimSpace(e.Details + "; and " + what + " failed: " + undo.Error())
	return types.NewError(e.Code, e.Msg, strings.TrimPrefix(details, "; "))
}

// hostPrefix is ip's address as a host route.
func hostPrefix(ip *current.IPConfig) netip.Prefix {
	a, _ := netip.AddrFromSlice(ip.Address.IP)
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen())
}

// cmdDel removes the attachment's port, with its device and routes, and
// releases its addresses. A port the switch does not have, a namespace
// that is gone and a switch that is not running (its devices went with
// it) are not errors: DEL is idempotent.
func cmdDel(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	name := portName(conf.Name, args.ContainerID, args.IfName)
	perr := newSwitch(conf).removePort(ctx, name)
	if conf.Mode == vethMode && perr == nil {
		perr = delVeth(name)
	}
	// The spec wants IPAM's DEL whatever happened to the port.
	if err := ipam(conf, types.ErrInvalidNetworkConfig); err != nil {
		return err
	}
	if err := invoke.DelegateDel(ctx, conf.IPAM.Type, conf.ipamStdin, nil); err != nil {
		return ipamError(conf, "DEL", err)
	}
	return perr
}

// cmdCheck verifies that the port is on the switch with its device in
// the namespace, that the device has prevResult's addresses and routes,
// and, on a switch of TUN ports, that each address is routed to it.
func cmdCheck(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	if conf.PrevResult == nil {
		return invalidConf("CHECK needs prevResult: the result of this attachment's ADD")
	}
	prev, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "prevResult cannot be converted", err.Error())
	}
	if err := ipam(conf, types.ErrInvalidNetworkConfig); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := invoke.DelegateCheck(ctx, conf.IPAM.Type, conf.ipamStdin, nil); err != nil {
		return ipamError(conf, "CHECK", err)
	}
	failed := func(format string, a ...any) error {
		return types.NewError(types.ErrInternal, "CHECK: "+fmt.Sprintf(format, a...), "")
	}
	sw := newSwitch(conf)
	name := portName(conf.Name, args.ContainerID, args.IfName)
	ports, err := sw.ports(ctx)
	if err != nil {
		return sw.fail("list ports", err)
	}
	found := false
	for _, pt := range ports {
		if pt.Name != name {
			continue
		}
		found = true
		if conf.Mode == vethMode {
			if !vethPort(pt.Spec) {
				return failed("port %s is %s, not an afxdp port on the host end of %s's veth", name, pt.Spec, args.IfName)
			}
		} else if netns, dev, _ := devicePort(pt.Spec); netns != args.Netns || dev != args.IfName {
			return failed("port %s is %s, not the device %s in %s", name, pt.Spec, args.IfName, args.Netns)
		}
		if pt.Down {
			return failed("port %s is down: %s", name, pt.Error)
		}
	}
	if !found {
		return failed("the switch at %s has no port %s for this attachment", conf.Socket, name)
	}
	p, err := openPod(args.Netns)
	if err != nil {
		return err
	}
	defer p.close()
	if err := p.check(args.IfName, conf.Mode == vethMode, prev); err != nil {
		return failed("%v", err)
	}
	if routedMode(conf.Mode) {
		routes, err := sw.routes(ctx)
		if err != nil {
			return err
		}
		for _, ip := range prev.IPs {
			prefix := hostPrefix(ip).String()
			if !slices.ContainsFunc(routes, func(r control.Route) bool { return r.Prefix == prefix && r.Port == name }) {
				return failed("the switch does not route %s to port %s", prefix, name)
			}
		}
	}
	return nil
}

// cmdStatus reports whether an ADD can succeed: the switch answers and
// the IPAM plugin is there and ready.
func cmdStatus(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	sw := newSwitch(conf)
	if _, err := sw.ports(ctx); err != nil {
		e := sw.fail("list ports", err)
		return types.NewError(types.ErrPluginNotAvailable, e.Msg, e.Details)
	}
	if err := ipam(conf, types.ErrPluginNotAvailable); err != nil {
		return err
	}
	if err := invoke.DelegateStatus(ctx, conf.IPAM.Type, conf.ipamStdin, nil); err != nil {
		return ipamError(conf, "STATUS", err)
	}
	return nil
}

// cmdGC removes the network's ports whose attachments are not in
// cni.dev/valid-attachments and hands the list to the IPAM plugin. It
// goes on past errors and reports them all.
func cmdGC(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	valid := map[string]bool{}
	for _, a := range conf.ValidAttachments {
		valid[portName(conf.Name, a.ContainerID, a.IfName)] = true
	}
	var errs []error
	sw := newSwitch(conf)
	// Without a switch there are no ports to collect: they went with it.
	ports, err := sw.ports(ctx)
	if err != nil && !errors.Is(err, control.ErrNoSwitch) {
		errs = append(errs, sw.fail("list ports", err))
	}
	for _, pt := range ports {
		// Only ports the plugin made: its names, devices named apart or
		// veths' host ends.
		_, dev, _ := devicePort(pt.Spec)
		veth := vethPort(pt.Spec)
		if isNetworkPort(conf.Name, pt.Name) && (dev != "" || veth) && !valid[pt.Name] {
			err := sw.removePort(ctx, pt.Name)
			if err == nil && veth {
				err = delVeth(pt.Name)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := ipam(conf, types.ErrInvalidNetworkConfig); err != nil {
		errs = append(errs, err)
	} else if err := invoke.DelegateGC(ctx, conf.IPAM.Type, conf.ipamStdin, nil); err != nil {
		errs = append(errs, ipamError(conf, "GC", err))
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return types.NewError(types.ErrInternal, "GC: "+errors.Join(errs...).Error(), "")
}
