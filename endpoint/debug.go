package endpoint

import (
	"fmt"
	"runtime"
	"strings"
)

const (
	poisonByte = 0x6b // as the buffer pool's debug mode: the kernel's POISON_FREE
	maxReports = 64
)

// debugSites backs Config.Debug: where each buffer's view was last
// released, and under which generation, so that a second release of the
// same view names both call sites. It belongs to the application side
// (under the endpoint's mutex).
type debugSites struct {
	relPC   []uintptr
	relGen  []uint32
	reports []string
}

func newDebugSites(n int) *debugSites {
	return &debugSites{relPC: make([]uintptr, n), relGen: make([]uint32, n)}
}

func (d *debugSites) released(id, gen uint32) {
	d.relPC[id], d.relGen[id] = callerPC(), gen
}

// doubleRelease reports, for a refused release, whether it is a second
// release of a view released before, naming both sites.
func (d *debugSites) doubleRelease(id, gen uint32) (string, bool) {
	if d.relGen[id] != gen || d.relPC[id] == 0 {
		return "", false
	}
	msg := fmt.Sprintf("double release at %s; released before at %s", pcSite(callerPC()), pcSite(d.relPC[id]))
	if len(d.reports) < maxReports {
		d.reports = append(d.reports, fmt.Sprintf("buffer %d: %s", id, msg))
	}
	return msg, true
}

// callerPC returns the first caller outside the endpoint's methods: the
// application's call site.
func callerPC() uintptr {
	var pcs [16]uintptr
	n := runtime.Callers(2, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "softnet.dev/endpoint.(*") && !strings.HasPrefix(f.Function, "softnet.dev/endpoint.callerPC") {
			return f.PC
		}
		if !more {
			return 0
		}
	}
}

func pcSite(pc uintptr) string {
	if pc == 0 {
		return "unknown"
	}
	f, _ := runtime.CallersFrames([]uintptr{pc}).Next()
	return fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line)
}

// poisonView overwrites a released view's packet, so that a read after
// release sees 0x6b bytes instead of plausible data.
func poisonView(v *View) {
	for i := range v.Packet {
		v.Packet[i] = poisonByte
	}
}

// DebugReports returns the misuse reports of Config.Debug: double
// releases with both call sites.
func (e *Endpoint) DebugReports() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dbg == nil {
		return nil
	}
	return append([]string(nil), e.dbg.reports...)
}
