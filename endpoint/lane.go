package endpoint

import (
	"sync/atomic"

	"softnet.dev/buffer"
	"softnet.dev/internal/cacheline"
	"softnet.dev/ring"
)

// lane is one (endpoint, worker) pair: its rings, and the lending state
// the worker keeps for it.
type lane struct {
	ep     *Endpoint
	ws     *workerState
	rx     *ring.SPSC[lend]        // worker → application: lent views
	refill *ring.SPSC[token]       // application → worker: releases
	fill   *ring.SPSC[*buffer.Buf] // worker → application: empty send buffers (home lane only)
	send   *ring.SPSC[*buffer.Buf] // application → worker: sent packets (home lane only)

	// Worker-owned.
	_       [cacheline.Size]byte
	quota   int    // most views this lane may have lent at once
	lent    int    // views lent and not yet back
	stocked int    // send buffers handed out through fill and not yet back
	stage   []lend // this Deliver's views, enqueued at its end
	reclaim bool   // the endpoint's close has been handled
	ctr     laneCounters

	// Application-owned, on lines of its own: the worker writes its part
	// at every delivery and the application this at every release.
	_        [cacheline.Size]byte
	appStage []token // releases not yet enqueued
	_        [cacheline.Size]byte
}

// laneCounters are written by one goroutine each (the worker, or the
// application for the app* ones) with a load and a store, which costs no
// locked instruction, and read by Stats from anywhere.
type laneCounters struct {
	lent, refilled, reclaimed, rejected, ringFull, quotaFull, closedDrops atomic.Uint64
	sent, sendBufs                                                        atomic.Uint64
}

func add(c *atomic.Uint64, n int) { c.Store(c.Load() + uint64(n)) }

func newLane(e *Endpoint, ws *workerState, ringSize, quota int, home bool) (*lane, error) {
	l := &lane{ep: e, ws: ws, quota: quota, stage: make([]lend, 0, 64)}
	var err error
	if l.rx, err = ring.NewSPSC[lend](pow2(ringSize)); err != nil {
		return nil, err
	}
	// Every token stands for a view the lane has lent, so a refill ring
	// as large as the quota (or the receive ring, whichever is larger)
	// never fills.
	if l.refill, err = ring.NewSPSC[token](pow2(max(quota, ringSize))); err != nil {
		return nil, err
	}
	if home {
		n := pow2(ws.t.cfg.SendBufs)
		if l.fill, err = ring.NewSPSC[*buffer.Buf](n); err != nil {
			return nil, err
		}
		// The send ring holds every stocked buffer at once, so Send's
		// enqueue of buffers it took from fill never fails.
		if l.send, err = ring.NewSPSC[*buffer.Buf](n); err != nil {
			return nil, err
		}
	}
	return l, nil
}
