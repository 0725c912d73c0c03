package lab

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Where the busy threads of a --vhost configuration run decides its
// rate more than anything the back-end does per packet (docs/benchmarks.md,
// "Why the loop's rate moves"): a back-end thread on the front-end's CPU
// takes turns with it, and every cache line of the packets, the rings
// and the descriptors stays in that CPU's caches; on the other CPU it runs
// at the same time, and every line crosses between the CPUs. So the lab
// samples, over the window, the CPU each forwarding thread last ran on
// (/proc/PID/task/TID/stat, field 39), its allowed CPUs and its context
// switches, and reports them with the rate.

// placementEvery is how often the sampler looks: a few hundred samples
// over a window of seconds, a few file reads each, which costs the lab's
// process (the switch's) a few hundredths of a per cent of a CPU.
const placementEvery = 10 * time.Millisecond

// ThreadPlacement is where one thread ran over a window.
type ThreadPlacement struct {
	Role    string `json:"role"` // "back-end" or "front-end"
	PID     int    `json:"pid"`
	TID     int    `json:"tid"`
	Allowed string `json:"allowed_cpus"` // its affinity, as a CPU list
	// OnCPU is the share of samples that found it on each CPU (the CPU
	// it ran on last, or whose run queue it waits in), by CPU number.
	OnCPU []float64 `json:"on_cpu"`
	// Context switches over the window: voluntary (it slept: softnet's
	// worker waiting for a kick) and involuntary (preempted, by a thread
	// on its CPU).
	Voluntary   uint64 `json:"voluntary_switches"`
	Involuntary uint64 `json:"involuntary_switches"`
}

// Placement is where a configuration's forwarding threads ran.
type Placement struct {
	Samples int               `json:"samples"`
	Threads []ThreadPlacement `json:"threads"`
	// SameCPU is the share of samples that found the back-end's
	// forwarding thread and the front-end's on the same CPU.
	SameCPU float64 `json:"same_cpu"`
}

// taskRef names a thread of a process.
type taskRef struct {
	role     string
	pid, tid int
}

// placementSampler samples threads until stopped. It allocates nothing
// once started: it runs in the lab's process, whose allocations per
// packet the run reports for the switch.
type placementSampler struct {
	tasks []taskRef
	stats []*os.File // each task's stat file, read again at offset 0
	buf   []byte
	cpus  []int
	stop  chan struct{}
	done  sync.WaitGroup

	// The sampler's goroutine's, read after done.
	samples int
	onCPU   [][]int // per task, per CPU
	same    int
	err     error
	sw0     []switches
}

type switches struct{ voluntary, involuntary uint64 }

// startPlacement starts sampling tasks: the back-end's forwarding thread
// first, the front-end's second.
func startPlacement(tasks []taskRef) (*placementSampler, error) {
	s, err := newPlacement(tasks)
	if err != nil {
		return nil, err
	}
	s.start()
	return s, nil
}

// newPlacement is startPlacement without the start.
func newPlacement(tasks []taskRef) (*placementSampler, error) {
	s := &placementSampler{tasks: tasks, stop: make(chan struct{}), buf: make([]byte, 4096), cpus: make([]int, len(tasks)),
		onCPU: make([][]int, len(tasks)), sw0: make([]switches, len(tasks))}
	for i, t := range tasks {
		sw, err := readSwitches(t.pid, t.tid)
		if err != nil {
			s.close()
			return nil, err
		}
		s.sw0[i] = sw
		f, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/stat", t.pid, t.tid))
		if err != nil {
			s.close()
			return nil, fmt.Errorf("%s thread %d of %d: %w", t.role, t.tid, t.pid, err)
		}
		s.stats = append(s.stats, f)
		s.onCPU[i] = make([]int, maxCPUs)
	}
	return s, nil
}

func (s *placementSampler) start() {
	s.done.Add(1)
	go s.run()
}

// maxCPUs bounds the CPU numbers the sampler counts.
const maxCPUs = 1024

func (s *placementSampler) close() {
	for _, f := range s.stats {
		f.Close()
	}
}

func (s *placementSampler) run() {
	defer s.done.Done()
	tick := time.NewTicker(placementEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		if s.err = s.sample(); s.err != nil {
			return
		}
	}
}

// sample looks once where each task is.
func (s *placementSampler) sample() error {
	for i, f := range s.stats {
		n, err := f.ReadAt(s.buf, 0)
		if err != nil && n == 0 {
			return fmt.Errorf("%s thread %d: %w", s.tasks[i].role, s.tasks[i].tid, err)
		}
		cpu, err := parseStatProcessor(s.buf[:n])
		if err != nil {
			return fmt.Errorf("%s thread %d: %w", s.tasks[i].role, s.tasks[i].tid, err)
		}
		s.onCPU[i][cpu]++
		s.cpus[i] = cpu
	}
	s.samples++
	if len(s.cpus) >= 2 && s.cpus[0] == s.cpus[1] {
		s.same++
	}
	return nil
}

