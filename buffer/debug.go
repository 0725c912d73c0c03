package buffer

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
)

const (
	poisonByte = 0x6b // the kernel's POISON_FREE
	siteDepth  = 8
	maxReports = 64
)

// debugState backs Config.Debug: the call stacks that last took and freed
// each buffer, and misuse reports. Stacks are raw PCs in preallocated
// arrays, resolved only when reported.
type debugState struct {
	takenAt [][siteDepth]uintptr
	freedAt [][siteDepth]uintptr

	mu      sync.Mutex
	reports []string
	dropped int
}

func newDebugState(n int) *debugState {
	return &debugState{
		takenAt: make([][siteDepth]uintptr, n),
		freedAt: make([][siteDepth]uintptr, n),
	}
}

func poison(b *Buf) {
	f := b.frame()
	for i := range f {
		f[i] = poisonByte
	}
}

// taken records the caller and checks that nobody wrote to the frame
// while it was free.
func (d *debugState) taken(_ *Cache, b *Buf) {
	f := b.frame()
	for i, v := range f {
		if v != poisonByte {
			d.report(fmt.Sprintf("buffer %d (class %d) written after free at frame offset %d; freed at %s",
				b.id, b.Class(), i, site(&d.freedAt[b.id])))
			break
		}
	}
	runtime.Callers(1, d.takenAt[b.id][:])
}

func (d *debugState) freed(b *Buf) {
	runtime.Callers(1, d.freedAt[b.id][:])
	poison(b)
}

func (d *debugState) reportDoubleFree(b *Buf) {
	var now [siteDepth]uintptr
	runtime.Callers(1, now[:])
	d.report(fmt.Sprintf("double free of buffer %d (class %d) at %s; freed before at %s; taken at %s",
		b.id, b.Class(), site(&now), site(&d.freedAt[b.id]), site(&d.takenAt[b.id])))
}

func (d *debugState) reportForeign() {
	var now [siteDepth]uintptr
	runtime.Callers(1, now[:])
	d.report("free of a buffer that is not from this pool at " + site(&now))
}

func (d *debugState) report(msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.reports) < maxReports {
		d.reports = append(d.reports, msg)
	} else {
		d.dropped++
	}
}

func (d *debugState) reportList() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := slices.Clone(d.reports)
	if d.dropped > 0 {
		r = append(r, fmt.Sprintf("... and %d more reports", d.dropped))
	}
	return r
}

// sitesOf returns "site (N buffers)" for the given buffers, most frequent
// site first.
func (d *debugState) sitesOf(ids []uint32) []string {
	count := map[string]int{}
	for _, id := range ids {
		count[site(&d.takenAt[id])]++
	}
	out := make([]string, 0, len(count))
	for s := range count {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b string) int {
		if count[a] != count[b] {
			return count[b] - count[a]
		}
		return strings.Compare(a, b)
	})
	for i, s := range out {
		out[i] = fmt.Sprintf("%s (%d buffers)", s, count[s])
	}
	return out
}

// site names the first frame outside this package's own machinery: the
// caller of Get, Consume or Drop.
func site(pcs *[siteDepth]uintptr) string {
	n := 0
	for n < len(pcs) && pcs[n] != 0 {
		n++
	}
	if n == 0 {
		return "unknown"
	}
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if !isInternal(f.Function) {
			return fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line)
		}
		if !more {
			return "unknown"
		}
	}
}

func isInternal(fn string) bool {
	const pkg = "softnet.dev/buffer."
	rest, ok := strings.CutPrefix(fn, pkg)
	if !ok {
		return false
	}
	return strings.HasPrefix(rest, "(*Cache)") || strings.HasPrefix(rest, "(*debugState)") ||
		strings.HasPrefix(rest, "(*Buf)") || strings.HasPrefix(rest, "poison")
}
