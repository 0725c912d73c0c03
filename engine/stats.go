package engine

import (
	"fmt"
	"math/bits"

	"softnet.dev/buffer"
	"softnet.dev/drop"
)

// A worker's counters are one flat array: the worker's own, then one
// block per port.
const (
	wRounds        = iota // poll rounds
	wBusyRounds           // rounds that found packets
	wIdleRounds           // rounds that found none
	wSleeps               // times the worker slept in epoll_wait
	wYields               // times a busy-polling worker yielded its CPU between empty rounds
	wContended            // busy polls ended early: a yield gave the CPU to another thread
	wStarved              // rounds that found the pool empty and waited for buffers
	wPanics               // program panics (each cost a batch)
	wBatchSizes           // numBatchBuckets histogram counters follow
	workerCounters = wBatchSizes + numBatchBuckets
)

const (
	pRxPackets = iota
	pRxBytes
	pTxPackets
	pTxBytes
	pTxDropped   // offered to the TX queue but not sent
	pDrops       // drop.NumReasons counters follow: verdict drops by ingress port, Egress drops by egress port
	portCounters = pDrops + int(drop.NumReasons)
)

func numCounters(ports int) int       { return workerCounters + ports*portCounters }
func portCounter(port, field int) int { return workerCounters + port*portCounters + field }
func batchBucket(n int) int           { return min(bits.Len(uint(n))-1, numBatchBuckets-1) }
func bucketRange(i int) (lo, hi int)  { return 1 << i, 1<<(i+1) - 1 }

const numBatchBuckets = 9 // 1, 2-3, 4-7, …, 128-255, 256+

// WorkerStats are one worker's counters.
type WorkerStats struct {
	Rounds     uint64 `json:"rounds"`
	BusyRounds uint64 `json:"busy_rounds"`
	IdleRounds uint64 `json:"idle_rounds"`
	Sleeps     uint64 `json:"sleeps"`
	// Yields counts busy polling's empty rounds that offered the CPU to
	// other threads; Contended the busy polls ended early because one
	// took it (the worker then slept).
	Yields     uint64            `json:"yields"`
	Contended  uint64            `json:"contended"`
	Starved    uint64            `json:"starved"` // waits for buffers: the pool was empty, packets waited
	Panics     uint64            `json:"program_panics"`
	BatchSizes map[string]uint64 `json:"batch_sizes"` // "lo-hi" -> bursts
	// Thread is the OS thread the worker runs on with Config.LockOSThread
	// (its CPU time is then /proc/self/task/THREAD/stat's), 0 otherwise.
	Thread int `json:"thread,omitempty"`
}

// PortStats are one port's counters, summed over workers, since it was
// added.
type PortStats struct {
	Name      string      `json:"name"`
	Index     int         `json:"index"` // as program verdicts name the port
	Down      bool        `json:"down"`
	Err       string      `json:"error,omitempty"`
	RxPackets uint64      `json:"rx_packets"`
	RxBytes   uint64      `json:"rx_bytes"`
	TxPackets uint64      `json:"tx_packets"`
	TxBytes   uint64      `json:"tx_bytes"`
	TxDropped uint64      `json:"tx_dropped"`
	Drops     drop.Counts `json:"drops"` // packets received here and dropped by verdict, and those for here dropped by Config.Egress
}

// Stats are an engine's counters as of each worker's last publish (every
// few dozen rounds, and before it sleeps or stops). Each counter is
// published on its own, so two counters read while a worker publishes
// may come from consecutive rounds.
type Stats struct {
	Workers []WorkerStats `json:"workers"`
	Ports   []PortStats   `json:"ports"`
	Buffers buffer.Stats  `json:"buffers"`
}

// Stats returns the current counters. Safe to call at any time.
func (e *Engine) Stats() Stats {
	s := Stats{Buffers: e.cfg.Pool.Stats()}
	set := e.set.Load()
	total := make([]uint64, numCounters(len(set.ports)))
	for _, w := range e.workers {
		pub := w.pub.Load()
		// A worker that has not yet taken up the latest ports has fewer
		// counters, one that took up a later set more.
		vals := make([]uint64, max(pub.Len(), len(total)))
		pub.AddTo(vals)
		ws := WorkerStats{
			Rounds: vals[wRounds], BusyRounds: vals[wBusyRounds], IdleRounds: vals[wIdleRounds],
			Sleeps: vals[wSleeps], Yields: vals[wYields], Contended: vals[wContended], Starved: vals[wStarved], Panics: vals[wPanics], BatchSizes: map[string]uint64{},
			Thread: int(w.thread.Load()),
		}
		for i := range numBatchBuckets {
			if n := vals[wBatchSizes+i]; n > 0 {
				lo, hi := bucketRange(i)
				key := fmt.Sprintf("%d-%d", lo, hi)
				if i == numBatchBuckets-1 {
					key = fmt.Sprintf("%d+", lo)
				}
				ws.BatchSizes[key] = n
			}
		}
		s.Workers = append(s.Workers, ws)
		for i := range total {
			total[i] += vals[i]
		}
	}
	for _, p := range set.ports {
		if p == nil {
			continue
		}
		ps := PortStats{
			Name: p.info.Name, Index: p.index, Down: p.down.Load(),
			RxPackets: total[portCounter(p.index, pRxPackets)],
			RxBytes:   total[portCounter(p.index, pRxBytes)],
			TxPackets: total[portCounter(p.index, pTxPackets)],
			TxBytes:   total[portCounter(p.index, pTxBytes)],
			TxDropped: total[portCounter(p.index, pTxDropped)],
		}
		copy(ps.Drops[:], total[portCounter(p.index, pDrops):portCounter(p.index, pDrops)+int(drop.NumReasons)])
		if err := e.Err(p.index); err != nil {
			ps.Err = err.Error()
		}
		s.Ports = append(s.Ports, ps)
	}
	return s
}
