package lab

import (
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseStatProcessor(t *testing.T) {
	// Field 39 (processor) is 1 here; exit_signal, field 38, is 17.
	stat := "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 50 0 0 20 0 3 0 100 1000000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	if cpu, err := parseStatProcessor([]byte(stat)); err != nil || cpu != 1 {
		t.Fatalf("parseStatProcessor = %d, %v; want 1", cpu, err)
	}
	for _, bad := range []string{"", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 50 0 0 20 0 3 0 100 1000000 500 1 1 1 0 0 0 0 0 0 0 0 0 0 17 99999 0", "4242 (x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 50 0 0 20 0 3 0 100 1000000 500 1 1 1 0 0 0 0 0 0 0 0 0 0 17 -1 0"} {
		if _, err := parseStatProcessor([]byte(bad)); err == nil {
			t.Errorf("parseStatProcessor(%q) returned no error", bad)
		}
	}
}

func TestParseSwitches(t *testing.T) {
	sw, err := parseSwitches([]byte("Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n"))
	if err != nil || sw != (switches{voluntary: 12, involuntary: 3}) {
		t.Fatalf("parseSwitches = %+v, %v", sw, err)
	}
	if _, err := parseSwitches([]byte("Name:\tx\nvoluntary_ctxt_switches:\t12\n")); err == nil {
		t.Error("parseSwitches without nonvoluntary_ctxt_switches returned no error")
	}
}

func TestCPUList(t *testing.T) {
	var set unix.CPUSet
	for _, cpu := range []int{0, 1, 2, 5, 7, 8} {
		set.Set(cpu)
	}
	if got := cpuList(&set); got != "0-2,5,7-8" {
		t.Errorf("cpuList = %q, want 0-2,5,7-8", got)
	}
}

// The sampler finds a thread pinned to a CPU on that CPU, and only there.
func TestPlacementSamplesPinnedThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		t.Fatal(err)
	}
	var one unix.CPUSet
	one.Set(0)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &old)
	me := taskRef{role: "back-end", pid: os.Getpid(), tid: unix.Gettid()}
	s, err := newPlacement([]taskRef{me, me})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(10, func() { s.sample() }); n != 0 {
		t.Errorf("a sample allocates %v times: it runs in the switch's process, whose allocations per packet the lab reports", n)
	}
	s.start()
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
	}
	p, err := s.finish()
	if err != nil {
		t.Fatal(err)
	}
	if p.Samples == 0 {
		t.Fatal("no samples")
	}
	if th := p.Threads[0]; th.Allowed != "0" || len(th.OnCPU) != 1 || th.OnCPU[0] != 1 {
		t.Errorf("pinned thread: %+v, want allowed 0 and on CPU 0 in every sample", th)
	}
	if p.SameCPU != 1 {
		t.Errorf("a thread and itself on the same CPU in %.2f of the samples, want all", p.SameCPU)
	}
	if fmtPlacement(p) == "" {
		t.Error("empty placement line")
	}
}
