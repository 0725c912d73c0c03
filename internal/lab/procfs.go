package lab

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of the CPU times in /proc/*/stat. The kernel exports
// them in USER_HZ, which is 100 on every architecture Linux supports for
// user space (sysconf(_SC_CLK_TCK) returns it; Go has no sysconf).
const userHZ = 100

// parseStatCPU returns utime+stime from the contents of a
// /proc/PID/task/TID/stat file. The second field, the command name in
// parentheses, may itself contain spaces and parentheses, so the fields
// are counted from the last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("stat: no command name in %q", truncate(stat))
	}
	// After ')': state (field 3), ppid, ..., utime is field 14 and stime
	// field 15, so indices 11 and 12 here.
	f := strings.Fields(string(stat[end+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat: utime/stime %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

// threadCPU returns the CPU time (user + system) thread tid of this
// process has used.
func threadCPU(tid int) (time.Duration, error) { return taskCPU(os.Getpid(), tid) }

// taskCPU returns the CPU time thread tid of process pid has used.
func taskCPU(pid, tid int) (time.Duration, error) {
	return statCPU(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid), fmt.Sprintf("thread %d of %d", tid, pid))
}

// otherProcessCPU returns the CPU time every live thread of process pid
// has used (and its threads that have exited).
func otherProcessCPU(pid int) (time.Duration, error) {
	return statCPU(fmt.Sprintf("/proc/%d/stat", pid), fmt.Sprintf("process %d", pid))
}

func statCPU(path, what string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	d, err := parseStatCPU(b)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return d, nil
}

// threadNamed returns the thread of process pid whose name (comm) begins
// with one of prefixes: a DPDK application's forwarding thread, which it
// names.
func threadNamed(pid int, prefixes ...string) (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, fmt.Errorf("threads of process %d: %w", pid, err)
	}
	var names []string
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
		if err != nil {
			continue // exited meanwhile
		}
		name := strings.TrimSpace(string(comm))
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				return tid, nil
			}
		}
		names = append(names, name)
	}
	return 0, fmt.Errorf("process %d has no thread named %s* (it has %s)", pid, strings.Join(prefixes, "* or "), strings.Join(names, ", "))
}

// threadsCPU sums threadCPU over tids.
func threadsCPU(tids []int) (time.Duration, error) {
	var sum time.Duration
	for _, tid := range tids {
		d, err := threadCPU(tid)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// processCPU returns the user and system time of every thread of the
// process, those that have exited included.
func processCPU() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// parseStatusKB returns the value of a "Key:   123 kB" line of a
// /proc/PID/status file, in bytes.
func parseStatusKB(status []byte, key string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status: %s: unexpected value %q", key, v)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("status: %s: %w", key, err)
		}
		return n << 10, nil
	}
	return 0, fmt.Errorf("status: no %s line", key)
}

// peakRSS returns the process's resident set high-water mark (VmHWM).
func peakRSS() (int64, error) { return selfStatus("VmHWM") }

// currentRSS returns the process's resident set now (VmRSS).
func currentRSS() (int64, error) { return selfStatus("VmRSS") }

// selfStatus returns the value of key in /proc/self/status, in bytes.
func selfStatus(key string) (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	return parseStatusKB(b, key)
}

// resetPeakRSS sets the high-water mark back to the current RSS (writing
// 5 to clear_refs, Linux 4.0 and later), so that each variant's peak is
// its own. It reports whether that worked; if not, peaks accumulate over
// the run and say so.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}
