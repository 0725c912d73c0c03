package lab

import (
	"runtime"
	"time"

	"softnet.dev/buffer"
	"softnet.dev/drop"
)

// snapshot is the state of the process and the datapath at one instant.
type snapshot struct {
	at        time.Time
	proc      time.Duration // the process's CPU time
	workers   time.Duration // the datapath's worker threads'
	workersOK bool
	gen       time.Duration // the built-in generator's threads'
	genOK     bool
	mallocs   uint64
	fwd       forwarded
	fwdOK     bool
	bufs      buffer.Stats
	bufsOK    bool
	noMem     uint64 // receive bursts the devices cut short for want of a buffer
	guests    guestSample
}

// probe takes snapshots of one transfer.
type probe struct {
	dp      datapath
	devices func() uint64 // the devices' NOMEM stalls, or nil
	flow    flow
	guests  *guestCounters // read last: its CPU time falls outside the window's end
}

// take reads everything but the heap counter; mallocs adds that. At the
// start of a window the heap counter is read last and at its end first,
// so that what take allocates stays outside the window.
func (p *probe) take() snapshot {
	s := snapshot{at: time.Now()}
	if cpu, err := processCPU(); err == nil {
		s.proc = cpu
	}
	if tids := p.dp.workerThreads(); len(tids) > 0 {
		cpu, err := threadsCPU(tids)
		s.workers, s.workersOK = cpu, err == nil
	}
	if p.flow != nil {
		if tids := p.flow.threads(); len(tids) > 0 {
			cpu, err := threadsCPU(tids)
			s.gen, s.genOK = cpu, err == nil
		}
	}
	s.fwd, s.fwdOK = p.dp.counters()
	s.bufs, s.bufsOK = p.dp.buffers()
	if p.devices != nil {
		s.noMem = p.devices()
	}
	if p.guests != nil {
		s.guests = p.guests.sample()
	}
	return s
}

func readMallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// windowStart and windowEnd bracket the measuring window.
func (p *probe) windowStart() snapshot {
	s := p.take()
	s.mallocs = readMallocs()
	return s
}

func (p *probe) windowEnd() snapshot {
	m := readMallocs()
	s := p.take()
	s.mallocs = m
	return s
}

// idleRate measures the process's CPU use, in CPU seconds per second,
// while nothing is sent: the lab's own overhead, subtracted from the
// datapath's figure.
func idleRate(d time.Duration) float64 {
	c0, err0 := processCPU()
	t0 := time.Now()
	time.Sleep(d)
	c1, err1 := processCPU()
	if err0 != nil || err1 != nil {
		return 0
	}
	return max(0, (c1-c0).Seconds()/time.Since(t0).Seconds())
}

// fill sets the figures of res that come from the snapshots: s0 and s1
// before and after the whole transfer, w0 and w1 the window inside it.
func fill(res *Result, s0, w0, w1, s1 snapshot, idle float64, pool int64) {
	window := w1.at.Sub(w0.at).Seconds()
	if w0.fwdOK && w1.fwdOK && window > 0 {
		fwd := forwarded{packets: w1.fwd.packets - w0.fwd.packets, bytes: w1.fwd.bytes - w0.fwd.bytes}
		gbit := float64(fwd.bytes) * 8 / 1e9
		if gbit > 0 {
			cpu := (w1.proc - w0.proc).Seconds() - idle*window
			if w0.genOK && w1.genOK {
				cpu -= (w1.gen - w0.gen).Seconds()
			}
			res.CPUPerGbit = ptr(max(0, cpu) / gbit)
			if w0.workersOK && w1.workersOK {
				res.WorkerCPUPerGbit = ptr((w1.workers - w0.workers).Seconds() / gbit)
			}
		}
		if fwd.packets > 0 {
			res.AllocsPerPacket = ptr(float64(w1.mallocs-w0.mallocs) / float64(fwd.packets))
		}
	}
	if res.Mode.kind() == kindUDP && w0.guests.ok && w1.guests.ok && window > 0 {
		if n := w1.guests.reachedB - w0.guests.reachedB; n > 0 {
			res.ForwardedPPS = ptr(float64(n) / window)
			if w0.fwdOK && w1.fwdOK {
				cpu := (w1.proc - w0.proc).Seconds() - idle*window
				if w0.genOK && w1.genOK {
					cpu -= (w1.gen - w0.gen).Seconds()
				}
				res.CPUPerPacketUS = ptr(max(0, cpu) / float64(n) * 1e6)
			}
		}
	}
	if s0.fwdOK && s1.fwdOK {
		res.Forwarded = ptr(s1.fwd.packets - s0.fwd.packets)
		if n := s1.fwd.rxPackets - s0.fwd.rxPackets; n > 0 {
			res.RxBytesPerPacket = ptr(float64(s1.fwd.rxBytes-s0.fwd.rxBytes) / float64(n))
		}
	}
	if s0.bufsOK && s1.bufsOK {
		a, b := &s0.bufs, &s1.bufs
		var drops drop.Counts
		for i := range drops {
			drops[i] = b.Drops[i] - a.Drops[i]
		}
		res.Drops = &drops
		res.NoMemStalls = ptr(s1.noMem - s0.noMem)
		if hits, misses := b.Hits-a.Hits, b.Misses-a.Misses; hits+misses > 0 {
			res.HitRate = ptr(float64(hits) / float64(hits+misses))
		}
		res.RemoteFrees = ptr(b.RemoteFrees - a.RemoteFrees)
	}
	if pool > 0 {
		res.PoolBytes = ptr(pool)
	}
}
