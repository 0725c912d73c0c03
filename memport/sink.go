package memport

import (
	"fmt"
	"softnet.dev/internal/cacheline"
	"sync"
	"sync/atomic"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/packet"
	"softnet.dev/port"
	"softnet.dev/ring"
)

// Validation is how closely a Sink checks each packet.
type Validation uint8

const (
	// ValidateFull parses the packet with packet.Parse, verifies the UDP
	// checksum, the lengths and the payload header, and compares the
	// payload with the pattern. For tests. A HeadersOnly generator's
	// packet has neither a checksum nor a generated payload: only its
	// headers are checked, and it is counted in SinkStats.HeadersOnly.
	ValidateFull Validation = iota
	// ValidateLight checks the IP version and protocol, the IP and UDP
	// lengths, the magic, and tracks the flow's sequence: a few loads per
	// packet, cheap enough for the benchmark.
	ValidateLight
)

// Completion is where a Sink frees the buffers it is given.
type Completion uint8

const (
	// CompletionInline validates and frees in Transmit, into the
	// transmitting worker's cache: TX completion on the same worker.
	CompletionInline Completion = iota
	// CompletionDeferred only queues the burst in Transmit; a completion
	// goroutine per queue, with a cache of its own, validates and frees,
	// so that every free is a deferred remote free to the allocating
	// worker (TX completion on another CPU).
	CompletionDeferred
)

// SinkConfig configures a Sink.
type SinkConfig struct {
	Queues     int // default 1
	Validate   Validation
	Completion Completion
	// Pool is the pool the completion goroutines' caches come from;
	// required with CompletionDeferred.
	Pool *buffer.Pool
	// Layer is packet.L2 (the zero value: Ethernet frames) or packet.L3.
	Layer packet.Layer
	// RingSize is the per-queue completion ring of CompletionDeferred, a
	// power of two (default DefaultRingSize).
	RingSize int
}

// SinkStats are a Sink's totals. Sequence accounting is per flow and
// queue: a forward jump in sequence counts the skipped numbers as Lost, a
// number not above the flow's highest so far counts as Reordered (which
// includes duplicates). A packet that arrives late was counted lost when
// its successor arrived, and then reordered.
type SinkStats struct {
	Packets   uint64 `json:"packets"` // valid packets
	Bytes     uint64 `json:"bytes"`   // of all packets, valid or not
	Lost      uint64 `json:"lost"`
	Reordered uint64 `json:"reordered"`
	Bad       uint64 `json:"bad"` // failed validation (freed all the same)
	// HeadersOnly counts the valid packets of a HeadersOnly generator
	// (GenConfig.HeadersOnly): their headers and sequence were checked,
	// but they carry no payload the sink could check, whatever the
	// Validation.
	HeadersOnly uint64 `json:"headers_only"`
	FullRing    uint64 `json:"full_ring"` // dropped: a completion ring was full
}

// Sink is a transmit-only port that validates every packet it is given,
// tracks per-flow sequence numbers, and frees the buffers. Each TxQueue
// belongs to one worker; Stats may be called from anywhere.
type Sink struct {
	info     port.Info
	validate Validation
	queues   []sinkQueue
	closed   atomic.Bool

	closeMu sync.Mutex
	wg      sync.WaitGroup
	done    bool
}

var (
	_ port.Port    = (*Sink)(nil)
	_ port.TxQueue = (*sinkQueue)(nil)
)

// sinkQueue is one transmit queue. The accounting state (flows, hdrs,
// ctr) belongs to whoever validates: the transmitting worker (Inline) or
// the completion goroutine (Deferred).
type sinkQueue struct {
	_     cacheline.Pad
	s     *Sink
	l2    int
	flows []uint64 // per flow id: the next expected sequence number
	hdrs  packet.Headers
	ctr   SinkStats
	pub   [6]atomic.Uint64 // Packets..HeadersOnly

	deferred *completer // nil for Inline

	_        cacheline.Pad
	fullRing atomic.Uint64 // the transmitter's (Deferred only)
	_        cacheline.Pad
}

// NewSink returns a sink. With CompletionDeferred its completion
// goroutines (one per queue, each with a cache from cfg.Pool) run until
// Close.
func NewSink(name string, cfg SinkConfig) (*Sink, error) {
	fail := func(format string, args ...any) (*Sink, error) {
		return nil, fmt.Errorf("memport: sink %s: "+format, append([]any{name}, args...)...)
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if cfg.RingSize == 0 {
		cfg.RingSize = DefaultRingSize
	}
	switch {
	case cfg.Queues < 1 || cfg.Queues > maxQueues:
		return fail("%d queues, want 1 to %d", cfg.Queues, maxQueues)
	case cfg.Layer != packet.L2 && cfg.Layer != packet.L3:
		return fail("unknown layer %d", cfg.Layer)
	case cfg.Validate != ValidateFull && cfg.Validate != ValidateLight:
		return fail("unknown validation %d", cfg.Validate)
	case cfg.Completion != CompletionInline && cfg.Completion != CompletionDeferred:
		return fail("unknown completion %d", cfg.Completion)
	case cfg.Completion == CompletionDeferred && cfg.Pool == nil:
		return fail("deferred completion needs a pool")
	}
	s := &Sink{validate: cfg.Validate, queues: make([]sinkQueue, cfg.Queues)}
	l2 := 0
	if cfg.Layer == packet.L2 {
		l2 = packet.EthernetHeaderLen
	}
	s.info = port.Info{Name: name, Layer: cfg.Layer, Queues: cfg.Queues, MaxFrame: l2 + MaxSize}
	for i := range s.queues {
		s.queues[i].s, s.queues[i].l2 = s, l2
	}
	if cfg.Completion == CompletionDeferred {
		// Set every queue up before starting any goroutine, so that a
		// failure leaves nothing running.
		for i := range s.queues {
			r, err := ring.NewSPSC[*buffer.Buf](cfg.RingSize)
			if err != nil {
				return fail("%w", err)
			}
			c, err := cfg.Pool.NewCache(nil)
			if err != nil {
				for j := range i {
					s.queues[j].deferred.cache.Close()
				}
				return fail("queue %d: completion cache: %w", i, err)
			}
			s.queues[i].deferred = newCompleter(r, c)
		}
		for i := range s.queues {
			q := &s.queues[i]
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				q.deferred.run(q)
			}()
		}
	}
	return s, nil
}

