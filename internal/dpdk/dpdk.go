//go:build linux

// Package dpdk runs DPDK's dpdk-testpmd, and Open vSwitch with DPDK
// (ovs.go), for softnet's tests and lab: on 2 MiB hugepages of their own
// (vm.nr_hugepages raised by what they need and lowered by as much after,
// a private hugetlbfs mount), under a unique --file-prefix, and removes
// what they leave behind (hugepage files, /var/run/dpdk/PREFIX, Open
// vSwitch's run directory) when they stop. Several such processes, of
// this program or others, may run at once.
package dpdk

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Testpmd is DPDK's test application, and Package the Debian package
// that installs it.
const (
	Testpmd = "dpdk-testpmd"
	Package = "dpdk-dev"
)

// Find returns testpmd's path, or an error that names the package.
func Find() (string, error) {
	path, err := exec.LookPath(Testpmd)
	if err != nil {
		return "", fmt.Errorf("%s not found: install DPDK (Debian package %s): %w", Testpmd, Package, err)
	}
	return path, nil
}

const (
	nrHugepages  = "/proc/sys/vm/nr_hugepages"
	hugepageKiB  = 2048
	reserveTries = 5
)

// Hugepages is hugepage memory made free for testpmd processes, and a
// hugetlbfs mount of its own (Dir) for their files.
type Hugepages struct {
	Dir   string
	added int // pages nr_hugepages was raised by
}

// ReserveHugepages adds mib MiB of 2 MiB hugepages to the pool, raising
// vm.nr_hugepages by as many, and mounts a hugetlbfs on a new directory
// that reserves them for the files of the processes that use it (testpmd
// in its default memory mode). Release undoes both.
func ReserveHugepages(mib int) (*Hugepages, error) { return reserveHugepages(mib, true) }

// ReserveInMemoryHugepages raises the pool as ReserveHugepages does, for
// a DPDK process in --in-memory mode (Open vSwitch's default), which takes
// its pages with memfd_create from the pool and not as files on a mount.
// The mount reserves nothing, then: a reservation would keep from such a
// process the very pages added for it. It only gives EAL a hugetlbfs of
// the process's own (--huge-dir), so that EAL neither looks into another's
// mount nor removes the files it finds there. Every process of softnet's
// raises the pool by what it takes, under the same lock; one of another
// program's that takes free pages without may take these first.
func ReserveInMemoryHugepages(mib int) (*Hugepages, error) { return reserveHugepages(mib, false) }

func reserveHugepages(mib int, reserve bool) (h *Hugepages, err error) {
	size, err := meminfo("Hugepagesize")
	if err != nil {
		return nil, err
	}
	if size != hugepageKiB {
		return nil, fmt.Errorf("hugepages of %d kB: testpmd's setup here assumes 2 MiB", size)
	}
	unlock, err := lockHugepages()
	if err != nil {
		return nil, err
	}
	h = &Hugepages{}
	defer func() {
		unlock()
		if err != nil {
			err = errors.Join(err, h.Release())
		}
	}()
	// Raised by all it needs, not by what is missing from the pages free
	// now: those may be another testpmd's, reserved a moment ago and not
	// yet taken. Lowered by as much after, not set back to a value read
	// now: someone else may change it meanwhile.
	need := (mib + 1) / 2
	free, err := meminfo("HugePages_Free")
	if err != nil {
		return nil, err
	}
	cur, err := currentHugepages()
	if err != nil {
		return h, err
	}
	want := cur + need
	h.added = need
	// After builds the page cache holds memory in pieces: the kernel
	// finds fewer contiguous 2 MiB pages than asked. Each write of
	// nr_hugepages tries again; between tries clean pages are dropped
	// and memory compacted.
	for try := 0; ; try++ {
		if err := os.WriteFile(nrHugepages, []byte(strconv.Itoa(want)), 0); err != nil {
			return h, fmt.Errorf("raise %s to %d: %w", nrHugepages, want, err)
		}
		got, err := currentHugepages()
		if err != nil {
			return h, err
		}
		if got >= want {
			break
		}
		if try == reserveTries-1 {
			h.added = max(got-cur, 0) // what Release takes back
			return h, fmt.Errorf("%s is %d after raising it by %d to %d %d times, with memory compacted (%d pages were free)", nrHugepages, got, need, want, reserveTries, free)
		}
		_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
		_ = os.WriteFile("/proc/sys/vm/compact_memory", []byte("1"), 0)
		time.Sleep(100 * time.Millisecond)
	}
	// Named for this process, so that it can tell its mounts from those
	// of others running testpmd at the same time.
	dir, err := os.MkdirTemp("", MountPrefix())
	if err != nil {
		return h, err
	}
	// min_size reserves the pages for this mount: another process that
	// finds them free cannot take them (it would see them as reserved).
	opts := "pagesize=2M"
	if reserve {
		opts += fmt.Sprintf(",min_size=%dM", 2*need)
	}
	if err := syscall.Mount("softnet-hugetlbfs", dir, "hugetlbfs", 0, opts); err != nil {
		os.Remove(dir)
		return h, fmt.Errorf("mount hugetlbfs on %s: %w", dir, err)
	}
	h.Dir = dir
	return h, nil
}

