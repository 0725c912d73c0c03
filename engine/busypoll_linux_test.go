package engine

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/packet"
	"softnet.dev/program"
)

// A busy-polling worker whose CPU another thread wants stops polling
// and sleeps, as the kernel's busy polling stops on need_resched: the
// worker and a spinning thread are pinned to one CPU, and the worker's
// busy period (a second, the longest there is) after a packet ends
// early, counted as contended.
func TestBusyPollYieldsToContention(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	cpu := -1
	for i := range 1024 {
		if set.IsSet(i) {
			cpu = i
			break
		}
	}
	if cpu < 0 {
		t.Fatal("no CPU in the test's affinity mask")
	}
	fwd := program.Func{ProgramName: "to-b", F: func(b *program.Batch) {
		for i := range b.Bufs {
			b.Verdicts[i] = program.RedirectVerdict(1)
		}
	}}
	r := newRigWith(t, Config{Programs: []program.Program{fwd}, BusyPoll: maxBusyPoll, LockOSThread: true, CPUs: []int{cpu}}, packet.L3, "a", "b")
	if err := r.e.Start(); err != nil {
		t.Fatal(err)
	}
	s1 := r.stats(func(s Stats) bool { return s.Workers[0].Sleeps >= 1 })
	var stopped atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := setAffinity(cpu); err != nil {
			t.Error(err)
			return
		}
		// Spinning is the point: a thread that always wants the CPU.
		for !stopped.Load() {
		}
	}()
	defer wg.Wait()
	defer stopped.Store(true)
	r.send(0, udp("198.18.0.1:1", "198.19.0.1:2", "busy"))
	if got := r.recv(1, 1, 10*time.Second); len(got) != 1 {
		t.Fatal("packet not forwarded")
	}
	s2 := r.stats(func(s Stats) bool { return s.Workers[0].Contended > s1.Workers[0].Contended })
	if s2.Workers[0].Contended <= s1.Workers[0].Contended {
		t.Fatalf("busy polling kept the CPU from a thread that wanted it: %d yields, none gave it away", s2.Workers[0].Yields-s1.Workers[0].Yields)
	}
}
