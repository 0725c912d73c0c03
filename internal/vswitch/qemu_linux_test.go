package vswitch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"softnet.dev/internal/netnstest"
	"softnet.dev/internal/unixsock"
)

// A real Linux guest on a vhost-user port: QEMU under TCG (nested KVM
// hangs on the machines softnet is tested on) boots Debian's cloud
// kernel with the initramfs of qemuguest_linux_test.go, and its own
// virtio_net driver drives the port. Every package it needs is Debian's:
// qemu-system-x86, linux-image-cloud-amd64, busybox-static (and ethtool,
// iputils-ping). QEMU 7.2 under TCG crashes in msix_set_vector_notifiers
// with any vhost-user back-end unless the device has no MSI-X vectors
// (vectors=0): the guest's driver then takes INTx interrupts.

// qemuBoot bounds a boot: about 10 s on an idle machine, more when other
// tests load it.
const qemuBoot = 3 * time.Minute

// qemuConfig is one configuration of the test: a block of docs/qemu.md
// (a switch and a VM on it) and what the test adds to it.
type qemuConfig struct {
	name   string
	page   string // the block of docs/qemu.md: its switch and QEMU lines
	opts   string // further options of the vhost-user port
	device string // further options of the virtio-net device
	// What the page's block and these give: the switch's workers, the
	// port's options, whether the switch connects to QEMU (mode=client),
	// whether the device offers VIRTIO_NET_F_MRG_RXBUF.
	workers int
	client  bool
	mrg     bool
}

