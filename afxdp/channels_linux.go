package afxdp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rxQueues returns how many receive queues the interface uses now (its
// channels, as `ethtool -l` shows them): the queues a socket can bind
// to and frames arrive on. A driver without channels (ETHTOOL_GCHANNELS
// unsupported) is taken to have one.
func rxQueues(dev string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("ethtool socket: %w", err)
	}
	defer unix.Close(fd)
	ch := struct {
		cmd                                         uint32
		maxRx, maxTx, maxOther, maxCombined         uint32
		rxCount, txCount, otherCount, combinedCount uint32
	}{cmd: unix.ETHTOOL_GCHANNELS}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [16]byte
	}
	copy(ifr.name[:], dev)
	ifr.data = unsafe.Pointer(&ch)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		if e == unix.EOPNOTSUPP {
			return 1, nil
		}
		return 0, fmt.Errorf("%s: ETHTOOL_GCHANNELS: %w", dev, e)
	}
	return max(1, int(ch.rxCount), int(ch.combinedCount)), nil
}
