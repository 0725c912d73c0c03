package lab

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"softnet.dev/buffer"
	"softnet.dev/internal/cacheline"
	"softnet.dev/internal/netns"
)

// naivePath is the forwarder a Go programmer writes by hand between two
// TUN devices, kept that way on purpose as the lab's lower reference: no
// vnet header (so no offloads: the kernel segments TCP and checksums
// before the device), one goroutine per direction doing a blocking Read
// and Write on an *os.File, and a new 64 KiB slice for every packet.
type naivePath struct {
	files [2]*os.File
	wg    sync.WaitGroup
	// One counter pair per direction, each written by its own goroutine.
	dirs [2]struct {
		packets, bytes atomic.Uint64
		_              [cacheline.Size - 16]byte // keeps the directions off each other's cache lines
	}
}

// openNaive creates a TUN device (with tap, a TAP device: the forwarder
// then is a two-port hub, which is all a bridge between two ports needs
// to be) in each guest and starts forwarding.
func openNaive(p *guestPair, tap bool) (*naivePath, error) {
	n := &naivePath{}
	for i, g := range p.guests() {
		err := netns.Do(g.ns, func() error {
			f, err := openPlainTUN(g.dev, tap)
			n.files[i] = f
			return err
		})
		if err != nil {
			n.closeFiles()
			return nil, fmt.Errorf("naive-go: %s in %s: %w", g.dev, g.ns, err)
		}
	}
	n.wg.Add(2)
	go n.forward(0, n.files[0], n.files[1])
	go n.forward(1, n.files[1], n.files[0])
	return n, nil
}

// openPlainTUN opens a TUN device the way the common Go TUN libraries
// do. The file goes to Go's poller only once it is attached to the
// device (os.NewFile of a non-blocking descriptor): registered before
// TUNSETIFF, epoll would never hear of its packets.
func openPlainTUN(name string, tap bool) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	kind := uint16(unix.IFF_TUN)
	if tap {
		kind = unix.IFF_TAP
	}
	ifr.SetUint16(kind | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}

// forward copies packets from one device to the other until its file is
// closed. The slice does not escape and is under 64 KiB, so the compiler
// puts it on the goroutine's stack rather than the heap: no allocation
// shows in allocs/packet, but every packet pays for zeroing 64 KiB.
func (n *naivePath) forward(dir int, from, to *os.File) {
	defer n.wg.Done()
	d := &n.dirs[dir]
	for {
		buf := make([]byte, 65535)
		k, err := from.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			continue // a transient error: the next read tells
		}
		if _, err := to.Write(buf[:k]); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			continue // dropped, as the kernel would
		}
		d.packets.Add(1)
		d.bytes.Add(uint64(k))
	}
}

func (n *naivePath) counters() (forwarded, bool) {
	var c forwarded
	for i := range n.dirs {
		c.packets += n.dirs[i].packets.Load()
		c.bytes += n.dirs[i].bytes.Load()
	}
	return c, true
}

func (n *naivePath) buffers() (buffer.Stats, bool) { return buffer.Stats{}, false }

// workerThreads is nil: the goroutines move between threads, so their CPU
// time is measured on the process.
func (n *naivePath) workerThreads() []int { return nil }
func (n *naivePath) poolBytes() int64     { return 0 }

// close closes both files, which wakes the blocked reads and, as the
// devices are not persistent, removes them.
func (n *naivePath) close() (string, error) {
	err := n.closeFiles()
	n.wg.Wait()
	return "", err
}

func (n *naivePath) closeFiles() error {
	var errs []error
	for i, f := range n.files {
		if f != nil {
			if err := f.Close(); err != nil {
				errs = append(errs, err)
			}
			n.files[i] = nil
		}
	}
	return errors.Join(errs...)
}