// runQEMUVersion is the version of the qemu-system-x86_64 on PATH.
func runQEMUVersion(t *testing.T) qemuVersion {
	t.Helper()
	out, err := exec.Command("qemu-system-x86_64", "--version").Output()
	if err != nil {
		t.Fatalf("qemu-system-x86_64 --version: %v", err)
	}
	m := regexp.MustCompile(`version (\d+)\.(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("qemu-system-x86_64 --version: no version in %q", out)
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	return qemuVersion{major, minor}
}

// TestVhostUserQEMU boots a Linux guest on a vhost-user port bridged
// with a TAP port, in each configuration in turn, and pings both ways
// with MTU-sized and fragmented packets (1472 and 4000 bytes of
// payload), again after the guest changes its queue pairs and after it
// restarts:
//
//   - softnet listening, two workers, two queue pairs with mergeable
//     buffers: the guest (one vCPU) enables one pair, fewer than the
//     workers, then both (ethtool -L), then reboots.
//   - softnet connecting to QEMU, which listens; one queue pair, and
//     no mergeable buffers but the offloads, so that the guest posts
//     receive chains of 17 pages ("big packets"); then QEMU is killed
//     and started again.
//
// Each ends with nothing refused or given up, and the pools balanced.
func TestVhostUserQEMU(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.RequireTools(t, "ping", "qemu-system-x86_64")
	kernel, modules := guestKernel(t)
	initrd := buildInitramfs(t, t.TempDir(), modules)
	for _, c := range []qemuConfig{
		{name: "server_queues2_mergeable", page: "server"},
		{name: "client_queues1_big_packets", page: "client", opts: ",offload=on", device: ",mrg_rxbuf=off"},
	} {
		t.Run(c.name, func(t *testing.T) { testQEMU(t, c, kernel, initrd) })
	}
}

func testQEMU(t *testing.T, c qemuConfig, kernel, initrd string) {
	pc, err := parsePage(qemuPage, c.page)
	if err != nil {
		t.Fatal(err)
	}
	opts := pc.opts + c.opts
	c.workers, c.client = pc.workers, strings.Contains(opts, ",mode=client")
	c.mrg = !strings.Contains(c.device, "mrg_rxbuf=off")
	if c.workers > 1 && pc.queues != c.workers {
		t.Fatalf("docs/qemu.md's %s block: %d workers and %d queue pairs; the test wants as many of each", c.page, c.workers, pc.queues)
	}
	g := newGuests(t, 1)[0]
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil { // as the page says: QEMU's user reaches the socket
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "vm1.sock")
	sw, stop := vhostSwitchWorkers(t, g, "vm1", sock, hostAddr, c.workers, opts)
	vp := vhostPort(t, sw, "vm1")
	checkSocketPerm(t, sock, opts)
	args, err := pc.qemuPageArgs(sock, kernel, initrd, c.device, runQEMUVersion(t))
	if err != nil {
		t.Fatalf("docs/qemu.md's %s block: %v", c.page, err)
	}
	t.Logf("qemu-system-x86_64 %s", strings.Join(args, " "))

	vm := startQEMU(t, args)
	t.Logf("guest: %s", last(vm.expect("@@READY", qemuBoot, vp)))
	// One pair runs, whatever the device has: a guest with one vCPU
	// enables one.
	vm.waitFor("the guest's first queue pair running", time.Minute, vp, func() bool { return vp.VhostUser.Stats().RunningRings == 2 })
	s := vp.VhostUser.Stats()
	const mrgRxbuf, guestTSO4 = 1 << 15, 1 << 7
	if got := s.Features&mrgRxbuf != 0; got != c.mrg {
		t.Errorf("features %#x: VIRTIO_NET_F_MRG_RXBUF negotiated %v, want %v", s.Features, got, c.mrg)
	}
	if !c.mrg && s.Features&guestTSO4 == 0 {
		t.Errorf("features %#x: no GUEST_TSO4, so the guest does not post big-packet chains", s.Features)
	}
	pings(t, vm, g, vp, "after boot")

	if c.workers > 1 {
		if out, rc := vm.run("ethtool -L eth0 combined 2", time.Minute, vp); rc != 0 {
			t.Fatalf("ethtool -L eth0 combined 2: status %d\n%s", rc, out)
		}
		vm.waitFor("both queue pairs running", time.Minute, vp, func() bool { return vp.VhostUser.Stats().RunningRings == 4 })
		pings(t, vm, g, vp, "with both queue pairs")
	}

	if c.client {
		vm.kill()
		waitFor(t, time.Minute, "the port to see QEMU go", func() bool { return !vp.VhostUser.Connected() })
		vm = startQEMU(t, args)
	} else {
		vm.send("reboot -f") // no answer: the guest resets
	}
	t.Logf("guest after the restart: %s", last(vm.expect("@@READY", qemuBoot, vp)))
	vm.waitFor("the queue pair running again", time.Minute, vp, func() bool { return vp.VhostUser.Stats().RunningRings == 2 })
	pings(t, vm, g, vp, "after the restart")

	s = vp.VhostUser.Stats()
	t.Logf("port: %+v", s)
	if s.Refused != 0 || s.BadChains != 0 || s.BrokenRings != 0 {
		t.Errorf("port %+v: want nothing refused or broken", s)
	}
	if c.client && s.Connects < 2 || !c.client && s.Connects != 1 {
		t.Errorf("%d connects: want one per QEMU (a reboot keeps the connection)", s.Connects)
	}
	vm.kill()
	waitFor(t, 30*time.Second, "disconnect of the VM", func() bool { return !vp.VhostUser.Connected() })
	if rep := stop(); rep == nil || rep.Leak != "ok" {
		t.Errorf("switch report %+v: want the leak check balanced after the VM came and went", rep)
	}
}

// checkSocketPerm checks that the port's socket has the group and mode
// its options (the page's) give: socket-group= and 0660.
func checkSocketPerm(t *testing.T, sock, opts string) {
	t.Helper()
	if portOpts(opts)["mode"] == "client" {
		return // QEMU's socket, made when QEMU starts
	}
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if g, ok := portOpts(opts)["socket-group"]; ok {
		gid, err := unixsock.LookupGroup(g)
		if err != nil {
			t.Fatal(err)
		}
		if int(st.Gid) != gid || fi.Mode().Perm() != 0o660 {
			t.Errorf("socket %v of group %d: want 0660 and group %s (%d)", fi.Mode(), st.Gid, g, gid)
		}
	}
}

// portOpts are ",k=v,..." as a map.
func portOpts(opts string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Split(strings.TrimPrefix(opts, ","), ",") {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

// pingSizes are the ICMP payloads pinged: a 1500-byte IP packet, and
// one of three fragments.
var pingSizes = []int{1472, 4000}

// pingCounts matches the summary of iputils' and busybox's ping.
var pingCounts = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)

// pings pings the guest from the TAP namespace and the namespace from
// the guest, three of each size, and wants every answer.
func pings(t *testing.T, vm *qemuVM, g *guest, vp vhostView, when string) {
	t.Helper()
	for _, size := range pingSizes {
		n := strconv.Itoa(size)
		out, err := g.ns.ExecTimeout(time.Minute, "ping", "-c", "3", "-i", "0.2", "-W", "5", "-s", n, guestAddr)
		if m := pingCounts.FindStringSubmatch(out); err != nil || m == nil || m[1] != m[2] {
			t.Fatalf("%s: ping -s %d from the namespace to the guest: %v\n%s\nport %+v\n%s", when, size, err, out, vp.VhostUser.Stats(), vm.report())
		}
		out, rc := vm.run("ping -c 3 -i 0.2 -W 5 -s "+n+" "+hostAddr, time.Minute, vp)
		m := pingCounts.FindStringSubmatch(out)
		if rc != 0 || m == nil || m[1] != m[2] {
			t.Fatalf("%s: ping -s %d from the guest to the namespace: status %d\n%s\nport %+v", when, size, rc, out, vp.VhostUser.Stats())
		}
		t.Logf("%s: guest: %s", when, m[0])
	}
}

// qemuVM is a running QEMU whose serial console is its standard input
// and output: the test writes command lines for the guest's init and
// reads what the guest prints.
type qemuVM struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	con    *syncBuffer // the console's output
	stderr *syncBuffer // QEMU's messages
	done   chan error
	exit   error
	exited bool
	read   int // the console output consumed by expect
	id     int // the last command's
}

func startQEMU(t *testing.T, args []string) *qemuVM {
	t.Helper()
	vm := &qemuVM{t: t, con: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan error, 1)}
	vm.cmd = exec.Command("qemu-system-x86_64", args...)
	vm.cmd.Stdout, vm.cmd.Stderr = vm.con, vm.stderr
	vm.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var err error
	if vm.in, err = vm.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := vm.cmd.Start(); err != nil {
		t.Fatalf("qemu: %v", err)
	}
	go func() { vm.done <- vm.cmd.Wait() }()
	t.Cleanup(vm.kill)
	return vm
}

// kill ends the VM, by its PID, as a host would pull its plug.
func (vm *qemuVM) kill() {
	if vm.alive() {
		_ = vm.cmd.Process.Kill()
		vm.exit, vm.exited = <-vm.done, true
	}
	vm.in.Close()
}

func (vm *qemuVM) alive() bool {
	if !vm.exited {
		select {
		case vm.exit = <-vm.done:
			vm.exited = true
		default:
		}
	}
	return !vm.exited
}

// report is QEMU's messages and the end of the guest's console.
func (vm *qemuVM) report() string {
	return "qemu:\n" + vm.stderr.String() + "\nserial console (tail):\n" + tail(vm.con.String(), 3000)
}

// check fails the test if QEMU is gone or the guest gave up (@@FAIL, a
// kernel panic).
func (vm *qemuVM) check(what string, vp vhostView) {
	t := vm.t
	t.Helper()
	if !vm.alive() {
		var ee *exec.ExitError
		if errors.As(vm.exit, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Fatalf("QEMU died of %v waiting for %s; port %+v\n%s", ws.Signal(), what, vp.stats(), vm.report())
			}
		}
		t.Fatalf("QEMU exited (%v) waiting for %s; port %+v\n%s", vm.exit, what, vp.stats(), vm.report())
	}
	if con := vm.con.String(); strings.Contains(con, "@@FAIL") || strings.Contains(con, "Kernel panic") {
		t.Fatalf("the guest failed waiting for %s; port %+v\n%s", what, vp.stats(), vm.report())
	}
}

// waitFor waits until cond holds, failing the test if the VM fails
// first or d passes.
func (vm *qemuVM) waitFor(what string, d time.Duration, vp vhostView, cond func() bool) {
	vm.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		vm.check(what, vp)
		if time.Now().After(deadline) {
			vm.t.Fatalf("no %s within %v; port %+v\n%s", what, d, vp.stats(), vm.report())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// expect waits for a console line that starts with marker, after the
// lines earlier calls consumed, and returns the lines up to it, the
// marker's last.
func (vm *qemuVM) expect(marker string, d time.Duration, vp vhostView) []string {
	vm.t.Helper()
	var lines []string
	vm.waitFor(marker+" on the console", d, vp, func() bool {
		con := vm.con.String()
		for {
			nl := strings.IndexByte(con[vm.read:], '\n')
			if nl < 0 {
				return false
			}
			line := strings.TrimRight(con[vm.read:vm.read+nl], "\r")
			vm.read += nl + 1
			lines = append(lines, line)
			if strings.HasPrefix(line, marker) {
				return true
			}
		}
	})
	return lines
}

// send writes a command line for the guest's init.
func (vm *qemuVM) send(cmd string) int {
	vm.t.Helper()
	vm.id++
	if _, err := fmt.Fprintf(vm.in, "%d %s\n", vm.id, cmd); err != nil {
		vm.t.Fatalf("the guest's console: %v\n%s", err, vm.report())
	}
	return vm.id
}

// run runs cmd in the guest and returns its output and exit status.
func (vm *qemuVM) run(cmd string, d time.Duration, vp vhostView) (string, int) {
	vm.t.Helper()
	marker := fmt.Sprintf("@@DONE %d ", vm.send(cmd))
	lines := vm.expect(marker, d, vp)
	last := lines[len(lines)-1]
	rc, err := strconv.Atoi(strings.TrimSpace(last[len(marker):]))
	if err != nil {
		vm.t.Fatalf("%q: %q: no status", cmd, last)
	}
	return strings.Join(lines[:len(lines)-1], "\n"), rc
}

// stats is the port's counters, for a failure's message; a port in a
// switch process of its own has none here (its log says more).
func (v vhostView) stats() any {
	if v.VhostUser == nil {
		return "(in a switch process)"
	}
	return v.VhostUser.Stats()
}

func last(lines []string) string { return lines[len(lines)-1] }

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Without QEMU the test skips, naming the package to install, and fails
// instead when CI requires it.
func TestVhostUserQEMUNeedsPackages(t *testing.T) {
	netnstest.RequireRoot(t)
	out, passed := netnstest.RerunWithout(t, "TestVhostUserQEMU", nil, "qemu-system-x86_64")
	if !passed || !strings.Contains(out, "SKIP") || !strings.Contains(out, "Debian package qemu-system-x86") {
		t.Errorf("without qemu-system-x86_64: passed %v\n%s", passed, out)
	}
	out, passed = netnstest.RerunWithout(t, "TestVhostUserQEMU", []string{netnstest.RequireEnv + "=1"}, "qemu-system-x86_64")
	if passed || !strings.Contains(out, "qemu-system-x86") {
		t.Errorf("without qemu-system-x86_64, required: passed %v\n%s", passed, out)
	}
}
