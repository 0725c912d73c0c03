package tun

import (
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"softnet.dev/packet"
)

// ifFlags are the TUNGETIFF flags a Device depends on.
const ifFlags = unix.IFF_TUN | unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE

// FromFiles runs a device over files already attached to it, one per
// queue: /dev/net/tun files after TUNSETIFF, as a privileged helper, a
// container runtime or a VM manager hands them over. The name, TUN or
// TAP, the vnet header and multi-queue come from the files (TUNGETIFF);
// all must belong to one device, opened with IFF_NO_PI, and more than
// one needs IFF_MULTI_QUEUE. Files with a vnet header get every offload
// vnet handles (TUNSETVNETHDRSZ, TUNSETOFFLOAD), files without one have
// offloads turned off. The files are switched to non-blocking mode.
//
// The device is neither created nor removed, set up nor down: it is used
// as it is. From a successful call on, the Device owns the files and its
// Close closes them; if FromFiles fails, they stay the caller's.
func FromFiles(cfg FileConfig, files ...*os.File) (*Device, error) {
	d, err := fromFiles(cfg, files)
	if err != nil {
		if d != nil && d.info.Name != "" {
			return nil, fmt.Errorf("tun %s: %w", d.info.Name, err)
		}
		return nil, fmt.Errorf("tun: %w", err)
	}
	return d, nil
}

func fromFiles(cfg FileConfig, files []*os.File) (*Device, error) {
	d := &Device{bulk: true, wake: -1, io: IOSyscall}
	if len(files) == 0 || len(files) > MaxQueues {
		return d, fmt.Errorf("FromFiles: %d files, want 1 to %d", len(files), MaxQueues)
	}
	var flags uint16
	fds := make([]int, len(files))
	for i, f := range files {
		fd, name, fl, err := attached(f)
		if err != nil {
			return d, fmt.Errorf("file %d: %w", i, err)
		}
		switch {
		case i == 0:
			d.info.Name, d.dev, flags = name, name, fl
		case name != d.info.Name:
			return d, fmt.Errorf("file %d is attached to %s, file 0 to %s", i, name, d.info.Name)
		case fl != flags:
			return d, fmt.Errorf("file %d has flags %#x, file 0 %#x", i, fl, flags)
		}
		fds[i] = fd
	}
	switch {
	case flags&unix.IFF_NO_PI == 0:
		return d, errors.New("opened without IFF_NO_PI: packet information headers are not supported")
	case len(files) > 1 && flags&unix.IFF_MULTI_QUEUE == 0:
		return d, fmt.Errorf("%d files without IFF_MULTI_QUEUE", len(files))
	}
	d.vnet = flags&unix.IFF_VNET_HDR != 0
	if err := cfg.check(d.vnet); err != nil {
		return d, err
	}
	d.gro, d.keepGSO = cfg.GRO, cfg.KeepGSO
	d.info.Layer, d.info.Queues = packet.L3, len(files)
	l2 := linkOverhead(flags&unix.IFF_TAP != 0)
	if flags&unix.IFF_TAP != 0 {
		d.info.Layer = packet.L2
	}
	switch {
	case d.vnet:
		d.info.MaxFrame = MaxMTU + l2
	case cfg.MTU != 0:
		d.info.MaxFrame = cfg.MTU + l2
	default:
		mtu, err := deviceMTU(fds[0], d.dev)
		if err != nil {
			return d, fmt.Errorf("look up MTU (or give FileConfig.MTU): %w", err)
		}
		d.info.MaxFrame = mtu + l2
	}
	for i, fd := range fds {
		if err := unix.SetNonblock(fd, true); err != nil {
			return d, fmt.Errorf("file %d: set non-blocking: %w", i, err)
		}
	}
	d.fds = fds
	if err := d.setOffloads(true); err != nil {
		return d, err
	}
	if err := d.start(); err != nil {
		return d, err
	}
	d.files = files
	return d, nil
}

// attached returns the descriptor of f and the device it is attached to.
// The descriptor is f's own, not a copy, so that closing f ends the
// device's use; Fd is avoided because it makes the file blocking.
func attached(f *os.File) (fd int, name string, flags uint16, err error) {
	if f == nil {
		return -1, "", 0, errors.New("nil file")
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, "", 0, err
	}
	fd = -1
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return -1, "", 0, err
	}
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return -1, "", 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		// ENOTTY or EINVAL for other files, EBADFD for a /dev/net/tun
		// file never attached.
		return -1, "", 0, fmt.Errorf("%s is not attached to a TUN/TAP device (TUNGETIFF: %w)", f.Name(), err)
	}
	return fd, ifr.Name(), ifr.Uint16() & ifFlags, nil
}

// deviceMTU looks up the MTU of the device fd is attached to, in the
// device's namespace, which need not be the caller's.
func deviceMTU(fd int, name string) (int, error) {
	nsfd, err := unix.IoctlRetInt(fd, unix.TUNGETDEVNETNS)
	if err != nil {
		return 0, fmt.Errorf("TUNGETDEVNETNS: %w", err)
	}
	ns := netns.NsHandle(nsfd)
	defer ns.Close()
	nl, err := netlink.NewHandleAt(ns)
	if err != nil {
		return 0, fmt.Errorf("netlink in the device's namespace: %w", err)
	}
	defer nl.Close()
	link, err := nl.LinkByName(name)
	if err != nil {
		return 0, err
	}
	return link.Attrs().MTU, nil
}