// finish stops sampling and returns what it found.
func (s *placementSampler) finish() (*Placement, error) {
	close(s.stop)
	s.done.Wait()
	s.close()
	if s.err != nil {
		return nil, s.err
	}
	p := &Placement{Samples: s.samples}
	for i, t := range s.tasks {
		tp := ThreadPlacement{Role: t.role, PID: t.pid, TID: t.tid}
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(t.tid, &set); err != nil {
			return nil, fmt.Errorf("%s thread %d: affinity: %w", t.role, t.tid, err)
		}
		tp.Allowed = cpuList(&set)
		sw, err := readSwitches(t.pid, t.tid)
		if err != nil {
			return nil, err
		}
		tp.Voluntary, tp.Involuntary = sw.voluntary-s.sw0[i].voluntary, sw.involuntary-s.sw0[i].involuntary
		last := 0
		for cpu, n := range s.onCPU[i] {
			if n > 0 {
				last = cpu
			}
		}
		for _, n := range s.onCPU[i][:last+1] {
			tp.OnCPU = append(tp.OnCPU, share(n, s.samples))
		}
		p.Threads = append(p.Threads, tp)
	}
	p.SameCPU = share(s.same, s.samples)
	return p, nil
}

func share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// cpuList writes a CPU set as a list: "0", "0-1", "0,2".
func cpuList(set *unix.CPUSet) string {
	var parts []string
	for cpu := 0; cpu < 1024; cpu++ {
		if !set.IsSet(cpu) {
			continue
		}
		end := cpu
		for end+1 < 1024 && set.IsSet(end+1) {
			end++
		}
		if end == cpu {
			parts = append(parts, strconv.Itoa(cpu))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpu, end))
		}
		cpu = end
	}
	return strings.Join(parts, ",")
}

// parseStatProcessor returns field 39 (processor: the CPU the thread ran
// on last) of a stat file, counted, as parseStatCPU counts, from the
// last ')' (field 3 is the first after it). It allocates nothing.
func parseStatProcessor(stat []byte) (int, error) {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("stat: no command name in %q", truncate(stat))
	}
	field := 2 // the command name's
	cpu, digits := 0, 0
	inField := false
	for _, c := range stat[end+1:] {
		if c == ' ' || c == '\n' {
			inField = false
			if field == 39 {
				break
			}
			continue
		}
		if !inField {
			inField = true
			field++
		}
		if field != 39 {
			continue
		}
		if c < '0' || c > '9' || digits == 4 {
			return 0, fmt.Errorf("stat: processor field is not a CPU number in %q", truncate(stat))
		}
		cpu = cpu*10 + int(c-'0')
		digits++
	}
	if field < 39 || digits == 0 || cpu >= maxCPUs {
		return 0, fmt.Errorf("stat: no processor field (39) in %q", truncate(stat))
	}
	return cpu, nil
}

// readSwitches returns a thread's context switches so far.
func readSwitches(pid, tid int) (switches, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		return switches{}, fmt.Errorf("thread %d of %d: %w", tid, pid, err)
	}
	return parseSwitches(b)
}

// parseSwitches reads the voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches lines of a status file.
func parseSwitches(status []byte) (switches, error) {
	var sw switches
	found := 0
	for line := range strings.Lines(string(status)) {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch name {
		case "voluntary_ctxt_switches":
			dst = &sw.voluntary
		case "nonvoluntary_ctxt_switches":
			dst = &sw.involuntary
		default:
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return sw, fmt.Errorf("status: %s %q: %w", name, strings.TrimSpace(value), err)
		}
		*dst = n
		found++
	}
	if found != 2 {
		return sw, fmt.Errorf("status: no context switch counts")
	}
	return sw, nil
}

// fmtPlacement is a placement on one line: per thread, its allowed CPUs
// and where it was found, and how often the two shared a CPU.
func fmtPlacement(p *Placement) string {
	var parts []string
	for _, t := range p.Threads {
		var on []string
		for cpu, x := range t.OnCPU {
			if x > 0 {
				on = append(on, fmt.Sprintf("CPU %d %.0f%%", cpu, 100*x))
			}
		}
		parts = append(parts, fmt.Sprintf("%s thread on %s (allowed %s; %d voluntary, %d involuntary switches)",
			t.Role, strings.Join(on, ", "), t.Allowed, t.Voluntary, t.Involuntary))
	}
	return fmt.Sprintf("%s; same CPU in %.0f%% of %d samples", strings.Join(parts, "; "), 100*p.SameCPU, p.Samples)
}
