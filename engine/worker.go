package engine

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/attach"
	"softnet.dev/internal/cacheline"
	"softnet.dev/internal/counter"
	"softnet.dev/port"
	"softnet.dev/program"
)

// publishEvery is how many rounds a busy worker runs between publishing
// its counters (and reading the clock for program.Batch.Now): often
// enough for live stats, rare enough to cost nothing per packet even at
// batch 1.
const publishEvery = 64

// rxQueue is one RX queue a worker polls. A queue that tells the worker
// when it has packets (port.Notifier) is polled only then and while it
// finds packets: the worker's poll list, as NAPI's, so that hundreds of
// idle queues cost nothing per round.
type rxQueue struct {
	port       *portState
	q          port.RxQueue
	fd         int
	registered bool // fd is in the worker's epoll set
	notifier   bool // polled only from the poll list
	active     bool // on the poll list
	// retired: its port left the worker's view or went down, and the
	// worker gave the queue up (retire): never polled or armed again.
	retired bool
}

type worker struct {
	e      *Engine
	index  int
	cache  *buffer.Cache
	batch  *program.Batch
	rxBufs []*buffer.Buf // the batch's backing array, full length, for Receive
	// view is the generation of the engine's ports the worker runs: the
	// queues below are its ports', and it changes only between rounds.
	view *portSet
	rxqs []*rxQueue
	// active is the poll list: the queues the next round polls; polling
	// is the list the current round walks.
	active, polling []*rxQueue
	// byFD is, by descriptor, the queues that wait on it: the first is
	// polled when it is readable, and the descriptor leaves the epoll set
	// with the last.
	byFD      [][]*rxQueue
	notifiers int            // queues with a descriptor that are polled from the list
	txqs      []port.TxQueue // by port index; nil if the port does not transmit
	// flushers are the TX queues that defer their sending to Flush (by
	// port index; nil for the others), and toFlush the indexes of those
	// that were given packets this round.
	flushers []port.Flusher
	toFlush  []int
	flushing []bool          // by port index: in toFlush
	egress   [][]*buffer.Buf // by port index: this round's packets for it
	local    [][]*buffer.Buf // by consumer index
	poll     *poller
	epoch    time.Time
	now      int64
	// curPort is the port whose packets the worker handles now, for the
	// drop monitor: -1 outside any port's work.
	curPort int

	stop     atomic.Bool
	sleeping atomic.Bool
	thread   atomic.Int32 // the OS thread with Config.LockOSThread, else 0

	// adopted is view's generation, for AddPort and RemovePort to wait on.
	adopted atomic.Uint64

	ctr []uint64 // see stats.go for the layout
	// ctrOf is the port each block of ctr counts: a port that takes a
	// removed port's index starts from zero.
	ctrOf    []*portState
	pub      atomic.Pointer[counter.Published]
	panicked map[string]bool // programs already logged as panicking
}

func newWorker(e *Engine, index int) (*worker, error) {
	cfg := e.cfg
	w := &worker{
		e:        e,
		index:    index,
		batch:    program.NewBatch(cfg.Batch),
		view:     &portSet{},
		local:    cacheline.Make[[]*buffer.Buf](len(cfg.Consumers), len(cfg.Consumers)),
		epoch:    e.epoch,
		panicked: map[string]bool{},
	}
	w.rxBufs = w.batch.Bufs[:cfg.Batch]
	w.growCounters(len(e.set.Load().ports))
	for i := range w.local {
		w.local[i] = cacheline.Make[*buffer.Buf](0, cfg.Batch)
	}
	var err error
	if w.poll, err = newPoller(); err != nil {
		return nil, fmt.Errorf("engine: worker %d: %w", index, err)
	}
	if w.cache, err = cfg.Pool.NewCache(w.kick); err != nil {
		w.poll.close()
		return nil, fmt.Errorf("engine: worker %d: %w", index, err)
	}
	w.cache.SetDropHook(w.dropped)
	return w, nil
}

