package program

import (
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/drop"
)

// Limit is a token bucket: Rate in bits per second and Burst, the
// bucket's depth, in bits, as the CNI bandwidth capability gives them.
// The zero Limit is no limit.
type Limit struct {
	Rate, Burst uint64
}

// Bounds of a Limit: a rate from 1 kbit/s to 10 Tbit/s, a burst from one
// byte to a terabit, so that the bucket's arithmetic (in sixteenths of a
// nanosecond, below) cannot overflow.
const (
	MinRate  = 1_000
	MaxRate  = 10_000_000_000_000
	MinBurst = 8
	MaxBurst = 1_000_000_000_000
)

// Valid reports why l is not a limit, or nil.
func (l Limit) Valid() error {
	if l == (Limit{}) {
		return nil
	}
	switch {
	case l.Rate < MinRate || l.Rate > MaxRate:
		return fmt.Errorf("rate %d bit/s outside [%d, %d]", l.Rate, uint64(MinRate), uint64(MaxRate))
	case l.Burst < MinBurst || l.Burst > MaxBurst:
		return fmt.Errorf("burst %d bits outside [%d, %d]", l.Burst, MinBurst, uint64(MaxBurst))
	}
	return nil
}

// Egress is a program of what leaves a port, where the chain's programs
// see what enters one: the engine gives it each round's packets for a
// port before they are sent (engine.Config.Egress).
type Egress interface {
	Name() string
	// Admit keeps at the front of bufs, in their order, the packets that
	// may leave port and returns their number n; the engine drops
	// bufs[n:] with reason, counted on port. It is called concurrently
	// by every worker.
	Admit(port int, bufs []*buffer.Buf) (n int, reason drop.Reason)
}

// Policer limits the rate of each port in each direction with a token
// bucket, dropping what exceeds it: as a Program, what the switch
// receives from a port (its ingress; drop.PoliceIngress), and as an
// Egress, what the switch sends to it (drop.PoliceEgress). Directions
// are the switch's, as Open vSwitch's ingress policing is: a port's
// ingress is what its guest sends. (The CNI bandwidth capability names
// them from the pod's side: its ingressRate is this egress.)
//
// A packet passes while the bucket is not empty and takes its length's
// tokens, which may leave the bucket below empty: a packet longer than
// the burst (a GSO packet of up to 64 KiB) still passes, and the rate
// over time is the rate whatever the packets' sizes. Lengths are the
// packets' as the port carries them: Ethernet frames on L2 ports, IP
// packets on L3 ones.
//
// The bucket is the GCRA's form of it (ATM's virtual scheduling, as
// rate limiters in memory keep it): one word, the time at which the
// bucket is full again, which every worker moves forward with one
// compare-and-swap per batch. Workers read the buckets through an atomic
// pointer to an immutable table; SetLimits swaps in a new one. Nothing
// allocates on the way of a packet.
type Policer struct {
	mu    sync.Mutex // serializes writers
	table atomic.Pointer[[]*portBuckets]
	// clock returns the time in sixteenths of a nanosecond: monotonic,
	// read once per batch with a limit.
	clock func() int64
}

type portBuckets struct {
	in, out *bucket // nil: no limit that way
}

// bucket is one direction's token bucket, in units of 1/16 ns: a byte
// of a 10 Gbit/s limit takes 12.8 of them, and an int64 of them lasts 18
// years.
type bucket struct {
	limit Limit
	tau   int64 // the burst: how far ahead of now tat may be
	// full is the time at which the bucket is full again (GCRA's
	// theoretical arrival time).
	full atomic.Int64
}

const unitsPerSecond = 16_000_000_000

func newBucket(l Limit) *bucket {
	// tau = Burst * units/s / Rate, below 2^63 within the bounds.
	hi, lo := bits.Mul64(l.Burst, unitsPerSecond)
	tau, _ := bits.Div64(hi, lo, l.Rate)
	return &bucket{limit: l, tau: int64(min(tau, 1<<62))}
}

// cost is how long n bytes take at the bucket's rate.
func (k *bucket) cost(n int) int64 {
	return int64(uint64(n) * (8 * unitsPerSecond) / k.limit.Rate)
}

