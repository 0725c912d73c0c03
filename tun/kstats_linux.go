package tun

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"softnet.dev/internal/linkstats"
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

func readKernelStats(nl *netlink.Handle, name string) (KernelStats, error) {
	s, err := linkstats.Read(nl, name)
	if err != nil {
		return KernelStats{}, err
	}
	return KernelStats{
		RxPackets: s.RxPackets, TxPackets: s.TxPackets,
		RxBytes: s.RxBytes, TxBytes: s.TxBytes,
		RxDropped: s.RxDropped, TxDropped: s.TxDropped,
		RxErrors: s.RxErrors, TxErrors: s.TxErrors,
	}, nil
}
