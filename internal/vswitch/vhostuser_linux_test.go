package vswitch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/internal/netnstest"
)

// DPDK's testpmd drives softnet's vhost-user ports through its own
// virtio-user front-end: the virtio-net driver of a DPDK application,
// speaking vhost-user over the port's socket and sharing its hugepage
// memory, as a VM's QEMU would. (QEMU itself cannot be tested here:
// nested KVM guests hang at boot, and Debian's QEMU 7.2 under TCG
// segfaults once a guest starts a vhost-user device; see docs/design.md.)

// testpmdMemMiB is the hugepage memory a testpmd takes (-m).
const testpmdMemMiB = 256

// testpmd is a running dpdk-testpmd.
type testpmd struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *syncBuffer
	prefix string
	huge   string // its hugetlbfs mount
	done   chan struct{}
	once   sync.Once
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

// startTestpmd runs testpmd on two lcores with one virtio-user port per
// socket, forwarding in mode (icmpecho, io, ...), until the test ends or
// stop is called. Its hugepages come from a hugetlbfs mount of its own;
// its files there and its runtime directory are removed afterwards.
func startTestpmd(t *testing.T, mode string, sockets ...string) *testpmd {
	t.Helper()
	return startTestpmdQueues(t, mode, 1, sockets...)
}

// startTestpmdQueues is startTestpmd with queues queue pairs per port.
func startTestpmdQueues(t *testing.T, mode string, queues int, sockets ...string) *testpmd {
	t.Helper()
	return startTestpmdWith(t, mode, queues, "", nil, sockets...)
}

