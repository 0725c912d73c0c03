//go:build linux

package vhostuser

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/counter"
	"softnet.dev/internal/unixsock"
	"softnet.dev/packet"
	"softnet.dev/port"
)

// Port is a vhost-user back-end for one virtio-net device: a port.Port
// with an L2 queue pair per virtqueue pair.
type Port struct {
	cfg   Config
	info  port.Info
	log   *slog.Logger
	ln    *unixsock.Listener // nil in client mode
	stop  chan struct{}      // closed by Close
	rings []*vring           // 2 per queue pair: even toward the guest, odd from it
	rxqs  []*rxQueue
	txqs  []*txQueue
	wg    sync.WaitGroup

	// Control-plane state, owned by the serving goroutine; mu guards
	// conn and mem for Close and Stats.
	mu        sync.Mutex
	conn      *net.UnixConn
	mem       *memTable
	features  uint64 // acknowledged by the front-end
	protocol  uint64
	closed    atomic.Bool
	connected atomic.Bool
	connects  atomic.Uint64
	// refused counts the control plane's refusals; the workers count
	// theirs in their queues' counters.
	refused [RefusedMemoryFault + 1]atomic.Uint64
	running atomic.Int32 // rings running
	// memFault: guest memory faulted under the control plane, whose
	// session with the front-end ends.
	memFault bool
	// negotiated is features, for Stats.
	negotiated atomic.Uint64
}

var _ port.Port = (*Port)(nil)

// Listen creates the port's socket and serves front-ends on it, one at a
// time: when one goes away (a VM stops or reboots), the rings stop, the
// guest's memory is unmapped and the next front-end may connect. With
// Config.Client it connects to the front-end's socket instead, and
// connects again whenever the front-end goes away.
func Listen(cfg Config) (*Port, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil, fmt.Errorf("vhost-user %s: virtio 1.x rings are little-endian, and this host is not", cfg.Name)
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	p := &Port{cfg: cfg, log: cfg.Log}
	if p.log == nil {
		p.log = slog.Default()
	}
	p.log = p.log.With("port", cfg.Name)
	p.info = port.Info{Name: cfg.Name, Layer: packet.L2, Queues: cfg.Queues, MaxFrame: maxFrame}
	for i := range 2 * cfg.Queues {
		p.rings = append(p.rings, &vring{index: i, kickFD: -1, calls: calls{fd: -1}})
	}
	if err := p.openCalls(); err != nil {
		return nil, fmt.Errorf("vhost-user %s: %w", cfg.Name, err)
	}
	for i := range cfg.Queues {
		rq, err := newRxQueue(p, p.rings[2*i+1])
		if err != nil {
			p.closeQueues()
			return nil, fmt.Errorf("vhost-user %s: %w", cfg.Name, err)
		}
		p.rxqs = append(p.rxqs, rq)
		p.txqs = append(p.txqs, newTxQueue(p, p.rings[2*i]))
	}
	p.stop = make(chan struct{})
	if cfg.Client {
		p.wg.Add(1)
		go p.serve()
		return p, nil
	}
	perm := unixsock.Perm{UID: -1, GID: -1, Mode: 0o600}
	if cfg.Perm != nil {
		perm = unixsock.Perm{UID: cfg.Perm.UID, GID: cfg.Perm.GID, Mode: cfg.Perm.mode()}
	}
	// A socket file that no one listens on was left by a switch that
	// was killed: it is replaced. One that answers is in use.
	ln, err := unixsock.Listen(cfg.Socket, perm)
	if errors.Is(err, unixsock.ErrInUse) {
		err = errors.New("in use by another back-end")
	}
	if err != nil {
		p.closeQueues()
		return nil, fmt.Errorf("vhost-user %s: socket %s: %w", cfg.Name, cfg.Socket, err)
	}
	p.ln = ln
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *Port) closeQueues() {
	for _, q := range p.rxqs {
		q.close()
	}
	p.closeCalls()
}

// Info describes the port.
func (p *Port) Info() port.Info { return p.info }

// RxQueue returns queue pair i's queue from the guest.
func (p *Port) RxQueue(i int) port.RxQueue {
	if i < 0 || i >= len(p.rxqs) {
		return nil
	}
	return p.rxqs[i]
}

// TxQueue returns queue pair i's queue toward the guest.
func (p *Port) TxQueue(i int) port.TxQueue {
	if i < 0 || i >= len(p.txqs) {
		return nil
	}
	return p.txqs[i]
}

// Socket returns the socket's path.
func (p *Port) Socket() string { return p.cfg.Socket }

// Connected reports whether a front-end is connected.
func (p *Port) Connected() bool { return p.connected.Load() }