// growCounters makes room for the counters of ports ports, keeping the
// values counted so far.
func (w *worker) growCounters(ports int) {
	n := numCounters(ports)
	if len(w.ctr) >= n {
		return
	}
	ctr := cacheline.Make[uint64](n, n)
	copy(ctr, w.ctr)
	w.ctr = ctr
	w.ctrOf = append(w.ctrOf, make([]*portState, ports-len(w.ctrOf))...)
	pub := counter.NewPublished(n)
	pub.Publish(w.ctr)
	w.pub.Store(&pub)
}

// adopt makes next the worker's ports, between rounds: the queues of
// ports that left are given up (what they lent taken back, their
// descriptors out of the poller) and those of ports that joined are
// taken on. A worker that stops adopts an empty set, so that each run
// starts from nothing.
func (w *worker) adopt(next *portSet) {
	old := w.view
	keep := w.rxqs[:0]
	for _, rq := range w.rxqs {
		if next.port(rq.port.index) == rq.port {
			keep = append(keep, rq)
			continue
		}
		w.retire(rq)
	}
	clear(w.rxqs[len(keep):])
	w.rxqs = keep
	for i, tq := range w.txqs {
		if tq == nil || next.port(i) == old.port(i) {
			continue
		}
		if a, ok := tq.(attach.Queue); ok {
			a.Detach(w.cache)
		}
		w.txqs[i], w.flushers[i] = nil, nil
	}
	if n := len(next.ports); n > len(w.txqs) {
		w.txqs = append(w.txqs, make([]port.TxQueue, n-len(w.txqs))...)
		w.flushers = append(w.flushers, make([]port.Flusher, n-len(w.flushers))...)
		w.flushing = append(w.flushing, make([]bool, n-len(w.flushing))...)
		w.egress = append(w.egress, make([][]*buffer.Buf, n-len(w.egress))...)
		w.growCounters(n)
	}
	for i, p := range next.ports {
		if p != nil && old.port(i) != p {
			w.join(p)
		}
	}
	w.view = next
	w.adopted.Store(next.gen)
	select {
	case w.e.adoptedSignal <- struct{}{}:
	default: // publish has a signal to look again already
	}
}

// join takes on p's queues: its TX queue for this worker and every
// RX queue q with q ≡ worker (mod workers).
func (w *worker) join(p *portState) {
	if w.ctrOf[p.index] != p {
		w.ctrOf[p.index] = p
		clear(w.ctr[portCounter(p.index, 0):portCounter(p.index+1, 0)])
	}
	if tq := p.port.TxQueue(w.index); tq != nil {
		if a, ok := tq.(attach.Queue); ok {
			a.Attach(w.cache)
		}
		w.txqs[p.index] = tq
		w.flushers[p.index], _ = tq.(port.Flusher)
		if w.egress[p.index] == nil {
			w.egress[p.index] = cacheline.Make[*buffer.Buf](0, w.e.cfg.Batch)
		}
	}
	for q := w.index; q < p.info.Queues; q += w.e.cfg.Workers {
		q := p.port.RxQueue(q)
		if q == nil {
			break
		}
		rq := &rxQueue{port: p, q: q}
		if n, ok := q.(port.Notifier); ok {
			n.SetNotify(func() { w.activate(rq) })
		}
		if a, ok := q.(attach.Queue); ok {
			a.Attach(w.cache)
		}
		rq.fd = q.FD()
		if rq.fd >= 0 {
			if err := w.register(rq); err != nil {
				w.e.fail(p, fmt.Errorf("worker %d: %w", w.index, err))
			}
			if _, ok := q.(port.Notifier); ok {
				rq.notifier = true
				w.notifiers++
			}
		}
		w.rxqs = append(w.rxqs, rq)
		w.activate(rq) // polled once: packets may wait already
	}
}

// activate puts rq on the poll list.
func (w *worker) activate(rq *rxQueue) {
	if !rq.active && !rq.retired {
		rq.active = true
		w.active = append(w.active, rq)
	}
}

