package lab

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
	wgtun "golang.zx2c4.com/wireguard/tun"

	"softnet.dev/buffer"
	"softnet.dev/internal/cacheline"
	"softnet.dev/internal/netns"
	"softnet.dev/tun"
)

// batchDev is what the two-goroutine forwarder needs of a device: the
// blocking batch API of wireguard-go's tun.Device, which softnet's
// tun.Queue has too.
type batchDev interface {
	Read(bufs [][]byte, sizes []int, offset int) (int, error)
	Write(bufs [][]byte, offset int) (int, error)
	BatchSize() int
}

// fwdOffset is the room both tun packages need before each packet: the
// virtio-net header they read and write there.
const fwdOffset = 16

// batchPath is the forwarder a Go program built on a TUN package runs
// between two devices: one goroutine per direction, reading a batch
// (GSO packets split into segments) and writing it (segments of a flow
// coalesced again), with buffers of offset+64 KiB made once. Only the
// TUN package differs between the variants that use it.
type batchPath struct {
	name    string
	devs    [2]batchDev
	closers []func() error
	closing atomic.Bool
	wg      sync.WaitGroup
	// One counter pair per direction, each written by its own goroutine.
	dirs [2]struct {
		packets, bytes atomic.Uint64
		_              [cacheline.Size - 16]byte // keeps the directions off each other's cache lines
	}
}

// openBatchPath creates a TUN device (with tap, a TAP device: the
// forwarder then is a two-port hub, which is all a bridge between two
// ports needs to be) in each guest, the way the common Go TUN packages
// want it, hands each file to attach inside the guest's namespace (their
// sockets must be bound there) and starts forwarding.
func openBatchPath(p *guestPair, name string, tap bool, attach func(f *os.File) (batchDev, func() error, error)) (*batchPath, error) {
	b := &batchPath{name: name}
	for i, g := range p.guests() {
		err := netns.Do(g.ns, func() error {
			f, err := openVnetFile(g.dev, tap)
			if err != nil {
				return err
			}
			dev, closer, err := attach(f)
			if err != nil {
				f.Close()
				return err
			}
			b.devs[i] = dev
			b.closers = append(b.closers, closer)
			return nil
		})
		if err != nil {
			_ = b.closeDevs()
			return nil, fmt.Errorf("%s: %s in %s: %w", name, g.dev, g.ns, err)
		}
	}
	b.wg.Add(2)
	go b.forward(0, b.devs[0], b.devs[1])
	go b.forward(1, b.devs[1], b.devs[0])
	return b, nil
}

// openVnetFile opens /dev/net/tun with a virtio-net header, attached to
// a new device. The file goes to Go's poller only once it is attached
// (os.NewFile of a non-blocking descriptor): registered before TUNSETIFF,
// epoll would never hear of its packets.
func openVnetFile(name string, tap bool) (*os.File, error) {
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
	ifr.SetUint16(kind | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
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

// attachWireguardGo runs a device on wireguard-go's tun package, which
// enables its offloads itself (TUNSETOFFLOAD from the file's flags). Its
// status events are drained, as its listeners block on them otherwise;
// the drain ends when Close has stopped the listeners.
func attachWireguardGo(f *os.File) (batchDev, func() error, error) {
	dev, err := wgtun.CreateTUNFromFile(f, 1500)
	if err != nil {
		return nil, nil, err
	}
	drained := make(chan struct{})
	go func() {
		for range dev.Events() {
		}
		close(drained)
	}()
	return dev, func() error {
		err := dev.Close()
		<-drained
		return err
	}, nil
}

// attachSoftnetTUN runs a device on softnet's tun package, over the same
// file (FromFiles), through its blocking Queue API, with GRO on writes
// as wireguard-go has.
func attachSoftnetTUN(f *os.File) (batchDev, func() error, error) {
	d, err := tun.FromFiles(tun.FileConfig{GRO: true}, f)
	if err != nil {
		return nil, nil, err
	}
	return d.Queue(0), d.Close, nil
}

// forward moves batches from one device to the other until close.
// Errors before that are a packet lost (the next call tells whether the
// device still works), as the kernel would lose it.
func (b *batchPath) forward(dir int, from, to batchDev) {
	defer b.wg.Done()
	d := &b.dirs[dir]
	bufs := make([][]byte, from.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, fwdOffset+65535)
	}
	sizes := make([]int, len(bufs))
	pkts := make([][]byte, len(bufs))
	for !b.closing.Load() {
		n, err := from.Read(bufs, sizes, fwdOffset)
		if err != nil {
			continue
		}
		var bytes uint64
		for i := range n {
			pkts[i] = bufs[i][:fwdOffset+sizes[i]]
			bytes += uint64(sizes[i])
		}
		if _, err := to.Write(pkts[:n], fwdOffset); err != nil {
			continue
		}
		d.packets.Add(uint64(n))
		d.bytes.Add(bytes)
	}
}

func (b *batchPath) counters() (forwarded, bool) {
	var c forwarded
	for i := range b.dirs {
		c.packets += b.dirs[i].packets.Load()
		c.bytes += b.dirs[i].bytes.Load()
	}
	return c, true
}

func (b *batchPath) buffers() (buffer.Stats, bool) { return buffer.Stats{}, false }

// workerThreads is nil: the goroutines move between threads, so their CPU
// time is measured on the process.
func (b *batchPath) workerThreads() []int { return nil }
func (b *batchPath) poolBytes() int64     { return 0 }

// close closes both devices, which wakes the blocked reads and, as the
// devices are not persistent, removes them.
func (b *batchPath) close() (string, error) {
	b.closing.Store(true)
	err := b.closeDevs()
	b.wg.Wait()
	if err != nil {
		return "", fmt.Errorf("%s: %w", b.name, err)
	}
	return "", nil
}

func (b *batchPath) closeDevs() error {
	var errs []error
	for _, c := range b.closers {
		errs = append(errs, c())
	}
	b.closers = nil
	return errors.Join(errs...)
}
