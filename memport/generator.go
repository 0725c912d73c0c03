package memport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"softnet.dev/internal/cacheline"
	"sync/atomic"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
	"softnet.dev/port"
)

// GenConfig configures a Generator. The zero value generates one flow of
// 64-byte IPv4 packets in Ethernet frames, without end, on one queue.
type GenConfig struct {
	// Queues is the number of receive queues (default 1).
	Queues int
	// Flows is the number of flows (default 1, at most MaxFlows). Flow f
	// is generated only on queue f%Queues, so that per-flow sequence
	// numbers stay in order through a datapath that keeps flows on their
	// queue; each queue cycles through its flows packet by packet.
	Flows int
	// Sizes are the IP packet sizes, cycled packet by packet (default
	// [64]; each in [MinSize, MaxSize]). A size larger than the pool's
	// MTU class takes a buffer of a larger class (buffer.Pool.ClassFor).
	Sizes []int
	// IPv6 selects IPv6 packets instead of IPv4.
	IPv6 bool
	// Count is the number of packets each queue generates; 0 means no
	// limit.
	Count uint64
	// Bulk allocates each burst with one buffer.Cache.GetBulk per size
	// class, all or nothing; otherwise each packet takes one Get.
	Bulk bool
	// Layer is packet.L2 (the zero value: Ethernet frames from SrcMAC to
	// DstMAC) or packet.L3 (bare IP packets).
	Layer packet.Layer
	// Pool, if set, is checked at construction to have a class for every
	// size. Receive works with any cache's pool either way.
	Pool *buffer.Pool
	// HeadersOnly makes the generator a DMA device: per packet it writes
	// the headers and the payload header (sequence number included) and
	// nothing else, so that its cost per packet does not grow with the
	// packet's size. The rest of the payload is whatever the frame held
	// (zeros in a fresh frame, an earlier packet's bytes otherwise), as
	// if a NIC had written it without the CPU. The payload header
	// carries MagicHeadersOnly, and the UDP checksum is 0 ("none", RFC
	// 768): the generator cannot sum bytes it does not write. That is
	// valid for IPv4 but not for IPv6 (RFC 8200), whose receivers
	// outside softnet would drop the packets. A Sink checks everything
	// but the payload and the checksum, and counts these packets in
	// SinkStats.HeadersOnly.
	HeadersOnly bool
}

// GenStats counts what a Generator produced.
type GenStats struct {
	Packets       uint64 `json:"packets"`
	Bytes         uint64 `json:"bytes"`          // frames, L2 header included
	AllocFailures uint64 `json:"alloc_failures"` // Receive calls cut short by an exhausted pool
}

// Generator is a receive-only port that synthesizes UDP traffic (their
// format: docs/design.md, "In-memory ports"). Each RxQueue belongs to one
// worker; Stats may be called from anywhere.
type Generator struct {
	info        port.Info
	t           *templates
	count       uint64
	bulk        bool
	headersOnly bool
	queues      []genQueue
	closed      atomic.Bool
}

var (
	_ port.Port    = (*Generator)(nil)
	_ port.RxQueue = (*genQueue)(nil)
)

// genQueue is one receive queue. Everything but pub is owned by the
// polling worker.
type genQueue struct {
	_        cacheline.Pad
	g        *Generator
	flows    []genFlow
	fi, si   int // next flow (index into flows) and size (index into sizes)
	pool     *buffer.Pool
	classes  []buffer.Class // per size, for pool
	oneClass bool           // every size has classes[0]
	need     []int          // per class: buffers of a mixed-class burst
	scratch  [][]*buffer.Buf
	ctr      GenStats
	pub      struct{ packets, bytes, allocFailures atomic.Uint64 }
	_        cacheline.Pad
}

type genFlow struct {
	slot int // the flow's first template slot offset
	seq  uint64
}

var errNoCache = errors.New("no buffer cache given")