// retire gives rq up for good, between rounds, once its port left the
// worker's view or went down: what it lent is taken back (attach.Queue,
// as after its last use) and its descriptor leaves the epoll set, or,
// shared with other queues (a worker's io_uring), stays there for them.
// A down port's queue must go at once: the first queue on a shared
// descriptor is the one polled when it is readable and the one that
// arms it for all, and a down queue is neither, so the descriptor would
// stay readable with no one to reap what it signals (the others' packets
// among it): the worker would spin and the others' packets wait.
func (w *worker) retire(rq *rxQueue) {
	if rq.retired {
		return
	}
	rq.retired = true
	if a, ok := rq.q.(attach.Queue); ok {
		a.Detach(w.cache)
	}
	w.unregister(rq)
	if rq.notifier && rq.fd >= 0 {
		w.notifiers--
	}
}

// register adds rq's descriptor to the epoll set, unless a queue that
// shares it did.
func (w *worker) register(rq *rxQueue) error {
	if rq.fd >= len(w.byFD) {
		w.byFD = append(w.byFD, make([][]*rxQueue, rq.fd+1-len(w.byFD))...)
	}
	if len(w.byFD[rq.fd]) == 0 {
		if err := w.poll.add(rq.fd); err != nil {
			return err
		}
	}
	w.byFD[rq.fd] = append(w.byFD[rq.fd], rq)
	rq.registered = true
	return nil
}

// unregister takes rq off its descriptor, which leaves the epoll set
// with the last queue on it.
func (w *worker) unregister(rq *rxQueue) {
	if !rq.registered {
		return
	}
	rq.registered = false
	users := w.byFD[rq.fd]
	if i := slices.Index(users, rq); i >= 0 {
		users = slices.Delete(users, i, i+1)
	}
	w.byFD[rq.fd] = users
	if len(users) == 0 {
		w.poll.remove(rq.fd)
	}
}

// ready puts on the poll list the first queue of each descriptor that
// epoll reported readable.
func (w *worker) ready(fds []int32) {
	for _, fd := range fds {
		if int(fd) < len(w.byFD) {
			if users := w.byFD[fd]; len(users) > 0 {
				w.activate(users[0])
			}
		}
	}
}

// kick is the cache's hook: another worker's remote frees reached half of
// the inbound list's bound. Only a sleeping worker needs the syscall.
func (w *worker) kick() {
	if w.sleeping.Load() {
		w.poll.wake()
	}
}

// wake interrupts the worker's sleep unconditionally (Stop).
func (w *worker) wake() { w.poll.wake() }

func (w *worker) close() {
	if w.cache != nil {
		w.cache.Close()
	}
	w.poll.close()
}

func (w *worker) run(wg *sync.WaitGroup) {
	defer wg.Done()
	cfg := &w.e.cfg
	// Always on one thread: a port added while the worker runs may have
	// queues whose state belongs to the thread that attached them
	// (attach.Queue).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cfg.LockOSThread {
		w.thread.Store(int32(unix.Gettid()))
		if len(cfg.CPUs) > 0 {
			cpu := cfg.CPUs[w.index%len(cfg.CPUs)]
			if err := setAffinity(cpu); err != nil {
				cfg.Log.Warn("cpu affinity", "worker", w.index, "cpu", cpu, "err", err)
			}
		}
	}
	w.adopt(w.e.set.Load())
	// Before the cache closes: Detach gives back what was lent.
	defer func() { w.adopt(&portSet{gen: w.view.gen}) }()
	w.now = int64(time.Since(w.epoch))
	idle, rounds := 0, 0
	var lastWork time.Time // when a busy worker last found work, for BusyPoll
	busy := false          // it found work since it last slept
	for !w.stop.Load() {
		if s := w.e.set.Load(); s != w.view {
			w.adopt(s)
		}
		w.curPort = -1
		w.cache.Drain()
		exhausted := w.cache.Exhausted()
		work := w.runPollers()
		work += w.round()
		w.ctr[wRounds]++
		if work > 0 {
			w.ctr[wBusyRounds]++
			idle, busy = 0, true
		} else {
			w.ctr[wIdleRounds]++
			if idle++; idle == 1 && busy && cfg.BusyPoll > 0 {
				lastWork = time.Now()
			}
		}
		if rounds++; rounds%publishEvery == 0 {
			w.publish()
		}
		switch {
		case work > 0 || cfg.IdlePolls < 0:
		case w.cache.Exhausted() != exhausted:
			// Packets wait but no buffer does: polling again at once
			// would spin (a readable TUN file wakes epoll at once), so
			// wait for buffers to come home, as a driver whose refill
			// failed retries later.
			w.starve()
			idle = 0
		case idle >= cfg.IdlePolls && (cfg.BusyPoll == 0 || w.busyPollOver(lastWork, rounds) || w.contended()):
			w.sleep()
			idle, busy, lastWork = 0, false, time.Time{}
		}
	}
	w.flush(false)
	w.publish()
}

