package afxdp

import (
	"slices"
	"sync"

	"softnet.dev/buffer"
)

// FillBuffers bounds what one worker lends its queues' fill rings beyond
// their floors, together: a queue that receives a lot grows its fill
// level into this share, and memory lent to the kernel stays bounded per
// worker whatever the number of ports (at most a quarter of the UMEM
// class's buffers, as tun.RingBuffers). It lets one busy queue fill a
// DefaultRxRing fill ring.
const FillBuffers = 2048

// A queue keeps at least its floor lent: an idle queue costs its floor
// and nothing more, and a burst that arrives on it finds that many
// frames. The floors of one worker's queues together stay within
// FloorBuffers, so that what a worker lends is bounded whatever the
// number of ports: past FloorBuffers/minFloor queues (128) a worker's
// floors shrink below minFloor, down to one frame, and its busy queues
// still grow into FillBuffers.
const (
	minFloor     = 16
	maxFloor     = 64
	FloorBuffers = 2048
)

// WorkerBuffers is the most frames of the UMEM's class that one worker
// lends its queues' fill rings, over every port: the buffer pool must
// hold that many per worker beyond what its workers use themselves
// (the switch sizes its pool so, through its kinds' table).
const WorkerBuffers = FillBuffers + FloorBuffers

// refillChunk is how many buffers one bulk get takes for a fill ring.
const refillChunk = 64

// fillBudget is one worker's allowance for its queues' fill rings: the
// per-CPU NAPI cache one level up, as the TUN queues' shared io_uring
// buffer groups are. A worker's cache identifies it, so budgets are kept
// by cache. Only the worker's goroutine touches a budget (its queues are
// attached, polled and detached there); the registry's lock covers only
// the map.
type fillBudget struct {
	cache  *buffer.Cache
	queues []*rxQueue
	floor  int // what each queue may always lend
	shared int // what the queues may lend above their floors, together
	extra  int // what they lend above their floors now
	bufs   [refillChunk]*buffer.Buf
}

var budgets = struct {
	sync.Mutex
	m map[*buffer.Cache]*fillBudget
}{m: map[*buffer.Cache]*fillBudget{}}

// join puts q on the budget of c's worker.
func (q *rxQueue) join(c *buffer.Cache) {
	if q.budget != nil {
		q.leave()
	}
	budgets.Lock()
	b := budgets.m[c]
	if b == nil {
		b = &fillBudget{cache: c, shared: min(FillBuffers, q.p.frames/4)}
		budgets.m[c] = b
	}
	budgets.Unlock()
	b.queues = append(b.queues, q)
	q.budget = b
	q.need = q.p.piecesPerFrame()
	b.resize()
}

// leave takes q off its budget; what it lends stays lent until the port
// closes.
func (q *rxQueue) leave() {
	b := q.budget
	if b == nil {
		return
	}
	q.budget = nil
	if i := slices.Index(b.queues, q); i >= 0 {
		b.queues = slices.Delete(b.queues, i, i+1)
	}
	if len(b.queues) == 0 {
		budgets.Lock()
		if budgets.m[b.cache] == b {
			delete(budgets.m, b.cache)
		}
		budgets.Unlock()
		return
	}
	b.resize()
}

// resize sets the floor for the number of queues: the shared part
// spread over them, within [minFloor, maxFloor], and all of them within
// FloorBuffers; and recounts what they lend above it.
func (b *fillBudget) resize() {
	b.floor = min(max(b.shared/len(b.queues), minFloor), maxFloor, max(FloorBuffers/len(b.queues), 1))
	b.extra = 0
	for _, q := range b.queues {
		q.target = max(q.target, b.floor, q.need)
		b.extra += max(0, q.lent-b.floor)
	}
}

// lend records that q lends k more buffers (k < 0: fewer).
func (b *fillBudget) lend(q *rxQueue, k int) {
	before := max(0, q.lent-b.floor)
	q.lent += k
	b.extra += max(0, q.lent-b.floor) - before
}

// allowance is how many more buffers q may lend now: up to its target,
// the part above the floor taken from what the worker's queues share.
// A queue may always lend what its longest frame takes, even above a
// floor that many ports made smaller: with less it could receive
// nothing at all.
func (b *fillBudget) allowance(q *rxQueue) int {
	want := q.target - q.lent
	if want <= 0 {
		return 0
	}
	own := max(0, max(b.floor, q.need)-q.lent)
	if want > own {
		want = own + min(want-own, max(0, b.shared-b.extra))
	}
	return want
}
