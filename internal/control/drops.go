package control

import (
	"encoding/json"
	"math"
	"net/http"
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

// DropEvent is one line of GET /v1/drops: a sampled drop, or (Type
// "status") what the sampler skipped and lost so far.
type DropEvent struct {
	Type       string    `json:"type"` // "drop" or "status"
	Time       time.Time `json:"time,omitzero"`
	Port       string    `json:"port,omitempty"`
	Worker     int       `json:"worker"`
	Reason     string    `json:"reason,omitempty"`
	Length     int       `json:"length,omitempty"`
	Summary    string    `json:"summary,omitempty"`
	Sent       uint64    `json:"sent,omitempty"`
	SampledOut uint64    `json:"sampled_out,omitempty"`
	Lost       uint64    `json:"lost,omitempty"`
	// The last status line says why the watch ended: "count" or
	// EndStopped. (A client that went away is sent nothing.)
	End string `json:"end,omitempty"`
}

// EndStopped ends a drop watch (DropEvent.End) or a capture (the
// Softnet-End trailer, beside the ends capture.go lists) when the switch
// stops.
const EndStopped = "switch-stopped"

// drops streams sampled drops as JSON lines until the client goes away
// or count drops were sent.
func (s *Server) drops(w http.ResponseWriter, r *http.Request) {
	rate, err := queryInt(r, "rate", DefaultDropRate, 1, maxDropRate)
	if err == nil {
		var count int
		if count, err = queryInt(r, "count", 0, 0, math.MaxInt32); err == nil {
			s.watchDrops(w, r, rate, count)
			return
		}
	}
	writeError(w, http.StatusBadRequest, err.Error())
}

func (s *Server) watchDrops(w http.ResponseWriter, r *http.Request, rate, count int) {
	if !s.claim(nil) {
		writeError(w, http.StatusConflict, "a drop watch is already running")
		return
	}
	defer s.release(nil)
	eng := s.sw.Engine()
	dw, err := newDropWatch(rate, len(eng.Stats().Workers))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	eng.SetDropMonitor(dw)
	defer eng.SetDropMonitor(nil)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	var sent uint64
	status := func(end string) error {
		out, lost := dw.counts()
		return enc.Encode(DropEvent{Type: "status", Sent: sent, SampledOut: out, Lost: lost, End: end})
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lastStatus := time.Now()
	for stopping := false; ; {
		// Read again each time: ports come and go, and a removed port's
		// index goes to the next one added. A drop sampled just before a
		// port was removed, and drained after another took its index,
		// would be shown with the new port's name; the ports are read
		// every tick (20 ms) to keep that window to one tick.
		infos := eng.Ports()
		for i := range dw.lanes {
			for {
				ev, ok := dw.lanes[i].events.Dequeue()
				if !ok {
					break
				}
				out := DropEvent{Type: "drop", Time: ev.at, Worker: ev.worker, Reason: ev.reason.String(), Length: ev.length, Port: "-"}
				if ev.port >= 0 && ev.port < len(infos) && infos[ev.port].Name != "" {
					out.Port = infos[ev.port].Name
					out.Summary = Summary(ev.head[:ev.n], infos[ev.port].Layer, ev.length)
				}
				if enc.Encode(out) != nil {
					return
				}
				if sent++; count > 0 && sent == uint64(count) {
					status(endCount)
					return
				}
			}
		}
		if stopping {
			// The pass after the switch began to stop sent what the
			// lanes held; the monitor comes off before it closes.
			status(EndStopped)
			return
		}
		if time.Since(lastStatus) >= time.Second {
			if status("") != nil {
				return
			}
			lastStatus = time.Now()
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-r.Context().Done():
			if !s.switchStopped() {
				return // the client went away
			}
			stopping = true
		case <-tick.C:
		}
	}
}