// startTestpmdWith is startTestpmd with queues queue pairs per port,
// more virtio-user options (server=1: testpmd listens, the port
// connects) and more testpmd arguments.
func startTestpmdWith(t *testing.T, mode string, queues int, vdevOpts string, args2 []string, sockets ...string) *testpmd {
	t.Helper()
	netnstest.RequireTools(t, "dpdk-testpmd")
	// Pages counted free are free for whoever takes them first: another
	// testpmd (of another test process) started meanwhile takes them, and
	// this one's EAL fails ("Not enough memory available"). So pages are
	// counted and taken under a lock all of softnet's testpmds share.
	unlock := lockHugepages(t)
	defer unlock()
	huge := hugepages(t, testpmdMemMiB)
	p := &testpmd{huge: huge, out: &syncBuffer{}, prefix: fmt.Sprintf("softnet-test-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9), done: make(chan struct{})}
	// --socket-limit: no more memory than -m preallocates, ever; what it
	// took is all it will take once the lock is released.
	mem := strconv.Itoa(testpmdMemMiB)
	args := []string{"-l", "0,1", "--no-pci", "--single-file-segments", "--file-prefix=" + p.prefix,
		"--huge-dir=" + huge, "-m", mem, "--socket-limit=" + mem}
	for i, s := range sockets {
		args = append(args, fmt.Sprintf("--vdev=net_virtio_user%d,path=%s,queues=%d,queue_size=256,mac=02:dd:00:00:00:%02x%s", i, s, queues, i+1, vdevOpts))
	}
	q := strconv.Itoa(queues)
	args = append(args, "--", "--forward-mode="+mode, "--auto-start", "--nb-cores=1", "--rxq="+q, "--txq="+q, "--total-num-mbufs=8192")
	args = append(args, args2...)
	p.cmd = exec.Command("dpdk-testpmd", args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("dpdk-testpmd: %v", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop(t) })
	p.waitMemory(t)
	return p
}

// hugepageLockFile is the file whose flock serializes, between test
// processes, counting free hugepages and a testpmd taking them, and
// changing vm.nr_hugepages.
const hugepageLockFile = "/run/lock/softnet-hugepages.lock"

// lockHugepages takes the hugepage lock, waiting for it a bounded time:
// a holder keeps it only while its testpmd maps its memory.
func lockHugepages(t *testing.T) (unlock func()) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(hugepageLockFile), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(hugepageLockFile, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("hugepage lock: %v", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if err != unix.EWOULDBLOCK || time.Now().After(deadline) {
			f.Close()
			t.Fatalf("hugepage lock %s: %v", hugepageLockFile, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) } // closing releases the lock
}

// waitMemory waits until testpmd has its hugepage memory (its files in
// its own hugetlbfs mount hold -m), or has exited: only then do the
// pages it counted on stop being free.
func (p *testpmd) waitMemory(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var held int64
		files, _ := filepath.Glob(filepath.Join(p.huge, p.prefix+"*"))
		for _, f := range files {
			var st unix.Stat_t
			if unix.Stat(f, &st) == nil {
				held += st.Blocks * 512
			}
		}
		if held >= testpmdMemMiB<<20 {
			return
		}
		select {
		case <-p.done:
			return // the test fails on what it does not do
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Logf("dpdk-testpmd holds %d MiB of hugepages after a minute, want %d; going on", held>>20, testpmdMemMiB)
			return
		}
	}
}

// stop asks testpmd to quit (in non-interactive mode it waits for a
// line on its input), and kills it, by its PID, if it does not.
func (p *testpmd) stop(t *testing.T) {
	p.once.Do(func() {
		_, _ = p.stdin.Write([]byte("\n"))
		p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			t.Errorf("dpdk-testpmd did not quit; killing pid %d", p.cmd.Process.Pid)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("dpdk-testpmd output:\n%s", p.out.String())
		}
		// Its hugepage files hold their pages until removed; then its
		// runtime directory.
		files, _ := filepath.Glob(filepath.Join(p.huge, p.prefix+"*"))
		for _, f := range files {
			if err := os.Remove(f); err != nil {
				t.Errorf("remove testpmd's hugepage file: %v", err)
			}
		}
		if err := os.RemoveAll(filepath.Join("/var/run/dpdk", p.prefix)); err != nil {
			t.Errorf("remove testpmd's runtime directory: %v", err)
		}
	})
}

// hugepages makes mib MiB of 2 MiB hugepages free, raising
// vm.nr_hugepages for the test if it must, and mounts a hugetlbfs on a
// private directory; both are undone when the test ends. The caller
// holds the hugepage lock (lockHugepages).
func hugepages(t *testing.T, mib int) string {
	t.Helper()
	const nr = "/proc/sys/vm/nr_hugepages"
	// Reserved pages are counted free, but are promised to a mapping
	// already; DPDK does not count them either.
	free, size := meminfo(t, "HugePages_Free")-meminfo(t, "HugePages_Rsvd"), meminfo(t, "Hugepagesize")
	if size != 2048 {
		t.Skipf("hugepages of %d kB; testpmd's setup here assumes 2 MiB", size)
	}
	if need := mib / 2; free < need {
		// Raised by what is missing and lowered by as much after, not
		// set back to a value read now: someone else may change it
		// meanwhile.
		added := need - free
		current := func() int {
			b, err := os.ReadFile(nr)
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return n
		}
		want := current() + added
		t.Cleanup(func() {
			// Under the lock: lowered between another's count and its
			// testpmd's taking, the pool would shrink under it.
			unlock := lockHugepages(t)
			defer unlock()
			if err := os.WriteFile(nr, []byte(strconv.Itoa(max(current()-added, 0))), 0); err != nil {
				t.Errorf("lower %s by %d: %v", nr, added, err)
			}
		})
		// After builds and tests the page cache holds most of memory in
		// pieces: the kernel finds fewer contiguous 2 MiB pages than
		// asked. Each write of nr_hugepages tries again; between tries,
		// clean pages are dropped and memory compacted.
		for try := 0; ; try++ {
			if err := os.WriteFile(nr, []byte(strconv.Itoa(want)), 0); err != nil {
				t.Fatalf("raise %s: %v", nr, err)
			}
			got := meminfo(t, "HugePages_Free") - meminfo(t, "HugePages_Rsvd")
			if got >= need {
				break
			}
			if try == 4 {
				t.Fatalf("%d hugepages free after raising %s by %d five times, with memory compacted, want %d", got, nr, added, need)
			}
			_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
			_ = os.WriteFile("/proc/sys/vm/compact_memory", []byte("1"), 0)
			time.Sleep(100 * time.Millisecond)
		}
	}
	dir := t.TempDir()
	if err := syscall.Mount("softnet-hugetlbfs", dir, "hugetlbfs", 0, "pagesize=2M"); err != nil {
		t.Fatalf("mount hugetlbfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// meminfo returns a number from /proc/meminfo.
func meminfo(t *testing.T, key string) int {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == key+":" {
			n, _ := strconv.Atoi(fields[1])
			return n
		}
	}
	t.Fatalf("/proc/meminfo has no %s", key)
	return 0
}

// vhostPort returns the switch's vhost-user port named name, whose
// counters a failed test logs.
func vhostPort(t *testing.T, sw *Switch, name string) PortView {
	t.Helper()
	for _, pv := range sw.Ports() {
		if pv.Spec.Name == name && pv.VhostUser != nil {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("vhost-user port %s at the end: %+v", name, pv.VhostUser.Stats())
				}
			})
			return pv
		}
	}
	t.Fatalf("no vhost-user port %s", name)
	return PortView{}
}

