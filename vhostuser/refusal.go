//go:build linux

package vhostuser

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Refusal says what a port refused of its front-end or of the guest,
// and why. Each is counted (Stats.Refusals): the front-end and the
// guest are not trusted, and an operator must be able to tell a broken
// VM from a hostile one from the counters alone.
type Refusal uint8

const (
	// Messages of the front-end, on the port's control goroutine.
	RefusedMalformed   Refusal = iota // a message that does not parse: the session ends
	RefusedTruncated                  // a message cut short by the front-end hanging up
	RefusedRequest                    // a request naming what the port does not have, or a value out of range
	RefusedUnsupported                // a request this back-end does not know
	RefusedMemTable                   // a memory table that cannot be mapped safely: past its file, overlapping, not in memory
	RefusedNotEventfd                 // a kick or call descriptor that is not an eventfd
	RefusedRingAddress                // a ring outside the memory table or misaligned: it does not start
	RefusedMemoryFault                // guest memory faulted under the control plane: the session ends

	// Descriptor chains of the guest (walkError), on the worker: each
	// is a dropped packet.
	RefusedChainBadIndex
	RefusedChainTooLong
	RefusedChainBadMemory
	RefusedChainBadFlags
	RefusedChainTooBig

	// Rings given up until the front-end restarts them, on the worker.
	RefusedRingAhead    // an available index more than a ring ahead
	RefusedRingBadChain // a bad receive chain: the ring's order cannot be kept
	RefusedRingFault    // guest memory faulted (its file shrank under the mapping)

	NumRefusals
)

var refusalNames = [NumRefusals]string{
	"malformed", "truncated", "bad_request", "unsupported", "bad_mem_table", "not_eventfd", "bad_ring_address", "memory_fault",
	"chain_bad_index", "chain_too_long", "chain_bad_memory", "chain_bad_flags", "chain_too_big",
	"ring_ahead", "ring_bad_chain", "ring_fault",
}

func (r Refusal) String() string {
	if r < NumRefusals {
		return refusalNames[r]
	}
	return fmt.Sprintf("refusal %d", r)
}

// Refusals counts refusals by reason.
type Refusals [NumRefusals]uint64

// chainRefusal is the refusal of a bad descriptor chain.
func chainRefusal(e walkError) Refusal {
	return RefusedChainBadIndex + Refusal(e-walkBadIndex)
}

// Sum returns the refusals from first to last, both included.
func (c *Refusals) Sum(first, last Refusal) uint64 {
	var n uint64
	for r := first; r <= last; r++ {
		n += c[r]
	}
	return n
}

// String lists the non-zero counters, e.g. "not_eventfd 1, ring_ahead 2",
// or "none".
func (c *Refusals) String() string {
	var b strings.Builder
	for r, n := range c {
		if n != 0 {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %d", Refusal(r), n)
		}
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// MarshalJSON writes the non-zero counters as an object keyed by
// reason, e.g. {"not_eventfd":1}.
func (c Refusals) MarshalJSON() ([]byte, error) {
	m := make(map[string]uint64)
	for r, n := range c {
		if n != 0 {
			m[Refusal(r).String()] = n
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads the form MarshalJSON writes; a reason it does not
// know (from a newer switch) is left out.
func (c *Refusals) UnmarshalJSON(b []byte) error {
	var m map[string]uint64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*c = Refusals{}
	for r, name := range refusalNames {
		c[r] = m[name]
	}
	return nil
}

// refusedError is an error that counts as a refusal of reason.
type refusedError struct {
	reason Refusal
	err    error
}

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// refuse marks err as a refusal of reason.
func refuse(reason Refusal, err error) error { return &refusedError{reason, err} }