// CloseInto stops serving, disconnects the front-end and removes the socket
// (in server mode).
// The port holds no buffers between calls, so c is not used.
func (p *Port) CloseInto(c *buffer.Cache) error {
	if p.closed.Swap(true) {
		return nil
	}
	close(p.stop)
	var err error
	if p.ln != nil {
		err = p.ln.Close()
	}
	p.mu.Lock()
	if p.conn != nil {
		p.conn.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.closeQueues()
	if err != nil {
		return fmt.Errorf("vhost-user %s: close: %w", p.cfg.Name, err)
	}
	return nil
}

// Stats are a port's totals over its queues, as last published.
type Stats struct {
	RxPackets uint64      `json:"rx_packets"` // packets from the guest
	RxBytes   uint64      `json:"rx_bytes"`
	TxPackets uint64      `json:"tx_packets"` // packets to the guest; each segment counts
	TxBytes   uint64      `json:"tx_bytes"`
	RxDrops   drop.Counts `json:"rx_drops"`
	TxDrops   drop.Counts `json:"tx_drops"`
	// BadChains counts descriptor chains refused (outside the guest's
	// memory, looping, too long, bad flags or index); BrokenRings the
	// times a ring was given up until restarted, for an available index
	// more than a ring ahead, a bad receive chain or a fault in guest
	// memory. Refusals has both by reason.
	BadChains   uint64 `json:"bad_chains"`
	BrokenRings uint64 `json:"broken_rings"`
	Calls       uint64 `json:"calls"` // notifications the guest's call eventfd took
	// CallsFailed counts notifications the guest's call eventfd did not
	// take: not made while an earlier one waited for room in its
	// saturated counter (the guest has one pending then), or cancelled
	// when the front-end replaced the eventfd or went away.
	CallsFailed uint64 `json:"calls_failed"`
	// Polls counts the wakeups of a sleeping worker for entries on a
	// ring without a kick descriptor, which a timer polls.
	Polls     uint64 `json:"polls"`
	Segmented uint64 `json:"segmented"` // GSO packets segmented for a guest without TSO
	// Connects counts the front-ends that connected; Refused the
	// messages and descriptors refused (RefusedMalformed to
	// RefusedMemoryFault in Refusals).
	Connects uint64 `json:"connects"`
	Refused  uint64 `json:"refused"`
	// Refusals counts everything refused of the front-end and the
	// guest, by reason.
	Refusals  Refusals `json:"refusals"`
	Connected bool     `json:"connected"`
	// RunningRings counts the virtqueues running now: two per queue
	// pair the front-end started.
	RunningRings int `json:"running_rings"`
	// Features are the virtio feature bits the front-end acknowledged
	// (of those offered), 0 without one.
	Features uint64 `json:"features"`
}

// Stats sums the queues' published counters.
func (p *Port) Stats() Stats {
	sum := make([]uint64, counter.Len(numOwn))
	for _, q := range p.rxqs {
		q.ctr.AddTo(sum)
	}
	for _, q := range p.txqs {
		q.ctr.AddTo(sum)
	}
	s := Stats{
		RxPackets: sum[cRxPackets], RxBytes: sum[cRxBytes],
		TxPackets: sum[cTxPackets], TxBytes: sum[cTxBytes],
		Calls: sum[cCalls], CallsFailed: sum[cCallsFailed], Segmented: sum[cSegmented],
		Connects: p.connects.Load(), Connected: p.connected.Load(),
		RunningRings: int(p.running.Load()), Features: p.negotiated.Load(),
	}
	for _, q := range p.rxqs {
		s.Polls += q.polls.Load()
	}
	for r := range p.refused {
		s.Refusals[r] = p.refused[r].Load()
	}
	for r := RefusedMemoryFault + 1; r < NumRefusals; r++ {
		s.Refusals[r] = sum[refusalCounter(r)]
	}
	s.Refused = s.Refusals.Sum(RefusedMalformed, RefusedMemoryFault)
	s.BadChains = s.Refusals.Sum(RefusedChainBadIndex, RefusedChainTooBig)
	s.BrokenRings = s.Refusals.Sum(RefusedRingAhead, RefusedRingFault)
	s.RxDrops, s.TxDrops = counter.Drops(sum, numOwn)
	return s
}

// countRefusal counts a refusal of the control plane.
func (p *Port) countRefusal(r Refusal) { p.refused[r].Add(1) }

// Counter indices of a queue's counters.
const (
	cRxPackets = iota
	cRxBytes
	cTxPackets
	cTxBytes
	cCalls
	cCallsFailed
	cSegmented
	// cWorkerRefusals is the first of the workers' refusals, from
	// RefusedChainBadIndex on; the drops (counter.Block) follow them.
	cWorkerRefusals
)

const numOwn = cWorkerRefusals + int(NumRefusals-RefusedChainBadIndex)

// refusalCounter is the index of a worker's refusal in its queue's
// counters.
func refusalCounter(r Refusal) int { return cWorkerRefusals + int(r-RefusedChainBadIndex) }

// counters are one queue's: written by its worker only, published at
// the end of each burst.
type counters = counter.Block

func newCounters() counters { return counter.NewBlock(numOwn) }
