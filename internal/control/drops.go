package control

import (
	"sync/atomic"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/drop"
	"softnet.dev/internal/cacheline"
	"softnet.dev/ring"
)

// Limits of a drop watch.
const (
	DefaultDropRate = 100    // sampled drops per second, over all workers
	maxDropRate     = 100000 // what one client can be sent
	dropQueue       = 1024   // sampled drops per worker waiting to be sent
	dropHeadBytes   = 128    // of each dropped packet, enough for its headers
)

// dropEvent is one sampled drop, with the first bytes of its packet.
type dropEvent struct {
	at     time.Time
	worker int
	port   int
	reason drop.Reason
	length int
	n      int
	head   [dropHeadBytes]byte
}

// dropWatch is an engine.DropMonitor that samples drops on each worker,
// with a token bucket per worker, into a ring per worker that the
// streaming handler drains. It never blocks a worker: past the rate a
// drop is counted as sampled out, past a full ring as lost.
type dropWatch struct {
	lanes []dropLane
}

type dropLane struct {
	_       cacheline.Pad
	events  *ring.SPSC[dropEvent]
	rate    float64 // tokens per second
	tokens  float64
	last    time.Time
	skipped uint64 // the worker's counts, published below
	lostN   uint64
	// Published for the reader.
	sampledOut atomic.Uint64
	lost       atomic.Uint64
	_          cacheline.Pad
}

func newDropWatch(rate, workers int) (*dropWatch, error) {
	w := &dropWatch{lanes: make([]dropLane, workers)}
	per := max(float64(rate)/float64(workers), 1)
	for i := range w.lanes {
		l := &w.lanes[i]
		var err error
		if l.events, err = ring.NewSPSC[dropEvent](dropQueue); err != nil {
			return nil, err
		}
		l.rate, l.tokens = per, per
	}
	return w, nil
}

// Dropped samples one drop.
func (w *dropWatch) Dropped(worker, port int, r drop.Reason, b *buffer.Buf) {
	if worker >= len(w.lanes) {
		return
	}
	l := &w.lanes[worker]
	now := time.Now()
	if !l.last.IsZero() {
		// A burst of up to one second's worth passes at once.
		l.tokens = min(l.tokens+now.Sub(l.last).Seconds()*l.rate, l.rate)
	}
	l.last = now
	if l.tokens < 1 {
		l.skipped++
		l.sampledOut.Store(l.skipped)
		return
	}
	l.tokens--
	data := b.Bytes()
	ev := dropEvent{at: now, worker: worker, port: port, reason: r, length: len(data)}
	ev.n = copy(ev.head[:], data)
	if !l.events.Enqueue(ev) {
		l.lostN++
		l.lost.Store(l.lostN)
	}
}

// counts returns the drops the sampler skipped and those its rings lost.
func (w *dropWatch) counts() (sampledOut, lost uint64) {
	for i := range w.lanes {
		sampledOut += w.lanes[i].sampledOut.Load()
		lost += w.lanes[i].lost.Load()
	}
	return sampledOut, lost
}
