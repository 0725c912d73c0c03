package buffer

import (
	"sync"

	"softnet.dev/internal/cacheline"
)

// depot is the shared store of free buffers of one class. Caches touch it
// once per half-cache, never per buffer, so a mutex is cheap here.
type depot struct {
	mu   sync.Mutex
	free []*Buf // stack; cap is the class count, so it never grows
	_    cacheline.Pad
}

// take moves between min and len(dst) buffers into dst and returns how
// many, or takes nothing and returns 0 if fewer than min are free.
func (d *depot) take(dst []*Buf, min int) int {
	d.mu.Lock()
	n := len(d.free)
	if n < min {
		d.mu.Unlock()
		return 0
	}
	k := copy(dst, d.free[max(0, n-len(dst)):])
	clear(d.free[n-k:])
	d.free = d.free[:n-k]
	d.mu.Unlock()
	return k
}

func (d *depot) put(src []*Buf) {
	d.mu.Lock()
	d.free = append(d.free, src...)
	d.mu.Unlock()
}

func (d *depot) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.free)
}
