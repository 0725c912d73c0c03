package ring

import "fmt"

// maxCapacity keeps every capacity representable as an int on 32-bit
// platforms and leaves the free-running uint64 indices astronomically far
// from wrapping.
const maxCapacity = 1 << 30

// checkCapacity is shared by both constructors: masking a free-running index
// with capacity-1 only selects a slot when capacity is a power of two, and a
// one-slot ring would make every operation a full/empty edge case.
func checkCapacity(n int) error {
	switch {
	case n < 2:
		return fmt.Errorf("ring: capacity %d: must be at least 2", n)
	case n > maxCapacity:
		return fmt.Errorf("ring: capacity %d: exceeds maximum %d", n, maxCapacity)
	case n&(n-1) != 0:
		return fmt.Errorf("ring: capacity %d: not a power of two", n)
	}
	return nil
}

// occupancy turns a head/tail pair into a length. Callers load tail before
// head so the difference cannot underflow, but the two loads are not one
// snapshot: by the time head is read the ring may have drained and refilled,
// so the result is clamped to what the ring can actually hold.
func occupancy(head, tail uint64, capacity int) int {
	return int(min(head-tail, uint64(capacity)))
}