// busyPollOver reports whether BusyPoll has passed since the worker last
// found work; a worker that found none since it woke has no busy period.
// It reads the clock only every few rounds.
func (w *worker) busyPollOver(lastWork time.Time, rounds int) bool {
	if lastWork.IsZero() {
		return true
	}
	if rounds%8 != 0 {
		return false
	}
	return time.Since(lastWork) >= w.e.cfg.BusyPoll
}

// yieldSwitched is how long a sched_yield(2) that returns at once may
// take at most: longer, and another thread ran in between. A system
// call takes well under a microsecond, and a thread given the CPU keeps
// it for a time slice (milliseconds) or until it blocks.
const yieldSwitched = 20 * time.Microsecond

// contended is how busy polling ends early, as the kernel's does when
// another task needs the CPU (napi_busy_loop stops on need_resched): it
// yields the worker's CPU to whatever else is runnable on it, and
// reports whether something was, that is whether the yield gave the CPU
// away. Then the worker sleeps until its descriptors wake it. On a
// machine with fewer CPUs than busy threads, those are the guests that
// make and take the packets (a sending application, a receiving one's
// socket), and a worker that spins through their time slice only waits
// longer for their next packets; on one with CPUs to spare the yield
// returns at once and the worker polls on.
func (w *worker) contended() bool {
	w.ctr[wYields]++
	start := time.Now()
	unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	if time.Since(start) < yieldSwitched {
		return false
	}
	w.ctr[wContended]++
	return true
}

// starveWait bounds a starved worker's wait: kicks from remote frees end
// it sooner, but buffers may also come back through the depot, which
// kicks no one.
const starveWait = 200 * time.Microsecond

// starve waits for buffers: for a kick (the inbound list of remote frees
// is half full), Stop, or starveWait.
func (w *worker) starve() {
	w.ctr[wStarved]++
	w.sleeping.Store(true)
	if !w.stop.Load() {
		if err := w.poll.waitKick(starveWait); err != nil {
			w.e.cfg.Log.Error("worker wait", "worker", w.index, "err", err)
		}
	}
	w.sleeping.Store(false)
	w.now = int64(time.Since(w.epoch))
}

func (w *worker) publish() {
	w.now = int64(time.Since(w.epoch))
	w.pub.Load().Publish(w.ctr)
	w.cache.Publish()
}

// runPollers runs the configured pollers (refill rings and the like).
func (w *worker) runPollers() int {
	work := 0
	for _, p := range w.e.cfg.Pollers {
		work += p.Poll(w.index, w.cache)
	}
	return work
}

