package netnstest

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// Inject writes each packet, as it is, out of the namespace's device dev
// through an AF_PACKET socket: whole Ethernet frames on a TAP device
// (frames), IP packets (IPv4 or IPv6 by their version) on a TUN device.
// That is how a guest with CAP_NET_RAW forges what its stack would never
// send.
func (n *NS) Inject(t testing.TB, dev string, frames bool, pkts ...[]byte) {
	t.Helper()
	if err := n.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		kind := unix.SOCK_DGRAM
		if frames {
			kind = unix.SOCK_RAW
		}
		fd, err := unix.Socket(unix.AF_PACKET, kind|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, p := range pkts {
			proto := uint16(unix.ETH_P_IP)
			switch {
			case frames && len(p) >= 14:
				proto = binary.BigEndian.Uint16(p[12:14])
			case !frames && len(p) > 0 && p[0]>>4 == 6:
				proto = unix.ETH_P_IPV6
			}
			to := &unix.SockaddrLinklayer{Ifindex: ifi.Index, Protocol: proto<<8 | proto>>8}
			if err := unix.Sendto(fd, p, 0, to); err != nil {
				return fmt.Errorf("send %d bytes: %w", len(p), err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("%s: inject on %s: %v", n.Name, dev, err)
	}
}
