package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// vethMode is the mode whose pod interface is one end of a veth pair
// the plugin makes, the other end, in the plugin's (and the switch's)
// namespace and named as the port, an afxdp port of the switch. It is
// bridged, as tap is.
const vethMode = "veth"

// vethKind is the kind of the switch's port on a veth's host end.
const vethKind = "afxdp"

// addVeth makes the veth pair: host in the calling process's namespace,
// ifname in the pod's, each with queues queues (an AF_XDP socket per
// queue, one per worker of the switch: a pod sending on a queue without
// one would lose its frames), MTU mtu and up.
func (p *pod) addVeth(host, ifname string, mtu, queues int) error {
	ns, err := netns.GetFromPath(p.path)
	if err != nil {
		return fmt.Errorf("veth %s: the pod's namespace %s: %w", host, p.path, err)
	}
	defer ns.Close()
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU, la.NumTxQueues, la.NumRxQueues = host, mtu, queues, queues
	v := &netlink.Veth{LinkAttrs: la, PeerName: ifname, PeerNamespace: netlink.NsFd(ns),
		PeerNumTxQueues: uint32(queues), PeerNumRxQueues: uint32(queues), PeerMTU: uint32(mtu)}
	if err := netlink.LinkAdd(v); err != nil {
		return fmt.Errorf("veth %s (%s in %s): add: %w", host, ifname, p.path, err)
	}
	if err := netlink.LinkSetUp(v); err != nil {
		return errors.Join(fmt.Errorf("veth %s: set up: %w", host, err), delVeth(host))
	}
	peer, err := p.nl.LinkByName(ifname)
	if err == nil {
		err = p.nl.LinkSetUp(peer)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("veth %s: %s in %s: set up: %w", host, ifname, p.path, err), delVeth(host))
	}
	return nil
}

// delVeth deletes the veth pair whose host end is host; one that is not
// there (its pod's namespace went, and the pair with it) is no error.
func delVeth(host string) error {
	l, err := netlink.LinkByName(host)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return nil
	case err != nil:
		return fmt.Errorf("veth %s: %w", host, err)
	case l.Type() != "veth":
		// Not the plugin's: a port name is the plugin's, but an
		// interface of that name someone else made is left alone.
		return nil
	}
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("veth %s: delete: %w", host, err)
	}
	return nil
}

// workers asks the switch how many workers it has: each needs a queue
// of every port.
func (s *switchAPI) workers(ctx context.Context) (int, error) {
	var st struct {
		Workers []json.RawMessage `json:"workers"`
	}
	if err := s.client.Get(ctx, "/v1/stats", &st); err != nil {
		return 0, s.fail("read the switch's workers", err)
	}
	if len(st.Workers) == 0 {
		return 0, types.NewError(types.ErrInternal, "the switch at "+s.socket+" reports no workers", "")
	}
	return len(st.Workers), nil
}
