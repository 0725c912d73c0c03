package tun

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"softnet.dev/internal/netns"
)

// KernelStats are a link's own counters, as the kernel keeps them
// (rtnl_link_stats64, read through rtnetlink), seen from the device's
// side: for a TUN or TAP device the guest's namespace is the kernel side,
// so TX is what the guest sent toward softnet and RX what softnet wrote.
//
// TxDropped counts what the guest sent that never reached softnet: the
// device's queue (txqueuelen packets) was full because the queue's reader
// did not keep up. Softnet's own counters cannot see those packets.
type KernelStats struct {
	RxPackets uint64 `json:"rx_packets"`
	TxPackets uint64 `json:"tx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxDropped uint64 `json:"rx_dropped"`
	TxDropped uint64 `json:"tx_dropped"`
	RxErrors  uint64 `json:"rx_errors"`
	TxErrors  uint64 `json:"tx_errors"`
}

// Sub returns the counts since base, an earlier reading of the same link.
func (s KernelStats) Sub(base KernelStats) KernelStats {
	return KernelStats{
		RxPackets: s.RxPackets - base.RxPackets, TxPackets: s.TxPackets - base.TxPackets,
		RxBytes: s.RxBytes - base.RxBytes, TxBytes: s.TxBytes - base.TxBytes,
		RxDropped: s.RxDropped - base.RxDropped, TxDropped: s.TxDropped - base.TxDropped,
		RxErrors: s.RxErrors - base.RxErrors, TxErrors: s.TxErrors - base.TxErrors,
	}
}

// KernelStats returns the kernel's counters of the device. It costs one
// netlink round trip; it may be called from anywhere, while the device is
// open.
func (d *Device) KernelStats() (KernelStats, error) {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.nl == nil {
		return KernelStats{}, fmt.Errorf("tun %s: kernel stats: %w", d.info.Name, errClosed)
	}
	st, err := readKernelStats(d.nl, d.dev)
	if err != nil {
		return KernelStats{}, fmt.Errorf("tun %s: kernel stats: %w", d.info.Name, err)
	}
	return st, nil
}

// LinkCounters reads the kernel counters of any link by name, in a named
// network namespace: the same numbers Device.KernelStats gives, for links
// that are not a Device (a veth, or a device another process opened).
// Its methods must not be called concurrently.
type LinkCounters struct {
	nl   *netlink.Handle // bound to the namespace
	name string
}

// OpenLinkCounters opens a netlink socket in namespace ns ("" for the
// current one) to read link name's counters.
func OpenLinkCounters(ns, name string) (*LinkCounters, error) {
	var nl *netlink.Handle
	if err := netns.Do(ns, func() (err error) {
		nl, err = newNetlink()
		return err
	}); err != nil {
		return nil, fmt.Errorf("link %s counters: netlink: %w", name, err)
	}
	return &LinkCounters{nl: nl, name: name}, nil
}

// Read returns the link's counters.
func (c *LinkCounters) Read() (KernelStats, error) {
	st, err := readKernelStats(c.nl, c.name)
	if err != nil {
		return KernelStats{}, fmt.Errorf("link %s counters: %w", c.name, err)
	}
	return st, nil
}

// Close closes the netlink socket.
func (c *LinkCounters) Close() { c.nl.Close() }

func readKernelStats(nl *netlink.Handle, name string) (KernelStats, error) {
	link, err := nl.LinkByName(name)
	if err != nil {
		return KernelStats{}, err
	}
	s := link.Attrs().Statistics
	if s == nil {
		return KernelStats{}, errors.New("the kernel sent no statistics")
	}
	return KernelStats{
		RxPackets: s.RxPackets, TxPackets: s.TxPackets,
		RxBytes: s.RxBytes, TxBytes: s.TxBytes,
		RxDropped: s.RxDropped, TxDropped: s.TxDropped,
		RxErrors: s.RxErrors, TxErrors: s.TxErrors,
	}, nil
}
