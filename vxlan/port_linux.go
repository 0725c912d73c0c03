package vxlan

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/netns"
	"softnet.dev/packet"
	"softnet.dev/port"
)

// MaxFrame is the largest inner frame a port takes for transmission
// whole or as a GSO packet to segment: what fits the outer UDP length.
const MaxFrame = 65535 - udpLen - HeaderLen - 40

// socketBuffer is the receive and send buffer each socket asks for:
// bursts of a few hundred datagrams, as the engine moves them.
const socketBuffer = 4 << 20

// Port is a VXLAN port: Ethernet frames in and out of UDP datagrams to
// and from its remotes, on one socket pair per queue in the underlay's
// namespace. It is an L2 port: a bridge sees one port, behind which the
// port keeps its own table of which remote each inner MAC is behind.
type Port struct {
	cfg  Config // its Remotes and Static as at Open: peers has them now
	info port.Info
	// peers are the remotes, the stations behind them, a routed port's
	// routes and the inner MTU (see peers).
	peers atomic.Pointer[peers]
	// setMu serializes SetRemotes and SetRoutes; vias are the routes
	// SetRoutes was given last.
	setMu sync.Mutex
	vias  []Route
	rx    []*rxQueue
	tx    []*txQueue
	// senders are the sending sockets, shared by the transmit queues;
	// a flow's hash picks one (senderOf).
	senders []sender
	// gso: the kernel takes UDP_SEGMENT (Linux 4.18 and later).
	gso bool

	closeMu sync.Mutex
	closed  atomic.Bool
}

var _ port.Port = (*Port)(nil)

// Open opens the port's sockets in cfg.NetNS: per queue, a UDP socket
// bound to cfg.Local that receives (with SO_REUSEPORT between the
// queues, so the kernel spreads the remotes' flows over them), with
// UDP_GRO; and for the port, up to maxSenders UDP sockets that only
// send, each bound to a source port of the configured range, so that
// each inner flow, by its hash, keeps one outer source port (RFC 7348
// section 5) while the kernel routes, fills in the outer IP header and
// the UDP checksum, fragments, and sends runs of equal datagrams handed
// over at once with UDP_SEGMENT.
func Open(cfg Config) (*Port, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	layer := packet.L2
	if cfg.L3 {
		layer = packet.L3
	}
	p := &Port{
		cfg:  cfg,
		info: port.Info{Name: cfg.Name, Layer: layer, Queues: cfg.Queues, MaxFrame: MaxFrame},
	}
	err := netns.Do(cfg.NetNS, func() error {
		p.peers.Store(newPeers(cfg, cfg.Remotes, cfg.Static, innerMTU(cfg, cfg.Remotes)))
		for range cfg.Queues {
			rfd, err := p.openUDP()
			if err != nil {
				return err
			}
			p.rx = append(p.rx, newRxQueue(p, rfd))
		}
		if err := p.openSenders(); err != nil {
			return err
		}
		for i := range cfg.Queues {
			p.tx = append(p.tx, newTxQueue(p, p.rx[i]))
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("vxlan %s: %w", cfg.Name, err), p.closeSockets())
	}
	return p, nil
}

func (p *Port) family() int { return p.cfg.family() }

// family is the underlay's address family, its local address's.
func (cfg Config) family() int {
	if cfg.Local.Addr().Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// innerMTU returns the largest inner IP packet the underlay (the
// namespace of the caller) carries without fragmenting the outer one,
// toward every one of remotes it has a route to: the kernel's path MTU
// (the route's, or its device's) less the outer IP, UDP and VXLAN
// headers and the inner Ethernet header. It returns 0 if no remote has
// a route.
func innerMTU(cfg Config, remotes []netip.Addr) int {
	overhead, level, opt := OverheadV4, unix.IPPROTO_IP, unix.IP_MTU
	if cfg.family() == unix.AF_INET6 {
		overhead, level, opt = OverheadV6, unix.IPPROTO_IPV6, unix.IPV6_MTU
	}
	least := 0
	for _, r := range remotes {
		fd, err := unix.Socket(cfg.family(), unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		if err != nil {
			continue
		}
		if unix.Connect(fd, sockaddr(r, cfg.Port)) == nil {
			if mtu, err := unix.GetsockoptInt(fd, level, opt); err == nil && (least == 0 || mtu < least) {
				least = mtu
			}
		}
		unix.Close(fd)
	}
	if least <= overhead {
		return 0
	}
	return least - overhead
}

// MTU returns the inner IP MTU the port found toward its remotes (when
// it opened, or SetRemotes): the largest IP packet a guest may send
// through it whole (0: unknown). Guests should be given it.
func (p *Port) MTU() int { return p.peers.Load().mtu }

// openUDP opens a receiving socket bound to the local address and port.
func (p *Port) openUDP() (int, error) {
	fd, err := unix.Socket(p.family(), unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("udp socket: %w", err)
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("udp socket %v: %s: %w", p.cfg.Local, what, err)
	}
	if p.family() == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return fail("IPV6_V6ONLY", err)
		}
	}
	// Only between the port's own queues: with one queue, another
	// program that binds the port gets EADDRINUSE rather than half of
	// the traffic.
	if p.cfg.Queues > 1 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return fail("SO_REUSEPORT", err)
		}
	}
	setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF)
	// Runs of datagrams of one flow arrive as one, with their segment
	// size; a kernel without UDP_GRO (before 5.0) hands them over one by
	// one, which the queue handles as well.
	_ = unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1)
	if err := unix.Bind(fd, sockaddr(p.cfg.Local.Addr(), p.cfg.Local.Port())); err != nil {
		if errors.Is(err, unix.EADDRINUSE) {
			err = fmt.Errorf("%w (a kernel vxlan device or another program on this port?)", err)
		}
		return fail("bind", err)
	}
	return fd, nil
}