// Release unmounts the hugetlbfs (its files, if any are left, free their
// pages with it) and lowers nr_hugepages by what ReserveHugepages raised
// it. It may be called again.
func (h *Hugepages) Release() error {
	var errs []error
	if h.Dir != "" {
		if err := syscall.Unmount(h.Dir, 0); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", h.Dir, err))
		} else {
			os.Remove(h.Dir)
			h.Dir = ""
		}
	}
	if h.added > 0 {
		unlock, err := lockHugepages()
		var cur int
		if err == nil {
			cur, err = currentHugepages()
			defer unlock()
		}
		if err == nil {
			err = os.WriteFile(nrHugepages, []byte(strconv.Itoa(max(cur-h.added, 0))), 0)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("lower %s by %d: %w", nrHugepages, h.added, err))
		} else {
			h.added = 0
		}
	}
	return errors.Join(errs...)
}

// hugepageLock is the file whose flock serializes, between processes
// (go test runs packages in parallel; a lab run may start testpmd too),
// each read-modify-write of vm.nr_hugepages and the mount that reserves
// what it added: two raising it from the same value would add one
// process's pages for both.
const hugepageLock = "/run/lock/softnet-hugepages.lock"

// lockHugepages takes the hugepage lock, waiting for it a bounded time:
// a holder keeps it only while it changes the pool and mounts.
func lockHugepages() (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(hugepageLock), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(hugepageLock, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("hugepage lock: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if err != syscall.EWOULDBLOCK || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("hugepage lock %s: %w", hugepageLock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// MountPrefix is how the names of this process's hugetlbfs mount points
// begin (in os.TempDir()).
func MountPrefix() string { return fmt.Sprintf("softnet-hugetlbfs-%d-", os.Getpid()) }

func currentHugepages() (int, error) {
	b, err := os.ReadFile(nrHugepages)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", nrHugepages, err)
	}
	return n, nil
}

// meminfo returns a number from /proc/meminfo.
func meminfo(key string) (int, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == key+":" {
			return strconv.Atoi(fields[1])
		}
	}
	return 0, fmt.Errorf("/proc/meminfo has no %s", key)
}

// Config is how a testpmd runs.
type Config struct {
	// Lcores is EAL's -l list (default "0,1": testpmd needs two, its
	// main lcore and a forwarding one); MainLcore, if not empty, its
	// --main-lcore, so that two testpmds on two CPUs forward on
	// different ones.
	Lcores    string
	MainLcore string
	Huge      *Hugepages
	MemMiB    int      // -m
	Vdevs     []string // --vdev devices, one port each
	// Args are testpmd's own arguments, after "--".
	Args []string
	// Interactive runs testpmd with -i: it reads commands (Command) until
	// "quit". Without it testpmd waits for a line on its input to exit.
	Interactive bool
}

// Process is a running testpmd.
type Process struct {
	*child
	stdin  io.WriteCloser
	prefix string
	huge   string
	once   sync.Once
}

// Start runs testpmd as cfg says, under a --file-prefix of its own. The
// kernel kills it should this process die first.
func Start(cfg Config) (*Process, error) {
	path, err := Find()
	if err != nil {
		return nil, err
	}
	if cfg.Huge == nil || cfg.Huge.Dir == "" {
		return nil, errors.New("testpmd: no hugetlbfs mount")
	}
	if cfg.Lcores == "" {
		cfg.Lcores = "0,1"
	}
	p := &Process{prefix: newPrefix(), huge: cfg.Huge.Dir}
	args := []string{"-l", cfg.Lcores}
	if cfg.MainLcore != "" {
		args = append(args, "--main-lcore", cfg.MainLcore)
	}
	args = append(args, "--no-pci", "--single-file-segments", "--file-prefix="+p.prefix,
		"--huge-dir="+cfg.Huge.Dir, "-m", strconv.Itoa(cfg.MemMiB),
		// No more than -m, ever: the pages the mount reserved are all
		// there is for it.
		"--socket-limit="+strconv.Itoa(cfg.MemMiB), "--log-level=lib.eal:error")
	for _, v := range cfg.Vdevs {
		args = append(args, "--vdev="+v)
	}
	args = append(args, "--")
	if cfg.Interactive {
		args = append(args, "-i")
	}
	args = append(args, cfg.Args...)
	// testpmd prints with stdio, which buffers a pipe's output in blocks:
	// its stats would come when it exits. stdbuf (coreutils), which execs
	// it in place, makes stdout line-buffered.
	if sb, err := exec.LookPath("stdbuf"); err == nil {
		args = append([]string{"-oL", path}, args...)
		path = sb
	}
	cmd := exec.Command(path, args...)
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if p.child, err = startChild(Testpmd, cmd); err != nil {
		return nil, err
	}
	return p, nil
}

// Command sends an interactive command.
func (p *Process) Command(c string) error {
	if _, err := io.WriteString(p.stdin, c+"\n"); err != nil {
		return fmt.Errorf("testpmd: %s: %w", c, err)
	}
	return nil
}

// WaitFor waits until the output from offset on contains s, the process
// exits, ctx ends or timeout passes.
func (p *Process) WaitFor(ctx context.Context, offset int, s string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if strings.Contains(p.out.From(offset), s) {
			return nil
		}
		select {
		case <-p.done:
			if strings.Contains(p.out.From(offset), s) {
				return nil
			}
			return fmt.Errorf("testpmd exited (%v) before printing %q:\n%s", p.err, s, p.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testpmd did not print %q within %v:\n%s", s, timeout, p.tail())
		}
	}
}

// Prompt is what interactive testpmd prints when it waits for a command.
const Prompt = "testpmd> "

// PortStats are one port's counters, as `show port stats all` prints
// them: cumulative since the port started.
type PortStats struct {
	Port                int
	RxPackets, RxMissed uint64
	RxBytes             uint64
	TxPackets, TxErrors uint64
	TxBytes             uint64
}

var statsBlock = regexp.MustCompile(`NIC statistics for port (\d+)\s+#+\s+RX-packets:\s+(\d+)\s+RX-missed:\s+(\d+)\s+RX-bytes:\s+(\d+)[\s\S]*?TX-packets:\s+(\d+)\s+TX-errors:\s+(\d+)\s+TX-bytes:\s+(\d+)[\s\S]*?\n\s*#{20,}\s*\n`)

// ParsePortStats returns the ports' counters of one `show port stats
// all`'s output, in the order printed.
func ParsePortStats(out string) []PortStats {
	var stats []PortStats
	for _, m := range statsBlock.FindAllStringSubmatch(out, -1) {
		var n [7]uint64
		for i := range n {
			n[i], _ = strconv.ParseUint(m[i+1], 10, 64)
		}
		stats = append(stats, PortStats{Port: int(n[0]), RxPackets: n[1], RxMissed: n[2], RxBytes: n[3], TxPackets: n[4], TxErrors: n[5], TxBytes: n[6]})
	}
	return stats
}

// Stats asks an interactive testpmd for its ports' counters and returns
// them with the time they were asked for.
func (p *Process) Stats(ctx context.Context, ports int) ([]PortStats, time.Time, error) {
	offset := p.out.Len()
	at := time.Now()
	if err := p.Command("show port stats all"); err != nil {
		return nil, at, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s := ParsePortStats(p.out.From(offset)); len(s) >= ports {
			return s[:ports], at, nil
		}
		if p.Exited() || time.Now().After(deadline) {
			return nil, at, fmt.Errorf("testpmd printed no stats for %d ports:\n%s", ports, p.tail())
		}
		select {
		case <-ctx.Done():
			return nil, at, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Stop asks testpmd to quit ("quit" when interactive, a line otherwise),
// kills it, by its PID, if it has not within timeout, and removes its
// hugepage files and runtime directory. It may be called again.
func (p *Process) Stop(interactive bool, timeout time.Duration) error {
	var err error
	p.once.Do(func() {
		if interactive {
			_ = p.Command("stop")
			_ = p.Command("quit")
		} else {
			_, _ = p.stdin.Write([]byte("\n"))
		}
		p.stdin.Close()
		err = errors.Join(p.waitOrKill(timeout), removeEALFiles(p.huge, p.prefix))
	})
	return err
}

// Kill kills the process outright, as a crash would, and removes its
// files.
func (p *Process) Kill() error {
	var err error
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		err = removeEALFiles(p.huge, p.prefix)
	})
	return err
}

// syncBuffer is a bytes.Buffer for a process's output, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// From returns the output from offset on.
func (s *syncBuffer) From(offset int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b.Bytes()
	if offset > len(b) {
		return ""
	}
	return string(b[offset:])
}