// Info describes the sink.
func (s *Sink) Info() port.Info { return s.info }

// RxQueue returns nil: a sink only transmits.
func (s *Sink) RxQueue(int) port.RxQueue { return nil }

// TxQueue returns transmit queue i, or nil if there is no such queue.
func (s *Sink) TxQueue(i int) port.TxQueue {
	if i < 0 || i >= len(s.queues) {
		return nil
	}
	return &s.queues[i]
}

// Stats returns the totals over all queues, as of each queue's last
// burst. Safe from any goroutine.
func (s *Sink) Stats() SinkStats {
	var t SinkStats
	for i := range s.queues {
		q := &s.queues[i]
		t.Packets += q.pub[0].Load()
		t.Bytes += q.pub[1].Load()
		t.Lost += q.pub[2].Load()
		t.Reordered += q.pub[3].Load()
		t.Bad += q.pub[4].Load()
		t.HeadersOnly += q.pub[5].Load()
		t.FullRing += q.fullRing.Load()
	}
	return t
}

// CloseInto stops the sink: Transmit returns port.ErrDown from then on. With
// CompletionDeferred it waits until the completion goroutines have freed
// everything queued, then closes their caches. The workers that transmit
// to the sink must have stopped. c is not used. Idempotent.
func (s *Sink) CloseInto(*buffer.Cache) error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.done {
		return nil
	}
	s.done = true
	s.closed.Store(true)
	for i := range s.queues {
		if d := s.queues[i].deferred; d != nil {
			d.stop()
		}
	}
	s.wg.Wait()
	for i := range s.queues {
		if d := s.queues[i].deferred; d != nil {
			d.cache.Close()
		}
	}
	return nil
}

// Transmit takes the burst: with CompletionInline it validates and frees
// it into c at once; with CompletionDeferred it queues it for the queue's
// completion goroutine, dropping what does not fit the ring into c with
// drop.FullRing. It returns the number accepted.
func (q *sinkQueue) Transmit(c *buffer.Cache, bufs []*buffer.Buf) (int, error) {
	if q.s.closed.Load() {
		c.DropBulk(bufs, drop.DevReady)
		return 0, port.ErrDown
	}
	if d := q.deferred; d != nil {
		k := d.ring.EnqueueBurst(bufs)
		if k < len(bufs) {
			c.DropBulk(bufs[k:], drop.FullRing)
			q.fullRing.Add(uint64(len(bufs) - k))
		}
		if k > 0 {
			d.kick()
		}
		return k, nil
	}
	q.account(bufs)
	c.ConsumeBulk(bufs)
	return len(bufs), nil
}

// account validates a burst and tracks its sequence numbers, then
// publishes the queue's counters.
func (q *sinkQueue) account(bufs []*buffer.Buf) {
	ctr := q.ctr
	full := q.s.validate == ValidateFull
	for _, b := range bufs {
		if b == nil {
			ctr.Bad++
			continue
		}
		d := b.Bytes()
		ctr.Bytes += uint64(len(d))
		var st stamp
		var ok bool
		if full {
			st, ok = checkFull(d, q.s.info.Layer, &q.hdrs)
		} else {
			st, ok = checkLight(d, q.l2)
		}
		if !ok || st.flow >= MaxFlows {
			ctr.Bad++
			continue
		}
		ctr.Packets++
		if st.headersOnly {
			ctr.HeadersOnly++
		}
		if int(st.flow) >= len(q.flows) {
			q.grow(int(st.flow))
		}
		next := &q.flows[st.flow]
		switch {
		case st.seq == *next:
			*next = st.seq + 1
		case st.seq > *next:
			ctr.Lost += st.seq - *next
			*next = st.seq + 1
		default:
			ctr.Reordered++
		}
	}
	for i, v := range [...]uint64{ctr.Packets, ctr.Bytes, ctr.Lost, ctr.Reordered, ctr.Bad, ctr.HeadersOnly} {
		if v != q.pub[i].Load() {
			q.pub[i].Store(v)
		}
	}
	q.ctr = ctr
}

// grow makes room for flow id f: allocation happens only when a flow is
// first seen.
func (q *sinkQueue) grow(f int) {
	n := min(MaxFlows, max(f+1, 2*len(q.flows), 64))
	q.flows = append(q.flows, make([]uint64, n-len(q.flows))...)
}