// vhostSwitch runs a switch that bridges a TAP port in g's namespace
// (address addr/24) with a vhost-user port listening on sock.
func vhostSwitch(t *testing.T, g *guest, name, sock, addr string) (*Switch, func() *Report) {
	t.Helper()
	return vhostSwitchWorkers(t, g, name, sock, addr, 1, "")
}

// vhostSwitchWorkers is vhostSwitch with workers workers, and as many
// queues on each port, and more options for the vhost-user port.
func vhostSwitchWorkers(t *testing.T, g *guest, name, sock, addr string, workers int, opts string) (*Switch, func() *Report) {
	t.Helper()
	cfg := Config{Workers: workers}
	for _, spec := range []string{"tap:" + g.dev + ",netns=" + g.ns.Name, "vhost-user:" + name + ",socket=" + sock + opts} {
		p, err := ParsePort(spec)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	logs := &syncBuffer{}
	sw, err := Open(cfg, Tuning{}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop := runSwitch(t, sw, func() {
		if t.Failed() {
			t.Logf("switch %s's log:\n%s", name, logs.String())
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := json.Marshal(stop())
			t.Logf("switch %s's report: %s", name, b)
		}
	})
	g.ns.AddAddr(t, g.dev, netip.MustParsePrefix(addr+"/24"))
	return sw, stop
}

// waitPing pings to from g until one answer comes: testpmd takes a few
// seconds to map its memory and start its ports.
func waitPing(t *testing.T, g *guest, to string, pmd *testpmd, vp PortView) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := g.ns.ExecTimeout(5*time.Second, "ping", "-c", "1", "-W", "1", to); err == nil {
			return
		}
		select {
		case <-pmd.done:
			t.Fatalf("dpdk-testpmd exited (%v) before %s answered; port %s: %+v\ntestpmd:\n%s", pmd.cmd.ProcessState, to, vp.Spec.Name, vp.VhostUser.Stats(), pmd.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer from %s within 60s; port %s: %+v\ntestpmd:\n%s", to, vp.Spec.Name, vp.VhostUser.Stats(), pmd.out.String())
		}
	}
}

// pingTen sends 10 pings from g to to, one at a time, each of which
// must be answered. Not one ping -c 10: once it has sent its last
// request it waits only twice the longest round trip so far (iputils'
// linger), and on a loaded machine, with testpmd's busy lcore sharing a
// core, one reply can take longer than that (seen: 284 ms after replies
// of 2 ms; and a reply that reached the port after ping had exited): a
// late reply counted as a lost one. Each ping here waits for its own
// reply, a few seconds at most; a lost one still fails.
func pingTen(t *testing.T, g *guest, to string) {
	t.Helper()
	for i := range 10 {
		if out, err := g.ns.ExecTimeout(10*time.Second, "ping", "-c", "1", "-W", "5", to); err != nil {
			t.Fatalf("ping %d of 10 to %s: %v\n%s", i+1, to, err, out)
		}
	}
}

// TestVhostUserTestpmdICMPEcho: a namespace behind a TAP port pings
// across the bridge to DPDK's testpmd in icmpecho mode on a vhost-user
// port, which answers ARP and echo requests: 10 of 10.
func TestVhostUserTestpmdICMPEcho(t *testing.T) {
	netnstest.RequireTools(t, "ping", "dpdk-testpmd")
	g := newGuests(t, 1)[0]
	sock := filepath.Join(t.TempDir(), "vu1.sock")
	sw, stop := vhostSwitch(t, g, "vu1", sock, "198.18.23.1")
	vp := vhostPort(t, sw, "vu1")
	for run := range 2 {
		// The second run is a front-end restarted while the switch
		// runs: traffic resumes. It also negotiates no mergeable
		// buffers, so each packet must fit one of testpmd's.
		opts := ""
		if run == 1 {
			opts = ",mrg_rxbuf=0"
		}
		pmd := startTestpmdWith(t, "icmpecho", 1, opts, nil, sock)
		waitPing(t, g, "198.18.23.2", pmd, vp)
		pingTen(t, g, "198.18.23.2")
		s := vp.VhostUser.Stats()
		if mrg := s.Features&(1<<15) != 0; mrg != (run == 0) {
			t.Errorf("run %d: features %#x: VIRTIO_NET_F_MRG_RXBUF negotiated %v", run, s.Features, mrg)
		}
		if s.RxPackets < 10*uint64(run+1) || s.TxPackets < 10*uint64(run+1) || s.BadChains != 0 || s.Connects != uint64(run+1) || s.RunningRings != 2 {
			t.Errorf("run %d: vhost-user port stats %+v: want at least 10 packets each way per run, no bad chains, one connect per run", run, s)
		}
		pmd.stop(t)
		waitFor(t, 30*time.Second, "disconnect of the front-end", func() bool { return !vp.VhostUser.Connected() })
	}
	rep := stop()
	for _, d := range rep.Devices {
		if d.Port == "vu1" && (d.VhostUser == nil || d.RxPackets != d.VhostUser.RxPackets) {
			t.Errorf("report's counters for vu1: %+v", d)
		}
	}
}

// TestVhostUserTestpmdClientMode: the port connects to testpmd's
// virtio-user in server mode (as to a VM's QEMU that listens), and again
// after testpmd restarts, with the switch running.
func TestVhostUserTestpmdClientMode(t *testing.T) {
	netnstest.RequireTools(t, "ping", "dpdk-testpmd")
	g := newGuests(t, 1)[0]
	sock := filepath.Join(t.TempDir(), "vu1.sock")
	sw, _ := vhostSwitchWorkers(t, g, "vu1", sock, "198.18.27.1", 1, ",mode=client")
	vp := vhostPort(t, sw, "vu1")
	for run := range 2 {
		pmd := startTestpmdWith(t, "icmpecho", 1, ",server=1", nil, sock)
		waitPing(t, g, "198.18.27.2", pmd, vp)
		pingTen(t, g, "198.18.27.2")
		pmd.stop(t)
		waitFor(t, 30*time.Second, "disconnect of the front-end", func() bool { return !vp.VhostUser.Connected() })
		// At least one connect per run: a dial while the old testpmd
		// still listens, exiting, connects too (to its backlog).
		if s := vp.VhostUser.Stats(); s.Connects < uint64(run+1) {
			t.Errorf("run %d: %d connects", run, s.Connects)
		}
		os.Remove(sock) // in case testpmd left its socket file behind
	}
}

// TestVhostUserTestpmdWire: two switches, each with a TAP guest and a
// vhost-user port, and testpmd forwarding between a virtio-user port on
// each (io mode) as a wire: the guests ping each other and move a file
// whose checksum is checked. (Both ports on one switch would be a bridge
// loop.)
func TestVhostUserTestpmdWire(t *testing.T) {
	netnstest.RequireTools(t, "ping", "dpdk-testpmd")
	gs := newGuests(t, 2)
	dir := t.TempDir()
	socks := []string{filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")}
	var ports []PortView
	for i, g := range gs {
		g.v4 = fmt.Sprintf("198.18.24.%d", i+1)
		sw, _ := vhostSwitch(t, g, fmt.Sprintf("vu%d", i+1), socks[i], g.v4)
		ports = append(ports, vhostPort(t, sw, fmt.Sprintf("vu%d", i+1)))
	}
	pmd := startTestpmd(t, "io", socks...)
	waitPing(t, gs[0], gs[1].v4, pmd, ports[0])
	pingTen(t, gs[0], gs[1].v4)
	pingTen(t, gs[1], gs[0].v4)
	transfer(t, gs[0], gs[1], gs[1].v4, 5023, 16<<20)
	for _, vp := range ports {
		if s := vp.VhostUser.Stats(); s.BadChains != 0 || s.BrokenRings != 0 {
			t.Errorf("port %s: %+v", vp.Spec.Name, s)
		}
	}
	pmd.stop(t)
}

// TestVhostUserTestpmdMultiQueue: a switch of two workers and a
// vhost-user port of two queue pairs (multiqueue negotiated), testpmd's
// virtio-user starting both, with checksum and TCP segmentation offloads
// negotiated both ways: ARP and pings are answered.
func TestVhostUserTestpmdMultiQueue(t *testing.T) {
	netnstest.RequireTools(t, "ping", "dpdk-testpmd")
	g := newGuests(t, 1)[0]
	sock := filepath.Join(t.TempDir(), "vu1.sock")
	sw, _ := vhostSwitchWorkers(t, g, "vu1", sock, "198.18.25.1", 2, "")
	vp := vhostPort(t, sw, "vu1")
	// Receive offloads UDP and TCP checksums and LRO (0x1c) ask for
	// GUEST_CSUM and GUEST_TSO4/6; transmit offloads UDP and TCP
	// checksums and TSO (0x2c) for CSUM and HOST_TSO4/6. (virtio has no
	// IPv4 header checksum offload.)
	pmd := startTestpmdWith(t, "icmpecho", 2, "", []string{"--rx-offloads=0x1c", "--tx-offloads=0x2c"}, sock)
	waitPing(t, g, "198.18.25.2", pmd, vp)
	s := vp.VhostUser.Stats()
	if s.RunningRings != 4 {
		t.Fatalf("%d rings running, want 4 (two queue pairs)", s.RunningRings)
	}
	const csum, guestCsum, guestTSO4, hostTSO4 = 1 << 0, 1 << 1, 1 << 7, 1 << 11
	if want := uint64(csum | guestCsum | guestTSO4 | hostTSO4); s.Features&want != want {
		t.Errorf("features %#x, want the checksum and TSO offloads (%#x)", s.Features, want)
	}
	pingTen(t, g, "198.18.25.2")
	pmd.stop(t)
}

// Without dpdk-testpmd the tests skip, naming the package to install,
// and fail instead when CI requires them.
func TestVhostUserTestpmdNeedsDPDK(t *testing.T) {
	out, passed := netnstest.RerunWithout(t, "TestVhostUserTestpmdICMPEcho", nil, "dpdk-testpmd")
	if !passed || !strings.Contains(out, "SKIP") || !strings.Contains(out, "Debian package dpdk-dev") {
		t.Errorf("without dpdk-testpmd: passed %v\n%s", passed, out)
	}
	out, passed = netnstest.RerunWithout(t, "TestVhostUserTestpmdICMPEcho", []string{netnstest.RequireEnv + "=1"}, "dpdk-testpmd")
	if passed || !strings.Contains(out, "dpdk-dev") {
		t.Errorf("without dpdk-testpmd, required: passed %v\n%s", passed, out)
	}
}

// TestVhostUserTestpmdTwoFrontends: two virtio-user devices of one
// testpmd on two vhost-user ports of one switch reach each other. testpmd
// sends a first burst on each (--tx-first) and forwards what each
// receives out of the other (io), so the same 64 frames circulate
// through the bridge until testpmd stops: bounded in count and time.
func TestVhostUserTestpmdTwoFrontends(t *testing.T) {
	netnstest.RequireTools(t, "dpdk-testpmd")
	netnstest.RequireRoot(t)
	dir := t.TempDir()
	socks := []string{filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")}
	cfg := Config{Workers: 1}
	for i, s := range socks {
		p, err := ParsePort(fmt.Sprintf("vhost-user:vu%d,socket=%s", i+1, s))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	sw, err := Open(cfg, Tuning{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop := runSwitch(t, sw, nil)
	pmd := startTestpmdWith(t, "io", 1, "", []string{"--tx-first"}, socks...)
	a, b := vhostPort(t, sw, "vu1"), vhostPort(t, sw, "vu2")
	waitFor(t, 60*time.Second, "frames both ways between the two front-ends", func() bool {
		sa, sb := a.VhostUser.Stats(), b.VhostUser.Stats()
		return sa.RxPackets > 10000 && sa.TxPackets > 10000 && sb.RxPackets > 10000 && sb.TxPackets > 10000
	})
	pmd.stop(t)
	rep := stop()
	if rep.Bridge == nil || rep.Bridge.Learned < 2 {
		t.Errorf("bridge %+v: want both front-ends' MACs learned", rep.Bridge)
	}
	for _, vp := range []PortView{a, b} {
		if s := vp.VhostUser.Stats(); s.BadChains != 0 || s.BrokenRings != 0 {
			t.Errorf("port %s: %+v", vp.Spec.Name, s)
		}
	}
}

// TestVhostUserTestpmdTwoProcesses: two test processes start testpmd at
// once, as go test runs packages in parallel and a lab run may start
// testpmd too, and each gets its hugepages. (Each counting free pages
// before its testpmd took them, both counted the same pages, and one
// testpmd's EAL failed: "Cannot init memory".)
func TestVhostUserTestpmdTwoProcesses(t *testing.T) {
	netnstest.RequireTools(t, "dpdk-testpmd")
	netnstest.RequireRoot(t)
	outs := make(chan string, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			b, err := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestVhostUserTestpmdTwoFrontends$", "-test.count=1", "-test.v").CombinedOutput()
			if err != nil || !bytes.Contains(b, []byte("--- PASS: TestVhostUserTestpmdTwoFrontends")) {
				outs <- fmt.Sprintf("%v\n%s", err, b)
				return
			}
			outs <- ""
		}()
	}
	for range 2 {
		if out := <-outs; out != "" {
			t.Errorf("one of two processes: %s", out)
		}
	}
}
