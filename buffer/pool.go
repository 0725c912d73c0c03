package buffer

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Pool owns the frames and metadata of every buffer, the shared depot and
// the registry of caches. Its methods are safe for concurrent use, except
// Close.
type Pool struct {
	cfg     Config
	classes []classInfo
	meta    []Buf // all buffers, class by class; holds no Go pointers
	// metaBase and metaSize locate meta for owns, without dereferencing.
	metaBase, metaSize uintptr
	slabs              [][]byte
	caches             []atomic.Pointer[Cache]
	ncaches            atomic.Int32
	mu                 sync.Mutex // serializes NewCache
	debug              *debugState
	closed             bool
}

type classInfo struct {
	room, frame int
	first, n    int // meta[first:first+n]
	depot       depot
}

// NewPool maps the slabs of every class and puts all buffers in the depot.
func NewPool(cfg Config) (*Pool, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Pool{cfg: cfg, classes: make([]classInfo, len(cfg.Classes))}
	total := 0
	for _, c := range cfg.Classes {
		total += c.Count
	}
	p.meta = make([]Buf, total)
	p.metaBase = uintptr(unsafe.Pointer(unsafe.SliceData(p.meta)))
	p.metaSize = uintptr(total) * unsafe.Sizeof(Buf{})
	p.caches = make([]atomic.Pointer[Cache], cfg.MaxCaches)
	first := 0
	for i, c := range cfg.Classes {
		ci := &p.classes[i]
		ci.room, ci.frame, ci.first, ci.n = c.Room, frameSize(cfg.Headroom, c.Room), first, c.Count
		slab, err := mapSlab(ci.frame * ci.n)
		if err != nil {
			p.unmap()
			return nil, fmt.Errorf("buffer: class %d (%d x %d bytes): %w", i, ci.n, ci.frame, err)
		}
		p.slabs = append(p.slabs, slab)
		base := uintptr(unsafe.Pointer(unsafe.SliceData(slab)))
		ci.depot.free = make([]*Buf, 0, ci.n)
		// Push in reverse so the first Gets take the lowest frames.
		for j := ci.n - 1; j >= 0; j-- {
			b := &p.meta[first+j]
			b.addr = base + uintptr(j*ci.frame)
			b.size = uint32(ci.frame)
			b.id = uint32(first + j)
			b.refs.Store(1)
			b.state = ownedState(free, Class(i))
			ci.depot.free = append(ci.depot.free, b)
		}
		first += ci.n
	}
	if cfg.Debug {
		p.debug = newDebugState(total)
		for i := range p.meta {
			poison(&p.meta[i])
		}
	}
	return p, nil
}

// Config returns the pool's configuration with defaults filled in.
func (p *Pool) Config() Config { return p.cfg }

// NumClasses returns the number of size classes.
func (p *Pool) NumClasses() int { return len(p.classes) }

// Room returns the data room of a class (frame size less headroom, at
// least the configured Room).
func (p *Pool) Room(c Class) int {
	return p.classes[c].frame - p.cfg.Headroom
}

// ClassFor returns the smallest class whose room holds n bytes.
func (p *Pool) ClassFor(n int) (Class, bool) {
	for i := range p.classes {
		if n <= p.classes[i].room {
			return Class(i), true
		}
	}
	return 0, false
}

// lookup returns the buffer with the given id, or nil.
func (p *Pool) lookup(id uint32) *Buf {
	if uint64(id) >= uint64(len(p.meta)) {
		return nil
	}
	return &p.meta[id]
}

// owns reports whether b is one of this pool's buffers.
func (p *Pool) owns(b *Buf) bool {
	// One subtraction and compare: a *Buf inside the metadata array can
	// only point at an element of it.
	return uintptr(unsafe.Pointer(b))-p.metaBase < p.metaSize
}

// sole reports whether b is a buffer of this pool in use by the given
// cache with a single reference: the case whose free is only a push.
func (p *Pool) sole(b *Buf, owner uint16) bool {
	return p.owns(b) && b.owner() == owner && b.refs.Load() == 1
}

// LeakError lists the buffers that were not returned when the pool was
// closed.
type LeakError struct {
	Outstanding int      // buffers still in use
	ByClass     []int    // outstanding per class
	Sites       []string // with Config.Debug: where each was taken, most frequent first
	Reports     []string // with Config.Debug: double frees and writes after free
}

func (e *LeakError) Error() string {
	msg := fmt.Sprintf("buffer: %d buffers not returned (per class %v)", e.Outstanding, e.ByClass)
	if e.Outstanding == 0 {
		msg = fmt.Sprintf("buffer: %d misuse reports", len(e.Reports))
	}
	for _, s := range e.Sites {
		msg += "\n\ttaken at " + s
	}
	for _, r := range e.Reports {
		msg += "\n\t" + r
	}
	return msg
}

// check returns a *LeakError if any buffer is in use (or, with
// Config.Debug, if misuse was reported), else nil. The pool must be
// quiescent: every goroutine that used it has stopped and been waited for,
// which only Close can assume.
func (p *Pool) check() error {
	e := &LeakError{ByClass: make([]int, len(p.classes))}
	var leaked []uint32
	for i := range p.meta {
		b := &p.meta[i]
		if b.owner() != free {
			e.Outstanding++
			e.ByClass[b.Class()]++
			leaked = append(leaked, b.id)
		}
	}
	if p.debug != nil {
		e.Sites = p.debug.sitesOf(leaked)
		e.Reports = p.debug.reportList()
	}
	if e.Outstanding == 0 && len(e.Reports) == 0 {
		return nil
	}
	return e
}

// Close checks for leaks (a *LeakError) and releases the slabs. If buffers
// are still in use their memory stays mapped, so a late user cannot fault;
// the error says how many. Using any Buf after a successful Close is a
// bug. Close is idempotent.
func (p *Pool) Close() error {
	if p.closed {
		return nil
	}
	for i := range p.caches {
		if c := p.caches[i].Load(); c != nil {
			c.Close()
		}
	}
	err := p.check()
	p.closed = true
	var leak *LeakError
	if errors.As(err, &leak) && leak.Outstanding > 0 {
		return err
	}
	return errors.Join(err, p.unmap())
}

func (p *Pool) unmap() error {
	var errs []error
	for _, s := range p.slabs {
		errs = append(errs, unmapSlab(s))
	}
	p.slabs = nil
	return errors.Join(errs...)
}

// Slab is one class's frames as the single area they are carved from:
// frame i starts at Mem[i*Frame] and belongs to the buffer with ID
// First+i. A device that shares memory with the kernel by address, as
// AF_XDP registers its UMEM, registers Mem and speaks of frames by
// offset.
type Slab struct {
	Mem   []byte
	Frame int    // bytes per frame, headroom included
	First uint32 // ID of the buffer of frame 0
}

// Slab returns class c's frames. The memory is the pool's for its whole
// life: a device that registers it must give it up before Close.
func (p *Pool) Slab(c Class) Slab {
	ci := &p.classes[c]
	return Slab{Mem: p.slabs[c], Frame: ci.frame, First: uint32(ci.first)}
}

// Buf returns the buffer with the given ID, or nil if there is none. It
// is for a device that lent frames to the kernel and gets back only their
// offsets, as AF_XDP's completion ring returns them: the device must
// keep its own record of which IDs it lent, since any other buffer is
// someone else's.
func (p *Pool) Buf(id uint32) *Buf { return p.lookup(id) }
