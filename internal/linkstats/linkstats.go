// Package linkstats reads a link's own kernel counters
// (rtnl_link_stats64) through rtnetlink, by name and in a network
// namespace: the numbers tun.Device.KernelStats gives for its device,
// for links softnet does not hold (the lab's veth guests, a device
// another process opened).
package linkstats

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"softnet.dev/internal/netns"
)

// Read returns the counters of link name through nl, a handle bound to
// the link's namespace.
func Read(nl *netlink.Handle, name string) (*netlink.LinkStatistics, error) {
	link, err := nl.LinkByName(name)
	if err != nil {
		return nil, err
	}
	s := link.Attrs().Statistics
	if s == nil {
		return nil, errors.New("the kernel sent no statistics")
	}
	return s, nil
}

// Reader reads one link's counters. Its methods must not be called
// concurrently.
type Reader struct {
	nl   *netlink.Handle // bound to the namespace
	name string
}

// Open opens a netlink socket in namespace ns ("" for the current one)
// to read link name's counters.
func Open(ns, name string) (*Reader, error) {
	var nl *netlink.Handle
	if err := netns.Do(ns, func() (err error) {
		nl, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	}); err != nil {
		return nil, fmt.Errorf("link %s counters: netlink: %w", name, err)
	}
	return &Reader{nl: nl, name: name}, nil
}

// Read returns the link's counters.
func (r *Reader) Read() (*netlink.LinkStatistics, error) {
	st, err := Read(r.nl, r.name)
	if err != nil {
		return nil, fmt.Errorf("link %s counters: %w", r.name, err)
	}
	return st, nil
}

// Close closes the netlink socket.
func (r *Reader) Close() { r.nl.Close() }