// maxSenders bounds the sending sockets of a port, and so the outer
// source ports its flows spread over.
const maxSenders = 16

// sender is a sending socket and the source port it is bound to.
type sender struct {
	fd   int
	port uint16
}

// openSenders opens the sending sockets: up to maxSenders, each bound to
// a port of its own stripe of the source port range; a port in use (by
// another program, or another port on the same address) is skipped for
// the next of its stripe. It fails only if no port of the range could
// be bound.
func (p *Port) openSenders() error {
	lo, hi := int(p.cfg.SrcPortMin), int(p.cfg.SrcPortMax)
	span := hi - lo + 1
	n := min(maxSenders, span)
	var lastErr error
	for i := range n {
		first, end := lo+i*span/n, lo+(i+1)*span/n
		for port := first; port < end && port < first+64; port++ {
			fd, err := p.openSender(uint16(port))
			if err == nil {
				p.senders = append(p.senders, sender{fd: fd, port: uint16(port)})
				break
			}
			lastErr = err
			if !errors.Is(err, unix.EADDRINUSE) {
				return err
			}
		}
	}
	if len(p.senders) == 0 {
		return fmt.Errorf("no source port of %d-%d free: %w", lo, hi, lastErr)
	}
	p.gso = unix.SetsockoptInt(p.senders[0].fd, unix.SOL_UDP, unix.UDP_SEGMENT, 0) == nil
	return nil
}

// openSender opens a socket that sends UDP datagrams from the local
// address and port and receives none.
func (p *Port) openSender(port uint16) (int, error) {
	fd, err := unix.Socket(p.family(), unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("udp socket: %w", err)
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("sending udp socket %v: %s: %w", netip.AddrPortFrom(p.cfg.Local.Addr(), port), what, err)
	}
	if p.family() == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return fail("IPV6_V6ONLY", err)
		}
	}
	// Anyone may send to the port: the socket keeps nothing, and asks for
	// the least receive buffer.
	dropAll := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: 1, Filter: &dropAll[0]}); err != nil {
		return fail("drop filter", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 0)
	if p.family() == unix.AF_INET {
		// As the kernel's vxlan by default: no DF on the outer header, so
		// a frame too big for the underlay is fragmented, not lost.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DONT); err != nil {
			return fail("IP_MTU_DISCOVER", err)
		}
	}
	setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF)
	if err := unix.Bind(fd, sockaddr(p.cfg.Local.Addr(), port)); err != nil {
		return fail("bind", err)
	}
	return fd, nil
}

// senderOf returns the index of the sending socket of a flow's hash, of
// n sockets, with a multiplication instead of a division.
func senderOf(hash uint32, n int) int {
	return int(uint64(hash) * uint64(n) >> 32)
}

// setBuffer asks for socketBuffer bytes, past the system's limit if the
// process may (root), else up to it.
func setBuffer(fd, force, plain int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, socketBuffer) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, socketBuffer)
	}
}