// take passes the bytes of a burst of packets, one by one, at now: the
// packets that size reports (false: not this bucket's), and returns
// the bucket's next state. ok, if not nil, says which pass.
func (k *bucket) take(full, now int64, n int, size func(i int) (int, bool), ok func(i int, pass bool)) int64 {
	for i := range n {
		sz, mine := size(i)
		if !mine {
			continue
		}
		pass := full-now < k.tau
		if pass {
			full = max(full, now) + k.cost(sz)
		}
		if ok != nil {
			ok(i, pass)
		}
	}
	return full
}

// police runs a burst through the bucket: with the state the
// compare-and-swap finds, it works out the next one, and once that is
// in, tells ok which packets passed (the same decisions: they depend on
// the state and now alone).
func (k *bucket) police(now int64, n int, size func(i int) (int, bool), ok func(i int, pass bool)) {
	for {
		old := k.full.Load()
		next := k.take(old, now, n, size, nil)
		if next == old || k.full.CompareAndSwap(old, next) {
			k.take(old, now, n, size, ok)
			return
		}
	}
}

// NewPolicer returns a policer with no limits.
func NewPolicer() *Policer {
	epoch := time.Now()
	p := &Policer{clock: func() int64 { return int64(time.Since(epoch)) * 16 }}
	p.table.Store(&[]*portBuckets{})
	return p
}

// SetLimits sets port's limits: in on what the switch receives from it,
// out on what it sends to it; zero Limits remove them. A bucket whose
// limit does not change keeps its state; a new one starts full.
func (p *Policer) SetLimits(port int, in, out Limit) error {
	if port < 0 || port > maxPort {
		return fmt.Errorf("program: limits for port %d outside [0, %d]", port, maxPort)
	}
	if err := in.Valid(); err != nil {
		return fmt.Errorf("program: port %d: ingress %w", port, err)
	}
	if err := out.Valid(); err != nil {
		return fmt.Errorf("program: port %d: egress %w", port, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	next := slices.Clone(*p.table.Load())
	var old portBuckets
	if port < len(next) && next[port] != nil {
		old = *next[port]
	}
	keep := func(k *bucket, l Limit) *bucket {
		switch {
		case l == Limit{}:
			return nil
		case k != nil && k.limit == l:
			return k
		}
		return newBucket(l)
	}
	pb := &portBuckets{in: keep(old.in, in), out: keep(old.out, out)}
	if pb.in == nil && pb.out == nil {
		pb = nil
	}
	if port >= len(next) {
		if pb == nil {
			return nil
		}
		next = slices.Grow(next, port+1-len(next))[:port+1]
	}
	next[port] = pb
	p.table.Store(&next)
	return nil
}

// Limits returns port's limits, ingress and egress.
func (p *Policer) Limits(port int) (in, out Limit) {
	pb := p.port(port)
	if pb == nil {
		return Limit{}, Limit{}
	}
	if pb.in != nil {
		in = pb.in.limit
	}
	if pb.out != nil {
		out = pb.out.limit
	}
	return in, out
}

func (p *Policer) port(port int) *portBuckets {
	t := *p.table.Load()
	if port < 0 || port >= len(t) {
		return nil
	}
	return t[port]
}

// Name implements Program and Egress.
func (p *Policer) Name() string { return "policer" }

// Run polices what the switch receives from b.Ingress: the packets no
// program before it decided.
func (p *Policer) Run(b *Batch) {
	pb := p.port(b.Ingress)
	if pb == nil || pb.in == nil {
		return
	}
	pb.in.police(p.clock(), len(b.Bufs),
		func(i int) (int, bool) { return b.Bufs[i].Len(), b.Verdicts[i] == PassVerdict },
		func(i int, pass bool) {
			if !pass {
				b.Verdicts[i] = DropVerdict(drop.PoliceIngress)
			}
		})
}

// Admit polices what the switch sends to port (Egress).
func (p *Policer) Admit(port int, bufs []*buffer.Buf) (int, drop.Reason) {
	pb := p.port(port)
	if pb == nil || pb.out == nil {
		return len(bufs), drop.PoliceEgress
	}
	kept := 0
	pb.out.police(p.clock(), len(bufs),
		func(i int) (int, bool) { return bufs[i].Len(), true },
		func(i int, pass bool) {
			// A stable partition: the packets that pass keep their order
			// at the front; i only moves forward past kept, so the
			// packets not yet seen are never swapped behind it.
			if pass {
				bufs[kept], bufs[i] = bufs[i], bufs[kept]
				kept++
			}
		})
	return kept, drop.PoliceEgress
}
