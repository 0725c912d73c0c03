package tun

import (
	"errors"

	"golang.org/x/sys/unix"
	"softnet.dev/port"
	"softnet.dev/vnet"
)

// TUNSETOFFLOAD bits (linux/if_tun.h). They say what the reader of the
// device can take: packets with a partial checksum (CSUM) and unsegmented
// TCP and UDP super-packets.
const (
	tunFCsum   = 0x01
	tunFTSO4   = 0x02
	tunFTSO6   = 0x04
	tunFTSOECN = 0x08
	tunFUSO4   = 0x20
	tunFUSO6   = 0x40

	tunFAll = tunFCsum | tunFTSO4 | tunFTSO6 | tunFTSOECN | tunFUSO4 | tunFUSO6
	tunFUSO = tunFUSO4 | tunFUSO6
)

const devNetTun = "/dev/net/tun"

// openQueue opens /dev/net/tun and attaches it to the device name with
// TUNSETIFF, creating the device if it does not exist. It must run in the
// device's namespace: the file is bound to the namespace it is opened in.
func openQueue(name string, flags uint16) (int, error) {
	fd, err := unix.Open(devNetTun, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		ifr.SetUint16(flags)
		err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// setVnetHdrSize pins the header size to vnet.HeaderLen: an existing
// device may have been set to another (12 with mergeable buffers).
func setVnetHdrSize(fd int) error {
	return unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnet.HeaderLen)
}

// setOffload asks for every offload vnet can handle. Kernels before 6.2
// know no USO and refuse the whole request with EINVAL; then it asks again
// without USO. It returns what the kernel accepted.
func setOffload(fd int) (port.Offloads, error) {
	bits := tunFAll
	err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, bits)
	if errors.Is(err, unix.EINVAL) {
		bits &^= tunFUSO
		err = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, bits)
	}
	if err != nil {
		return 0, err
	}
	return offloadsOf(bits), nil
}

// clearOffload turns offloads off, for a device read without a vnet
// header: it could not tell us that a packet needs segmenting.
func clearOffload(fd int) error {
	return unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, 0)
}

func offloadsOf(bits int) port.Offloads {
	var o port.Offloads
	for _, m := range [...]struct {
		bit int
		o   port.Offloads
	}{
		{tunFCsum, port.OffloadCsum},
		{tunFTSO4, port.OffloadTSO4},
		{tunFTSO6, port.OffloadTSO6},
		{tunFTSOECN, port.OffloadTSOECN},
		{tunFUSO4, port.OffloadUSO4},
		{tunFUSO6, port.OffloadUSO6},
	} {
		if bits&m.bit != 0 {
			o |= m.o
		}
	}
	return o
}