// NewGenerator returns a generator with its templates built.
func NewGenerator(name string, cfg GenConfig) (*Generator, error) {
	fail := func(format string, args ...any) (*Generator, error) {
		return nil, fmt.Errorf("memport: generator %s: "+format, append([]any{name}, args...)...)
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if cfg.Flows == 0 {
		cfg.Flows = 1
	}
	sizes := append([]int(nil), cfg.Sizes...)
	if len(sizes) == 0 {
		sizes = []int{MinSize}
	}
	switch {
	case cfg.Queues < 1 || cfg.Queues > maxQueues:
		return fail("%d queues, want 1 to %d", cfg.Queues, maxQueues)
	case cfg.Flows < 1 || cfg.Flows > MaxFlows:
		return fail("%d flows, want 1 to %d", cfg.Flows, MaxFlows)
	case cfg.Layer != packet.L2 && cfg.Layer != packet.L3:
		return fail("unknown layer %d", cfg.Layer)
	case len(sizes) > maxTemplates/cfg.Flows:
		return fail("%d flows × %d sizes exceed %d templates", cfg.Flows, len(sizes), maxTemplates)
	}
	for _, s := range sizes {
		if s < MinSize || s > MaxSize {
			return fail("packet size %d outside [%d, %d]", s, MinSize, MaxSize)
		}
	}
	g := &Generator{
		t:           buildTemplates(cfg.Flows, sizes, cfg.IPv6, cfg.Layer, cfg.HeadersOnly),
		count:       cfg.Count,
		bulk:        cfg.Bulk,
		headersOnly: cfg.HeadersOnly,
		queues:      make([]genQueue, cfg.Queues),
	}
	largest := 0
	for _, sz := range g.t.sizes {
		largest = max(largest, sz.frame)
	}
	g.info = port.Info{Name: name, Layer: cfg.Layer, Queues: cfg.Queues, MaxFrame: largest}
	if cfg.Pool != nil {
		if err := g.classify(cfg.Pool, make([]buffer.Class, len(sizes))); err != nil {
			return fail("%w", err)
		}
	}
	for i := range g.queues {
		q := &g.queues[i]
		q.g = g
		q.classes = make([]buffer.Class, len(sizes))
		// Each packet writes its flow's seq: keep the queue's flows off
		// the other queues' cache lines.
		q.flows = cacheline.Make[genFlow](0, (cfg.Flows+cfg.Queues-1)/cfg.Queues)
		for f := i; f < cfg.Flows; f += cfg.Queues {
			q.flows = append(q.flows, genFlow{slot: f * len(sizes) * g.t.stride})
		}
	}
	return g, nil
}

// classify finds the class of every size in p, into classes.
func (g *Generator) classify(p *buffer.Pool, classes []buffer.Class) error {
	for i, sz := range g.t.sizes {
		c, ok := p.ClassFor(sz.frame)
		if !ok || p.Room(c) < sz.frame {
			return fmt.Errorf("no buffer class holds a %d-byte frame (%d-byte packet)", sz.frame, sz.frame-g.t.l2)
		}
		classes[i] = c
	}
	return nil
}

// Info describes the generator.
func (g *Generator) Info() port.Info { return g.info }

// RxQueue returns queue i, or nil if there is no such queue.
func (g *Generator) RxQueue(i int) port.RxQueue {
	if i < 0 || i >= len(g.queues) {
		return nil
	}
	return &g.queues[i]
}

// TxQueue returns nil: a generator only receives.
func (g *Generator) TxQueue(int) port.TxQueue { return nil }

// CloseInto stops the generator: Receive returns port.ErrDown from then on.
// Nothing is queued inside a generator, so c is not used. Idempotent.
func (g *Generator) CloseInto(*buffer.Cache) error {
	g.closed.Store(true)
	return nil
}

// Stats returns the totals over all queues, as of each queue's last
// burst. Safe from any goroutine.
func (g *Generator) Stats() GenStats {
	var s GenStats
	for i := range g.queues {
		p := &g.queues[i].pub
		s.Packets += p.packets.Load()
		s.Bytes += p.bytes.Load()
		s.AllocFailures += p.allocFailures.Load()
	}
	return s
}

// Receive generates up to len(bufs) packets into buffers from c: fewer
// once Count is near, none if the pool is exhausted in Bulk mode (counted
// as an allocation failure), or as many as Get could allocate otherwise.
func (q *genQueue) Receive(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	g := q.g
	if g.closed.Load() {
		return 0, port.ErrDown
	}
	n := len(bufs)
	if g.count != 0 {
		n = int(min(uint64(n), g.count-q.ctr.Packets))
	}
	if n == 0 || len(q.flows) == 0 {
		return 0, nil
	}
	if c == nil {
		return 0, fmt.Errorf("memport: generator %s: %w", g.info.Name, errNoCache)
	}
	if p := c.Pool(); p != q.pool {
		if err := q.setPool(p); err != nil {
			return 0, fmt.Errorf("memport: generator %s: %w", g.info.Name, err)
		}
	}
	out := bufs[:n]
	if g.bulk {
		if !q.allocBulk(c, out) {
			out = out[:0]
		}
	} else {
		out = out[:q.allocEach(c, out)]
	}
	if len(out) < n {
		q.ctr.AllocFailures++
		q.pub.allocFailures.Store(q.ctr.AllocFailures)
		if len(out) == 0 {
			return 0, nil
		}
	}
	q.ctr.Bytes += q.fill(out)
	q.ctr.Packets += uint64(len(out))
	q.pub.packets.Store(q.ctr.Packets)
	q.pub.bytes.Store(q.ctr.Bytes)
	return len(out), nil
}

// setPool finds the size classes for a cache's pool, on the first Receive
// and whenever the pool changes.
func (q *genQueue) setPool(p *buffer.Pool) error {
	if err := q.g.classify(p, q.classes); err != nil {
		return err
	}
	q.oneClass = true
	for _, c := range q.classes {
		q.oneClass = q.oneClass && c == q.classes[0]
	}
	q.need = make([]int, p.NumClasses())
	q.scratch = make([][]*buffer.Buf, p.NumClasses())
	q.pool = p
	return nil
}

// allocBulk fills out with empty buffers, each of the class its packet's
// size needs, with one GetBulk per class, all or nothing.
func (q *genQueue) allocBulk(c *buffer.Cache, out []*buffer.Buf) bool {
	if q.oneClass {
		return c.GetBulk(out, q.classes[0]) == nil
	}
	clear(q.need)
	si, nsizes := q.si, len(q.classes)
	for range out {
		q.need[q.classes[si]]++
		if si++; si == nsizes {
			si = 0
		}
	}
	for cl, k := range q.need {
		if k == 0 {
			continue
		}
		if len(q.scratch[cl]) < k {
			q.scratch[cl] = make([]*buffer.Buf, len(out))
		}
		if c.GetBulk(q.scratch[cl][:k], buffer.Class(cl)) != nil {
			// Give back the classes already taken: they are lost
			// packets of a burst that could not be allocated.
			for prev, taken := range q.need[:cl] {
				c.DropBulk(q.scratch[prev][:taken], drop.NoMem)
			}
			return false
		}
	}
	si = q.si
	for i := range out {
		cl := q.classes[si]
		q.need[cl]--
		out[i] = q.scratch[cl][q.need[cl]]
		if si++; si == nsizes {
			si = 0
		}
	}
	return true
}

// allocEach fills a prefix of out with one Get per packet and returns its
// length, short if the pool ran out.
func (q *genQueue) allocEach(c *buffer.Cache, out []*buffer.Buf) int {
	si, nsizes := q.si, len(q.classes)
	for i := range out {
		b, err := c.Get(q.classes[si])
		if err != nil {
			return i
		}
		out[i] = b
		if si++; si == nsizes {
			si = 0
		}
	}
	return len(out)
}

// fill writes the next packets into empty buffers and returns their bytes:
// per packet one copy of the template (and of the pattern behind it, for
// packets larger than a template), the sequence number, and the checksum
// adjusted for it. With HeadersOnly it copies the template's headers and
// writes the sequence number, and that is all.
func (q *genQueue) fill(out []*buffer.Buf) uint64 {
	t := q.g.t
	pat := t.pattern
	hdrOnly := q.g.headersOnly
	flows, sizes := q.flows, t.sizes
	fi, si := q.fi, q.si
	var bytes uint64
	for _, b := range out {
		sz := sizes[si]
		fl := &flows[fi]
		d, _ := b.Append(sz.frame) // fits: the class was chosen for it
		tmpl := t.slots[fl.slot+si*t.stride:][:sz.prefix]
		seq := fl.seq
		fl.seq++
		if hdrOnly {
			// The checksum stays 0: see GenConfig.HeadersOnly.
			copy(d, tmpl[:t.patOff])
			binary.BigEndian.PutUint64(d[t.seqOff:], seq)
		} else {
			copy(d, tmpl)
			if sz.frame > sz.prefix {
				copy(d[sz.prefix:], pat[sz.prefix-t.patOff:sz.frame-t.patOff])
			}
			binary.BigEndian.PutUint64(d[t.seqOff:], seq)
			// The old checksum comes from the template, not from d: a
			// narrow load from what the copy just stored with wide
			// stores would wait for store forwarding to fail.
			binary.BigEndian.PutUint16(d[t.csumOff:], addSeq(binary.BigEndian.Uint16(tmpl[t.csumOff:]), seq))
		}
		bytes += uint64(sz.frame)
		if si++; si == len(sizes) {
			si = 0
		}
		if fi++; fi == len(flows) {
			fi = 0
		}
	}
	q.fi, q.si = fi, si
	return bytes
}

// FD returns -1: a generator always has packets until Count is reached,
// and then never again.
func (q *genQueue) FD() int { return -1 }

// Arm reports whether the queue will generate more packets; once it
// reports false, the worker may sleep: nothing will wake it for this
// queue.
func (q *genQueue) Arm() bool {
	g := q.g
	return !g.closed.Load() && len(q.flows) > 0 && (g.count == 0 || q.pub.packets.Load() < g.count)
}

// Disarm does nothing.
func (q *genQueue) Disarm() {}
