package endpoint

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"softnet.dev/buffer"
	"softnet.dev/packet"
)

// Flow is what an endpoint is bound to: UDP to a local address and port,
// or a raw IP protocol to a local address.
type Flow struct {
	Proto uint8          // packet.ProtoUDP, or any protocol with Raw
	Local netip.AddrPort // the port is ignored for Raw
	Raw   bool
}

// UDP is the flow of UDP datagrams to local.
func UDP(local netip.AddrPort) Flow { return Flow{Proto: packet.ProtoUDP, Local: local} }

// RawIP is the flow of IP packets of protocol proto to local.
func RawIP(proto uint8, local netip.Addr) Flow {
	return Flow{Proto: proto, Local: netip.AddrPortFrom(local, 0), Raw: true}
}

func (f Flow) String() string {
	if f.Raw {
		return fmt.Sprintf("raw proto %d %s", f.Proto, f.Local.Addr())
	}
	return fmt.Sprintf("udp %s", f.Local)
}

// flowKey is a flow in the lookup map: a raw flow has raw set and port 0,
// so a UDP socket and a raw socket on the same address do not collide.
type flowKey struct {
	addr  netip.Addr
	port  uint16
	proto uint8
	raw   bool
}

func (f Flow) key() flowKey {
	return flowKey{addr: f.Local.Addr().Unmap(), port: f.Local.Port(), proto: f.Proto, raw: f.Raw}
}

// Table is the set of bound endpoints, and the program, consumer, poller
// and port that connect them to the engine (see the package
// documentation). Its program, consumer and poller methods run on the
// workers; Bind and Close on any goroutine.
type Table struct {
	cfg      Config
	capacity int // buffers in the pool: the size of the lending tables

	// Readers (the workers) load immutable snapshots; writers copy under
	// mu. Endpoints stay in eps after Close until every worker has taken
	// its buffers back.
	flows atomic.Pointer[map[flowKey]*Endpoint]
	eps   atomic.Pointer[[]*Endpoint]

	mu      sync.Mutex
	nextID  int
	closed  bool
	gone    Stats // of endpoints removed from eps
	workers []*workerState
}

// NewTable returns an empty table for an engine with cfg.Workers workers.
func NewTable(cfg Config) (*Table, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Table{cfg: cfg, capacity: cfg.Pool.Stats().Capacity}
	empty := map[flowKey]*Endpoint{}
	t.flows.Store(&empty)
	t.eps.Store(&[]*Endpoint{})
	for w := range cfg.Workers {
		ws, err := newWorkerState(t, w)
		if err != nil {
			for _, o := range t.workers {
				unix.Close(o.efd)
			}
			return nil, fmt.Errorf("endpoint: worker %d: %w", w, err)
		}
		t.workers = append(t.workers, ws)
	}
	return t, nil
}

// Bind opens an endpoint for a flow. Zero Options fields take the table's
// defaults.
func (t *Table) Bind(f Flow, opt Options) (*Endpoint, error) {
	if !f.Local.Addr().IsValid() {
		return nil, fmt.Errorf("endpoint: bind %s: no local address", f)
	}
	if !f.Raw && f.Proto != packet.ProtoUDP {
		return nil, fmt.Errorf("endpoint: bind %s: only UDP or raw IP flows", f)
	}
	if opt.RingSize == 0 {
		opt.RingSize = t.cfg.RingSize
	}
	if opt.Quota == 0 {
		opt.Quota = t.cfg.Quota
	}
	if opt.RingSize < 2 || opt.RingSize > 1<<20 || opt.Quota < 1 {
		return nil, fmt.Errorf("endpoint: bind %s: ring %d, quota %d", f, opt.RingSize, opt.Quota)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("endpoint: bind %s: %w", f, ErrClosed)
	}
	k := f.key()
	old := *t.flows.Load()
	if _, ok := old[k]; ok {
		return nil, fmt.Errorf("endpoint: bind %s: %w", f, ErrInUse)
	}
	e, err := newEndpoint(t, t.nextID, f, opt)
	if err != nil {
		return nil, fmt.Errorf("endpoint: bind %s: %w", f, err)
	}
	t.nextID++
	m := make(map[flowKey]*Endpoint, len(old)+1)
	for kk, v := range old {
		m[kk] = v
	}
	m[k] = e
	eps := append(append([]*Endpoint(nil), *t.eps.Load()...), e)
	t.eps.Store(&eps)
	t.flows.Store(&m)
	return e, nil
}

// unbind removes e's flow, so that no new packet is delivered to it.
func (t *Table) unbind(e *Endpoint) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.flows.Load()
	m := make(map[flowKey]*Endpoint, len(old))
	for k, v := range old {
		if v != e {
			m[k] = v
		}
	}
	t.flows.Store(&m)
}

// forget removes a closed endpoint whose buffers every worker has taken
// back from the polling list. It runs on a worker, rarely: once per
// closed endpoint.
func (t *Table) forget(e *Endpoint) {
	es := e.Stats()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gone.add(&es)
	var eps []*Endpoint
	for _, o := range *t.eps.Load() {
		if o != e {
			eps = append(eps, o)
		}
	}
	t.eps.Store(&eps)
}

// probe is what lookup reads of a packet's headers: packets with equal
// probes find the same endpoint. Its zero value matches no packet, whose
// destination address is always valid.
type probe struct {
	dst   netip.Addr
	port  uint16
	proto uint8
	l4    bool
}

func probeOf(h *packet.Headers) probe {
	return probe{dst: h.DstIP, port: h.DstPort, proto: h.IPProto, l4: h.L4Off > 0}
}

// lookup finds the endpoint of a parsed packet: UDP by address and port,
// then raw by protocol and address.
func lookup(m map[flowKey]*Endpoint, h *packet.Headers) *Endpoint {
	if h.IPProto == packet.ProtoUDP && h.L4Off > 0 {
		if e := m[flowKey{addr: h.DstIP, port: h.DstPort, proto: packet.ProtoUDP}]; e != nil {
			return e
		}
	}
	return m[flowKey{addr: h.DstIP, proto: h.IPProto, raw: true}]
}

// Name returns the program's name.
func (t *Table) Name() string { return "endpoint:" + t.cfg.Name }

// Pool returns the table's buffer pool.
func (t *Table) Pool() *buffer.Pool { return t.cfg.Pool }