func sockaddr(a netip.Addr, port uint16) unix.Sockaddr {
	if a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4(), Port: int(port)}
	}
	return &unix.SockaddrInet6{Addr: a.As16(), Port: int(port)}
}

// Info implements port.Port.
func (p *Port) Info() port.Info { return p.info }

// Config returns the port's configuration, defaults filled in.
func (p *Port) Config() Config {
	cfg, pe := p.cfg, p.peers.Load()
	cfg.Remotes, cfg.Static = slices.Clone(pe.remotes), slices.Clone(pe.static)
	return cfg
}

// RxQueue implements port.Port.
func (p *Port) RxQueue(i int) port.RxQueue {
	if i < 0 || i >= len(p.rx) {
		return nil
	}
	return p.rx[i]
}

// TxQueue implements port.Port.
func (p *Port) TxQueue(i int) port.TxQueue {
	if i < 0 || i >= len(p.tx) {
		return nil
	}
	return p.tx[i]
}

// CloseInto closes the sockets. A port holds no buffer between calls, so
// there is nothing to purge into c.
func (p *Port) CloseInto(c *buffer.Cache) error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed.Swap(true) {
		return nil
	}
	for _, q := range p.rx {
		if c != nil {
			c.DropBulk(q.pending, drop.QueuePurge)
		}
		clear(q.pending)
		q.pending = q.pending[:0]
		q.purge(c)
	}
	return p.closeSockets()
}

func (p *Port) closeSockets() error {
	var errs []error
	for _, q := range p.rx {
		errs = append(errs, unix.Close(q.fd))
	}
	for _, sd := range p.senders {
		errs = append(errs, unix.Close(sd.fd))
	}
	return errors.Join(errs...)
}

// Stats returns the port's counters, summed over its queues, and its
// learned stations.
func (p *Port) Stats() Stats {
	var qs []*counters
	for _, q := range p.rx {
		qs = append(qs, &q.ctr)
	}
	for _, q := range p.tx {
		qs = append(qs, &q.ctr)
	}
	s := statsOf(qs)
	f := p.peers.Load().fdb
	s.Stations = len(*f.table.Load())
	s.Learned, s.Moved, s.LearnFull, s.StationsAged = f.learned.Load(), f.moved.Load(), f.full.Load(), f.aged.Load()
	return s
}

// Table returns the static stations and the learned ones that have not
// aged out. It reads the tables the workers read, without a lock: a
// station learned while it reads may be missing.
func (p *Port) Table() []FDBEntry {
	now := clock()
	pe := p.peers.Load()
	var out []FDBEntry
	for mac, r := range pe.fdb.static {
		out = append(out, FDBEntry{MAC: mac, Remote: pe.remotes[r].String(), Static: true})
	}
	for mac, e := range *pe.fdb.table.Load() {
		if now-e.seen.Load() <= pe.fdb.ageing {
			out = append(out, FDBEntry{MAC: mac, Remote: pe.remotes[e.remote].String(), Age: time.Duration(max(now-e.seen.Load(), 0))})
		}
	}
	slices.SortFunc(out, func(a, b FDBEntry) int { return slices.Compare(a.MAC[:], b.MAC[:]) })
	return out
}

// route is a routed port's route: the remote's index and VTEP MAC.
type route struct {
	prefix netip.Prefix
	remote int32
	mac    [6]byte
}

// SetRoutes replaces a routed port's routes: packets to each prefix go
// to the remote Via, whose VTEP MAC is its static entry. It refuses, and
// changes nothing, if a Via is not a remote with one, or the port is not
// routed. Packets to no prefix are dropped as NO_ROUTE.
func (p *Port) SetRoutes(rs []Route) error {
	if !p.cfg.L3 {
		return fmt.Errorf("vxlan %s: routes are for a routed (L3) port", p.cfg.Name)
	}
	p.setMu.Lock()
	defer p.setMu.Unlock()
	next := *p.peers.Load()
	var err error
	if next.routes, err = next.resolve(p.cfg.Name, rs); err != nil {
		return err
	}
	p.vias = slices.Clone(rs)
	p.peers.Store(&next)
	return nil
}

// Age forgets the stations that aged out (lookups ignore them already;
// this gives back their room in the table).
func (p *Port) Age() { p.peers.Load().fdb.age(clock()) }

func (p *Port) downError(op string) error {
	return fmt.Errorf("vxlan %s: %s: %w: closed", p.cfg.Name, op, port.ErrDown)
}