// round polls every RX queue on the poll list once and returns the
// number of packets. A queue that found packets stays on the list, and
// one that cannot notify is always on it; the others join it when their
// descriptor is readable (one epoll_wait without waiting per round) or
// another queue notifies them.
func (w *worker) round() int {
	if w.notifiers > 0 {
		w.ready(w.poll.ready())
	}
	list := w.active
	w.active = w.polling[:0]
	work := 0
	for _, rq := range list {
		rq.active = false
		if rq.port.down.Load() {
			w.retire(rq)
		}
		if rq.retired {
			continue
		}
		w.curPort = rq.port.index
		n, err := rq.q.Receive(w.cache, w.rxBufs)
		if err != nil {
			w.e.fail(rq.port, fmt.Errorf("rx queue: %w", err))
		}
		if n > 0 {
			w.process(rq.port, n)
			work += n
		}
		if n > 0 || !rq.notifier {
			w.activate(rq)
		}
	}
	clear(list)
	w.polling = list[:0]
	w.flush(work > 0)
	return work
}

// flush ends the round for the TX queues that defer their sending to it
// (port.Flusher), as the kernel flushes XDP redirects once per NAPI poll:
// what every burst of the round queued for a port leaves at once. A
// queue may hold its packets back while more come (more: the round found
// packets, and the worker polls again at once); it stays on the list and
// is flushed again after the next round.
func (w *worker) flush(more bool) {
	keep := w.toFlush[:0]
	for _, i := range w.toFlush {
		f := w.flushers[i]
		if f == nil { // the port left
			w.flushing[i] = false
			continue
		}
		w.curPort = i
		held, err := f.Flush(w.cache, more)
		if err != nil {
			w.e.fail(w.view.ports[i], fmt.Errorf("tx queue: %w", err))
		}
		if held && err == nil {
			keep = append(keep, i)
			continue
		}
		w.flushing[i] = false
	}
	w.toFlush = keep
}

// process runs the programs over one burst and dispatches the verdicts.
func (w *worker) process(in *portState, n int) {
	b := w.batch
	b.Reset(n)
	b.Worker, b.Ingress, b.Layer, b.Now = w.index, in.index, in.info.Layer, w.now
	bytes := 0
	for _, buf := range b.Bufs {
		bytes += buf.Len()
	}
	w.ctr[portCounter(in.index, pRxPackets)] += uint64(n)
	w.ctr[portCounter(in.index, pRxBytes)] += uint64(bytes)
	w.ctr[wBatchSizes+batchBucket(n)]++
	w.tapBurst(in, false, b.Bufs)
	for _, p := range w.e.cfg.Programs {
		if !w.runProgram(p, b) {
			break
		}
	}
	w.dispatch(in)
}

// runProgram runs one program and turns a panic into the loss of the
// batch.
func (w *worker) runProgram(p program.Program, b *program.Batch) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			ok = false
			w.ctr[wPanics]++
			for i := range b.Bufs {
				b.Verdicts[i] = program.DropVerdict(drop.Prog)
			}
			if name := p.Name(); !w.panicked[name] {
				w.panicked[name] = true
				w.e.cfg.Log.Error("program panicked; its batches are dropped", "program", name, "worker", w.index, "panic", fmt.Sprint(r))
			}
		}
	}()
	p.Run(b)
	return true
}

func (w *worker) dispatch(in *portState) {
	b := w.batch
	for i, buf := range b.Bufs {
		switch v := b.Verdicts[i]; v.Action() {
		case program.Redirect:
			w.toPort(v.Port(), buf, in.index)
		case program.Tx:
			w.toPort(in.index, buf, in.index)
		case program.Flood:
			w.flood(buf, in.index)
		case program.Deliver:
			if c := v.Consumer(); c < len(w.local) {
				w.local[c] = append(w.local[c], buf)
			} else {
				w.drop(buf, in.index, drop.NoRoute)
			}
		case program.Drop:
			w.drop(buf, in.index, v.Reason())
		default: // no program decided
			w.drop(buf, in.index, drop.NotSpecified)
		}
	}
	for p, list := range w.egress {
		if len(list) > 0 {
			w.egress[p] = list[:0]
			if eg := w.e.cfg.Egress; eg != nil {
				n, r := eg.Admit(p, list)
				n = max(0, min(n, len(list)))
				for _, buf := range list[n:] {
					w.drop(buf, p, r)
				}
				if list = list[:n]; n == 0 {
					continue
				}
			}
			w.transmit(w.view.ports[p], list)
		}
	}
	w.curPort = in.index
	for c, list := range w.local {
		if len(list) > 0 {
			w.e.cfg.Consumers[c].Deliver(w.index, w.cache, list)
			w.local[c] = list[:0]
		}
	}
}

