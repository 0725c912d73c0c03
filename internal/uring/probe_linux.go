package uring

import (
	"fmt"
	"sync"
	"unsafe"
)

// Probes records which operations the running kernel supports.
type Probes struct {
	LastOp uint8
	ops    [256]bool
}

// Has reports whether the kernel supports op.
func (p *Probes) Has(op uint8) bool { return p.ops[op] }

// probeOps is the number of entries asked of IORING_REGISTER_PROBE: every
// opcode fits.
const probeOps = 256

// Probe asks the ring which operations the kernel supports.
func (r *Ring) Probe() (*Probes, error) {
	buf := make([]byte, unsafe.Sizeof(probeHdr{})+probeOps*unsafe.Sizeof(probeOp{}))
	if _, errno := register(r.fd, registerProbe, unsafe.Pointer(&buf[0]), probeOps); errno != 0 {
		return nil, fmt.Errorf("io_uring_register probe: %w", errno)
	}
	h := (*probeHdr)(unsafe.Pointer(&buf[0]))
	ops := unsafe.Slice((*probeOp)(unsafe.Pointer(&buf[unsafe.Sizeof(probeHdr{})])), probeOps)
	p := &Probes{LastOp: h.lastOp}
	for _, o := range ops[:h.opsLen] {
		if o.flags&opSupported != 0 {
			p.ops[o.op] = true
		}
	}
	return p, nil
}

// Supported probes the kernel once per process, on a throwaway ring: the
// probes, or why io_uring cannot be used (matching ErrUnavailable if it
// is missing or refused).
var Supported = sync.OnceValues(func() (*Probes, error) {
	r, err := New(Options{Entries: 2})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Probe()
})
