package endpoint

import (
	"sync/atomic"

	"golang.org/x/sys/unix"

	"softnet.dev/buffer"
	"softnet.dev/internal/cacheline"
)

// workerState is what one worker keeps about lending. Everything but
// frames, efd and armed is touched by that worker alone (or by Close
// once the workers have stopped), so none of it needs atomics. The
// groups are on lines of their own: the worker writes the scratch slices
// at every packet, and the application reads frames and armed at every
// receive and release.
type workerState struct {
	_      [cacheline.Size]byte
	t      *Table
	index  int
	lentTo []*lane  // by buffer id: the lane holding it, nil if none
	gen    []uint32 // by buffer id: generation of its last lend, or sendGen
	// bufOf and frames are by buffer id the buffer and its frame, set by
	// know when the worker first hands the buffer out and never changed:
	// releases name buffers by id, and the application finds the frame
	// of a lend in frames, the one table it reads.
	bufOf  []*buffer.Buf
	frames [][]byte

	_      [cacheline.Size]byte
	pend   []pending // matched by Run, consumed by Deliver
	staged []*lane   // lanes with views staged in this Deliver
	tokens []token
	frees  []*buffer.Buf

	// The send queue's wakeup: an application that releases or sends
	// while the worker sleeps writes efd (only if armed).
	_     [cacheline.Size]byte
	efd   int
	armed atomic.Bool
	_     [cacheline.Size]byte
}

// pending is a packet Run matched, in batch order.
type pending struct {
	buf  *buffer.Buf
	ep   *Endpoint
	lend lend
}

const scratch = 64

func newWorkerState(t *Table, index int) (*workerState, error) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &workerState{
		t:      t,
		index:  index,
		lentTo: make([]*lane, t.capacity),
		gen:    make([]uint32, t.capacity),
		bufOf:  make([]*buffer.Buf, t.capacity),
		frames: make([][]byte, t.capacity),
		pend:   make([]pending, 0, 256),
		tokens: make([]token, scratch),
		frees:  make([]*buffer.Buf, 0, scratch),
		efd:    efd,
	}, nil
}

// know records buf in bufOf and frames, the first time, and returns its
// id. A buffer's metadata and frame never move, so the entries are
// written once, and the lines the application reads stay shared.
func (ws *workerState) know(buf *buffer.Buf) uint32 {
	id := buf.ID()
	if ws.bufOf[id] == nil {
		ws.bufOf[id], ws.frames[id] = buf, buf.Frame()
	}
	return id
}

// kick wakes the worker if it sleeps; called by applications after they
// put something into one of its rings.
func (ws *workerState) kick() {
	if ws.armed.Load() {
		one := [8]byte{1}
		_, _ = unix.Write(ws.efd, one[:])
	}
}

// free returns buf to the pool through the worker's cache, in batches.
func (ws *workerState) free(c *buffer.Cache, buf *buffer.Buf) {
	ws.frees = append(ws.frees, buf)
	if len(ws.frees) == cap(ws.frees) {
		ws.flush(c)
	}
}

func (ws *workerState) flush(c *buffer.Cache) {
	if len(ws.frees) > 0 {
		c.ConsumeBulk(ws.frees)
		clear(ws.frees)
		ws.frees = ws.frees[:0]
	}
}