func (w *worker) drop(buf *buffer.Buf, ingress int, r drop.Reason) {
	w.ctr[portCounter(ingress, pDrops+int(min(r, drop.NumReasons-1)))]++
	w.curPort = ingress
	w.cache.Drop(buf, r)
}

func (w *worker) toPort(dst int, buf *buffer.Buf, ingress int) {
	switch {
	case dst >= len(w.txqs) || w.txqs[dst] == nil:
		w.drop(buf, ingress, drop.NoRoute)
	case w.view.ports[dst].down.Load():
		w.drop(buf, ingress, drop.DevReady)
	default:
		w.egress[dst] = append(w.egress[dst], buf)
	}
}

// flood sends buf out of every transmitting port that is up, except its
// ingress, sharing the one buffer between them.
func (w *worker) flood(buf *buffer.Buf, ingress int) {
	first := true
	for p, txq := range w.txqs {
		if txq == nil || p == ingress || w.view.ports[p].down.Load() {
			continue
		}
		if !first {
			buf.Ref()
		}
		first = false
		w.egress[p] = append(w.egress[p], buf)
	}
	if first {
		w.drop(buf, ingress, drop.NoRoute)
	}
}

func (w *worker) transmit(p *portState, list []*buffer.Buf) {
	sizes := 0
	for _, buf := range list {
		sizes += buf.Len()
	}
	w.tapBurst(p, true, list)
	w.curPort = p.index
	// Transmit owns the buffers from here: read nothing of them after.
	sent, err := w.txqs[p.index].Transmit(w.cache, list)
	if err != nil {
		w.e.fail(p, fmt.Errorf("tx queue: %w", err))
	}
	if w.flushers[p.index] != nil && !w.flushing[p.index] {
		w.flushing[p.index] = true
		w.toFlush = append(w.toFlush, p.index)
	}
	sent = max(0, min(sent, len(list)))
	w.ctr[portCounter(p.index, pTxPackets)] += uint64(sent)
	if sent == len(list) {
		w.ctr[portCounter(p.index, pTxBytes)] += uint64(sizes)
	} else {
		w.ctr[portCounter(p.index, pTxBytes)] += uint64(sizes / len(list) * sent)
	}
	w.ctr[portCounter(p.index, pTxDropped)] += uint64(len(list) - sent)
}

// sleep arms every queue and, if none has packets pending, waits for one
// to have some, for a kick, or for Stop.
func (w *worker) sleep() {
	// Queues that cannot notify are always on the poll list; a notifier
	// there was told of packets since the last round.
	pending := false
	for _, rq := range w.active {
		pending = pending || rq.notifier
	}
	// First the queues of ports that went down since (a dead device's
	// descriptor would stay readable and wake the worker for nothing), so
	// that the first live queue on each descriptor arms it.
	for _, rq := range w.rxqs {
		if rq.port.down.Load() {
			w.retire(rq)
		}
	}
	for _, rq := range w.rxqs {
		if rq.retired {
			continue
		}
		if rq.notifier && (!rq.registered || w.byFD[rq.fd][0] != rq) {
			continue // the first queue on the descriptor arms it for all
		}
		if rq.q.Arm() {
			pending = true
			w.activate(rq)
		}
	}
	if !pending {
		w.ctr[wSleeps]++
		w.publish()
		w.sleeping.Store(true)
		if !w.stop.Load() {
			fds, err := w.poll.wait()
			if err != nil {
				w.e.cfg.Log.Error("worker wait", "worker", w.index, "err", err)
			}
			w.ready(fds)
		}
		w.sleeping.Store(false)
		w.now = int64(time.Since(w.epoch))
	}
	for _, rq := range w.rxqs {
		if !rq.retired {
			rq.q.Disarm()
		}
	}
}
