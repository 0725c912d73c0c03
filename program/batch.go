package program

import (
	"fmt"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/cacheline"
	"softnet.dev/packet"
)

// Action is what happens to a packet.
type Action uint8

const (
	Pass     Action = iota // not decided: the next program sees it
	Drop                   // free with the verdict's drop reason
	Tx                     // transmit back out of the ingress port
	Redirect               // transmit out of the verdict's port
	Flood                  // transmit out of every other port
	Deliver                // hand to the verdict's local consumer
)

var actionNames = [...]string{"pass", "drop", "tx", "redirect", "flood", "deliver"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Verdict is an Action with its argument (a drop reason, a port index or a
// consumer index), packed in one word so that a batch's verdicts are one
// small array.
type Verdict uint32

// Verdict constructors.
func DropVerdict(r drop.Reason) Verdict { return Verdict(Drop) | Verdict(r)<<8 }
func RedirectVerdict(port int) Verdict  { return Verdict(Redirect) | Verdict(uint16(port))<<8 }
func DeliverVerdict(consumer int) Verdict {
	return Verdict(Deliver) | Verdict(uint16(consumer))<<8
}

const (
	PassVerdict  = Verdict(Pass)
	TxVerdict    = Verdict(Tx)
	FloodVerdict = Verdict(Flood)
)

// Action returns the verdict's action.
func (v Verdict) Action() Action { return Action(v) }

// Reason returns the drop reason of a Drop verdict.
func (v Verdict) Reason() drop.Reason { return drop.Reason(v >> 8) }

// Port returns the port of a Redirect verdict.
func (v Verdict) Port() int { return int(uint16(v >> 8)) }

// Consumer returns the consumer of a Deliver verdict.
func (v Verdict) Consumer() int { return int(uint16(v >> 8)) }

func (v Verdict) String() string {
	switch v.Action() {
	case Drop:
		return "drop(" + v.Reason().String() + ")"
	case Redirect:
		return fmt.Sprintf("redirect(%d)", v.Port())
	case Deliver:
		return fmt.Sprintf("deliver(%d)", v.Consumer())
	default:
		return v.Action().String()
	}
}

// Batch is a burst of packets received on one port, with one verdict per
// packet. The engine reuses it from round to round: nothing in it may be
// kept after Run returns.
type Batch struct {
	Worker   int          // index of the worker running the batch, for per-worker state
	Ingress  int          // index of the ingress port
	Layer    packet.Layer // what the packets start with
	Now      int64        // monotonic time of the round, in nanoseconds
	Bufs     []*buffer.Buf
	Verdicts []Verdict

	hdrs   []packet.Headers
	parsed []bool
}

// NewBatch returns a batch with room for size packets.
func NewBatch(size int) *Batch {
	return &Batch{
		Bufs:     cacheline.Make[*buffer.Buf](0, size),
		Verdicts: cacheline.Make[Verdict](size, size),
		hdrs:     cacheline.Make[packet.Headers](size, size),
		parsed:   cacheline.Make[bool](size, size),
	}
}

// Reset prepares the batch for n packets already placed in Bufs[:n]:
// every verdict is Pass and no headers are parsed.
func (b *Batch) Reset(n int) {
	b.Bufs = b.Bufs[:n]
	clear(b.Verdicts[:n])
	clear(b.parsed[:n])
}

// Len returns the number of packets.
func (b *Batch) Len() int { return len(b.Bufs) }

// Headers returns packet i's parsed headers, parsing them on first use.
// If the packet is malformed it sets the packet's verdict to a drop with
// the parser's reason and returns false; callers then skip the packet.
func (b *Batch) Headers(i int) (*packet.Headers, bool) {
	h := &b.hdrs[i]
	if !b.parsed[i] {
		b.parsed[i] = true
		if ok, reason := packet.Parse(b.Bufs[i].Bytes(), b.Layer, h); !ok {
			b.Verdicts[i] = DropVerdict(reason)
			h.L3Off = -1
			return h, false
		}
	}
	return h, h.L3Off >= 0
}

// Undecided returns packet i's headers if its verdict is still Pass and it
// parses; a program skips every packet for which it returns false (one a
// program before it decided, or a malformed one, now dropped with the
// parser's reason).
func (b *Batch) Undecided(i int) (*packet.Headers, bool) {
	if b.Verdicts[i] != PassVerdict {
		return nil, false
	}
	return b.Headers(i)
}

// Program decides verdicts for a batch. Run only changes the verdicts of
// packets whose verdict is still Pass, may change those packets' data (to
// rewrite headers), and is called concurrently by every worker.
type Program interface {
	Name() string
	Run(b *Batch)
}

// Func adapts a function to a Program.
type Func struct {
	ProgramName string
	F           func(b *Batch)
}

func (f Func) Name() string { return f.ProgramName }
func (f Func) Run(b *Batch) { f.F(b) }
