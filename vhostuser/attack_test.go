//go:build linux

package vhostuser

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/internal/netnstest"
)

// A hostile front-end in a process of its own attacks a vhost-user port
// of a running `softnet switch`, over the port's socket, while two TAP
// guests on the same worker ping each other. For each attack: the guests
// lose at most 1 ping in 100, the switch's CPU is back to idle (at most
// 1%) a second after the attack while the attacker holds on to what it
// did, the switch counts what it refused by reason (`softnet ctl stats`),
// and once the attacker is gone the switch holds no more descriptors
// than before. At the end the switch stops with its buffers balanced.
//
// The attacker is this test binary run again with attackEnv naming the
// attack (TestAttackerProcess): it plays a front-end and guest with the
// package's test front-end, prints attackReady once the attack is in
// place, and holds on until its standard input closes. A line "later"
// on its input has it do the attack's second part, if any, while the
// guests are quiet, and print laterDone.

const (
	attackEnv       = "SOFTNET_VHOST_ATTACK"
	attackSocketEnv = "SOFTNET_VHOST_ATTACK_SOCKET"
	attackReady     = "ATTACK READY"
	laterDone       = "LATER DONE"
)

// attack is one attack: what the attacker process does (run, and the
// part it returns for later, or nil), and what the switch must have
// counted for it, from the vhost-user port's stats before and after (""
// when all is there).
type attack struct {
	name  string
	run   func(t *testing.T, socket string) (later func())
	check func(before, after Stats) string
}

// want returns a check that each refusal of reasons went up by at least
// its count, and RxPackets by at least rx.
func want(rx uint64, reasons map[Refusal]uint64) func(before, after Stats) string {
	return func(before, after Stats) string {
		var missing []string
		for r, n := range reasons {
			if got := after.Refusals[r] - before.Refusals[r]; got < n {
				missing = append(missing, fmt.Sprintf("%d %s refusals, want %d", got, r, n))
			}
		}
		if got := after.RxPackets - before.RxPackets; got < rx {
			missing = append(missing, fmt.Sprintf("%d packets from the guest, want %d", got, rx))
		}
		return strings.Join(missing, "; ")
	}
}

var attacks = []attack{
	{"shrink-under-worker", attackShrinkUnderWorker, want(0, map[Refusal]uint64{RefusedRingFault: 1})},
	{"shrink-under-control", attackShrinkUnderControl, want(0, map[Refusal]uint64{RefusedMemoryFault: 1})},
	{"blocking-eventfds", attackBlockingEventfds, want(5, nil)},
	{"saturated-call", attackSaturatedCall, callsNotMade},
	{"call-made-blocking", attackCallMadeBlocking, callsNotMade},
	{"not-eventfds", attackNotEventfds, want(0, map[Refusal]uint64{RefusedNotEventfd: 10})},
	{"ring-ahead", attackRingAhead, want(0, map[Refusal]uint64{RefusedRingAhead: 1})},
	{"disabled-ring-kicked", attackDisabledRingKicked, want(0, nil)},
	{"ring-not-started-kicked", attackRingNotStartedKicked, want(0, map[Refusal]uint64{RefusedRingAddress: 1})},
	{"no-kick-descriptor", attackNoKick, func(before, after Stats) string {
		if after.Polls == before.Polls {
			return "no poll counted"
		}
		return want(10, nil)(before, after)
	}},
	{"regions", attackRegions, want(0, map[Refusal]uint64{RefusedMemTable: 2, RefusedMalformed: 1})},
	{"chains", attackChains, want(uint64(len(chainLengths)), map[Refusal]uint64{RefusedChainTooLong: 1, RefusedChainBadMemory: 1})},
	{"disconnect-mid-message", attackDisconnects, want(0, map[Refusal]uint64{RefusedTruncated: 26})},
}

// callsNotMade checks that calls were not made while one waited on a
// saturated counter: counted as failed.
func callsNotMade(before, after Stats) string {
	if after.CallsFailed == before.CallsFailed {
		return "no failed call counted"
	}
	return ""
}

// TestAttackerProcess is the attacker: it runs only in the process
// TestHostileFrontendProcess starts.
func TestAttackerProcess(t *testing.T) {
	name := os.Getenv(attackEnv)
	if name == "" {
		t.Skip("the attacker of TestHostileFrontendProcess, run by it in a process of its own")
	}
	for _, a := range attacks {
		if a.name == name {
			later := a.run(t, os.Getenv(attackSocketEnv))
			fmt.Println(attackReady)
			for in := bufio.NewScanner(os.Stdin); in.Scan(); {
				if in.Text() == "later" && later != nil {
					later()
				}
				fmt.Println(laterDone)
			}
			return
		}
	}
	t.Fatalf("no attack %q", name)
}

// waitUsed waits until the port used n entries of ring r in all.
func waitUsed(t *testing.T, f *testFrontend, r int, n uint16) {
	t.Helper()
	waitFor(t, func() bool { return f.usedIdx(r) == n }, fmt.Sprintf("used entry %d of ring %d", n, r))
}

// The guest's memory file shrinks under the rings while they run; the
// guest kicks, and packets come for it.
func attackShrinkUnderWorker(t *testing.T, socket string) func() {
	f := newTestFrontend(t, socket)
	f.setup(featVersion1 | featMrgRxbuf)
	f.postRx(0, 64, bufSize)
	shrink(t, f)
	signalFD(f.kick[1])
	return nil
}

// The memory file shrinks, then the front-end has the rings restarted:
// the control plane reads them.
func attackShrinkUnderControl(t *testing.T, socket string) func() {
	f := newTestFrontend(t, socket)
	f.setup(featVersion1 | featMrgRxbuf)
	shrink(t, f)
	if err := f.send(reqSetFeatures, flagNeedReply, u64Payload(featVersion1|featMrgRxbuf|featProtocol)); err != nil {
		t.Fatal(err)
	}
	if r, err := f.reply(reqSetFeatures); err == nil {
		t.Fatalf("the session went on after guest memory faulted (reply %x)", r)
	}
	return nil
}

// Kick and call eventfds that block (eventfd(0, 0)); the guest sends
// five packets, kicking.
func attackBlockingEventfds(t *testing.T, socket string) func() {
	f := newTestFrontend(t, socket)
	for r := range 2 {
		f.kick[r], f.call[r] = eventfd(t, 0, 0), eventfd(t, 0, 0)
	}
	f.setup(featVersion1 | featMrgRxbuf)
	f.postRx(0, 64, bufSize)
	sendKicked(t, f, 5)
	return nil
}

// Call eventfds whose counters are saturated, created blocking (the
// switch makes them non-blocking); the guest sends, which the port
// notifies.
func attackSaturatedCall(t *testing.T, socket string) func() {
	f := newTestFrontend(t, socket)
	for r := range 2 {
		f.call[r] = eventfd(t, saturated, 0)
	}
	f.setup(featVersion1 | featMrgRxbuf)
	f.postRx(0, 64, bufSize)
	sendKicked(t, f, 3)
	return nil
}

// Call eventfds made blocking again once the switch took them (the flag
// is the open file's, which the front-end shares), then saturated; the
// guest sends, which the port notifies.
func attackCallMadeBlocking(t *testing.T, socket string) func() {
	f := newTestFrontend(t, socket)
	f.setup(featVersion1 | featMrgRxbuf)
	for r := range 2 {
		if err := unix.SetNonblock(f.call[r], false); err != nil {
			t.Fatal(err)
		}
		saturate(t, f.call[r])
	}
	f.postRx(0, 64, bufSize)
	sendKicked(t, f, 3)
	return nil
}

// sendKicked has the guest send n packets, kicking, and waits until the
// port used each.
func sendKicked(t *testing.T, f *testFrontend, n int) {
	for i := range n {
		f.transmit(i, testFrame(64, byte(i)))
		signalFD(f.kick[1])
		waitUsed(t, f, 1, uint16(i+1))
	}
}

// Pipes, files, sockets, devices and timerfds as kicks and calls.
func attackNotEventfds(t *testing.T, socket string) func() {
	f := newTestFrontend(t, socket)
	f.setup(featVersion1 | featMrgRxbuf)
	for _, k := range notEventfds(t) {
		for _, req := range []uint32{reqSetVringKick, reqSetVringCall} {
			fd := k.open()
			f.refused(k.name, req, u64Payload(1), fd)
			unix.Close(fd)
		}
	}
	return nil
}

// Available indexes more than a ring ahead, on both rings, kicked.
func attackRingAhead(t *testing.T, socket string) func() {
	f := newTestFrontend(t, socket)
	f.setup(featVersion1 | featMrgRxbuf)
	f.postRx(0, 16, bufSize)
	for r := range 2 {
		f.setAvailIdx(r, f.availIdx[r]+testNum+1)
	}
	signalFD(f.kick[1])
	return nil
}

// A ring disabled (SET_VRING_ENABLE 0) with a packet on it, kicked.
func attackDisabledRingKicked(t *testing.T, socket string) func() {
	f := newTestFrontend(t, socket)
	f.setup(featVersion1 | featMrgRxbuf)
	f.must(reqSetVringEnable, statePayload(vringState{1, 0}))
	f.transmit(0, testFrame(64, 1))
	signalFD(f.kick[1])
	return nil
}

// A ring whose descriptor table lies past the guest's memory, so that it
// cannot start, kicked.
func attackRingNotStartedKicked(t *testing.T, socket string) func() {
	f := newTestFrontend(t, socket)
	f.setup(featVersion1 | featMrgRxbuf)
	f.get(reqGetVringBase, statePayload(vringState{1, 0}))
	f.setRingAddr(1, userBase+memSize)
	f.must(reqSetVringKick, u64Payload(1), f.kick[1])
	f.transmit(0, testFrame(64, 1))
	signalFD(f.kick[1])
	return nil
}

// A transmit ring without a kick descriptor (VHOST_USER_VRING_NOFD): the
// guest sends now and then, never kicking, later too, when no other
// traffic wakes the worker.
func attackNoKick(t *testing.T, socket string) func() {
	f := newTestFrontend(t, socket)
	f.setup(featVersion1 | featMrgRxbuf)
	f.must(reqSetVringKick, u64Payload(1|vringNoFD))
	sent := 0
	send := func() {
		for range 5 {
			time.Sleep(50 * time.Millisecond) // the worker falls asleep
			f.transmit(sent, testFrame(64, byte(sent)))
			sent++
			waitUsed(t, f, 1, uint16(sent))
		}
	}
	send()
	return send
}

// Memory tables whose regions overlap, then one whose region wraps
// around the address space (a malformed message: the session ends).
func attackRegions(t *testing.T, socket string) func() {
	f := newTestFrontend(t, socket)
	f.setup(featVersion1 | featMrgRxbuf)
	const half = memSize / 2
	for _, rs := range [][]memRegion{
		{{guestBase, half, userBase, 0}, {guestBase + half/2, half, userBase + half, half}},
		{{guestBase, half, userBase, 0}, {guestBase + half, half, userBase + half/2, half}},
	} {
		f.refused("overlapping regions", reqSetMemTable, memTablePayload(rs...), f.memFD, f.memFD)
	}
	if err := f.send(reqSetMemTable, flagNeedReply, memTablePayload(memRegion{^uint64(0) - 0xfff, 0x2000, userBase, 0}), f.memFD); err != nil {
		t.Fatal(err)
	}
	if r, err := f.reply(reqSetMemTable); err == nil {
		t.Fatalf("the session went on after a region that wraps (reply %x)", r)
	}
	return nil
}

// chainLengths are the descriptor counts of attackChains' packets.
var chainLengths = []int{1, 2, 3, 16, 64, 255, 256, 511, 1023, 1024}

// On a ring of 1024 entries: a descriptor that chains to itself, one
// outside the guest's memory, and a 1514-byte frame in chains of 1 to
// 1024 descriptors, which the port must take.
func attackChains(t *testing.T, socket string) func() {
	f := newTestFrontend(t, socket)
	f.num = 1024
	f.setup(featVersion1 | featMrgRxbuf)
	off := f.bufOff(1, 0)
	pkt := append(make([]byte, f.hdrLen), testFrame(1514, 7)...)
	copy(f.mem[off:], pkt)
	used := uint16(0)
	offer := func() {
		f.offer(1, 0)
		signalFD(f.kick[1])
		used++
		waitUsed(t, f, 1, used)
	}
	f.setDesc(1, 0, guestBase+uint64(off), 64, descNext, 0)
	offer()
	f.setDesc(1, 0, guestBase+memSize, 64, 0, 0)
	offer()
	for _, n := range chainLengths {
		at := 0
		for i := range n {
			l := len(pkt) / n
			if i < len(pkt)%n {
				l++
			}
			flags := uint16(descNext)
			if i == n-1 {
				flags = 0
			}
			f.setDesc(1, i, guestBase+uint64(off+at), uint32(l), flags, uint16(i+1))
			at += l
		}
		offer()
	}
	return nil
}

// A front-end that hangs up in the middle of each message of a ring's
// setup: one byte into it, after its header, and half way through its
// payload, with the descriptors it carries. 26 cuts.
func attackDisconnects(t *testing.T, socket string) func() {
	f := newTestFrontend(t, "")
	addr := binary.LittleEndian.AppendUint32(nil, 1)
	addr = binary.LittleEndian.AppendUint32(addr, 0)
	for _, a := range []uint64{userBase + uint64(f.descOff(1)), userBase + uint64(f.usedOff(1)), userBase + uint64(f.availOff(1)), 0} {
		addr = binary.LittleEndian.AppendUint64(addr, a)
	}
	type message struct {
		req     uint32
		payload []byte
		fds     []int
	}
	setup := []message{
		{reqGetFeatures, nil, nil},
		{reqSetFeatures, u64Payload(featVersion1 | featProtocol), nil},
		{reqSetOwner, nil, nil},
		{reqSetMemTable, memTablePayload(memRegion{guestBase, memSize, userBase, 0}), []int{f.memFD}},
		{reqSetVringNum, statePayload(vringState{1, testNum}), nil},
		{reqSetVringAddr, addr, nil},
		{reqSetVringBase, statePayload(vringState{1, 0}), nil},
		{reqSetVringCall, u64Payload(1), []int{f.call[1]}},
		{reqSetVringKick, u64Payload(1), []int{f.kick[1]}},
		{reqSetVringEnable, statePayload(vringState{1, 1}), nil},
	}
	encode := func(m message) []byte {
		b := binary.LittleEndian.AppendUint32(nil, m.req)
		b = binary.LittleEndian.AppendUint32(b, version)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m.payload)))
		return append(b, m.payload...)
	}
	write := func(b []byte, fds []int) {
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		if _, _, err := f.conn.WriteMsgUnix(b, oob, nil); err != nil {
			t.Fatal(err)
		}
	}
	cuts := 0
	for k, m := range setup {
		at := []int{1}
		if len(m.payload) > 0 {
			at = append(at, headerLen, headerLen+len(m.payload)/2)
		}
		for _, n := range at {
			f.dial(socket)
			// GET_FEATURES is left out before the cut: its reply would
			// meet a closed socket and end the session first.
			for _, before := range setup[1:max(k, 1)] {
				write(encode(before), before.fds)
			}
			write(encode(m)[:n], m.fds)
			f.conn.Close()
			cuts++
		}
	}
	if cuts != 26 {
		t.Fatalf("%d cuts, the switch is checked for 26", cuts)
	}
	return nil
}

// TestHostileFrontendProcess runs the attacks against a `softnet switch`.
func TestHostileFrontendProcess(t *testing.T) {
	netnstest.RequireRoot(t)
	netnstest.RequireTools(t, "ping")
	sw := startSwitchProcess(t)
	if got := sw.idleCPU(t); got > maxIdleCPU {
		t.Fatalf("the switch uses %.2f%% of a CPU before any attack, want at most %.0f%%", 100*got, 100*maxIdleCPU)
	}
	fds := sw.fds(t)
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			before := sw.vhost(t)
			pinging := sw.ping(100)
			time.Sleep(100 * time.Millisecond)
			att := startAttacker(t, a.name, sw.vsock)
			ready := time.Now()
			if p := <-pinging; p.lost > 1 {
				t.Errorf("the guests lost %d pings in 100 during the attack:\n%s", p.lost, p.out)
			}
			time.Sleep(time.Until(ready.Add(time.Second)))
			if got := sw.idleCPU(t); got > maxIdleCPU {
				t.Errorf("the switch uses %.2f%% of a CPU a second after the attack, want at most %.0f%%", 100*got, 100*maxIdleCPU)
			}
			att.later(t)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				missing := a.check(before, sw.vhost(t))
				if missing == "" {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("the switch did not count the attack: %s", missing)
					break
				}
			}
			att.release(t)
			waitFor(t, func() bool { return !sw.vhost(t).Connected }, "disconnection of the attacker")
			var now int
			waitFor(t, func() bool {
				now = sw.fds(t)
				return now == fds
			}, fmt.Sprintf("return to the %d descriptors the switch held before the attacks (it holds %d)", fds, now))
		})
	}
	sw.stop(t)
}

// maxIdleCPU is the share of a CPU an idle switch may use.
const maxIdleCPU = 0.01

// idleCPU returns the least share of a CPU the switch used over up to
// five one-second windows, stopping at the first within maxIdleCPU. A
// worker that spins or polls uses far more in every window; an idle one
// may lose a window to the load of tests running beside it (CI runs
// packages in parallel), which only inflates its count of run time.
func (sw *switchProcess) idleCPU(t *testing.T) float64 {
	least := 1.0
	for range 5 {
		least = min(least, sw.cpuOver(t, time.Second))
		if least <= maxIdleCPU {
			break
		}
	}
	return least
}

// switchProcess is a running `softnet switch` with two TAP guests and a
// vhost-user port, all on one worker.
type switchProcess struct {
	cmd     *exec.Cmd
	bin     string
	control string
	vsock   string
	guests  [2]*netnstest.NS
	out     *os.File // stdout and stderr
}

func startSwitchProcess(t *testing.T) *switchProcess {
	bin := netnstest.BuildSoftnet(t)
	dir := t.TempDir()
	sw := &switchProcess{bin: bin, control: filepath.Join(dir, "ctl.sock"), vsock: filepath.Join(dir, "vm.sock")}
	for i := range sw.guests {
		sw.guests[i] = netnstest.New(t)
	}
	out, err := os.Create(filepath.Join(dir, "switch.log"))
	if err != nil {
		t.Fatal(err)
	}
	sw.out = out
	sw.cmd = exec.Command(bin, "switch", "--workers", "1", "--control", sw.control,
		"--port", "tap:sn1,netns="+sw.guests[0].Name, "--port", "tap:sn2,netns="+sw.guests[1].Name,
		"--port", "vhost-user:vm,socket="+sw.vsock)
	sw.cmd.Stdout, sw.cmd.Stderr = out, out
	if err := sw.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sw.cmd.ProcessState == nil {
			_ = sw.cmd.Process.Kill()
			_ = sw.cmd.Wait()
		}
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("the switch's output:\n%s", b)
		}
		out.Close()
	})
	for i, g := range sw.guests {
		dev := fmt.Sprintf("sn%d", i+1)
		waitFor(t, func() bool {
			_, err := g.Exec("ip", "link", "show", dev)
			return err == nil
		}, "device "+dev)
		g.AddAddr(t, dev, netip.MustParsePrefix(fmt.Sprintf("198.18.28.%d/24", i+1)))
	}
	if p := <-sw.ping(3); p.lost > 0 {
		t.Fatalf("the guests lost %d pings of 3 before any attack:\n%s", p.lost, p.out)
	}
	return sw
}

// pings is what ping reports: the pings lost, and its output.
type pings struct {
	lost int
	out  string
}

// ping sends n pings from the first guest to the second, 50 a second,
// and reports them when they are done.
func (sw *switchProcess) ping(n int) <-chan pings {
	done := make(chan pings, 1)
	go func() {
		out, _ := sw.guests[0].ExecTimeout(time.Duration(n)*20*time.Millisecond+10*time.Second,
			"ping", "-q", "-c", strconv.Itoa(n), "-i", "0.02", "-W", "1", "198.18.28.2")
		p := pings{lost: n, out: out}
		if m := regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`).FindStringSubmatch(out); m != nil {
			got, _ := strconv.Atoi(m[2])
			p.lost = n - min(n, got)
		}
		done <- p
	}()
	return done
}

// vhost returns the vhost-user port's counters as `softnet ctl stats`
// shows them.
func (sw *switchProcess) vhost(t *testing.T) Stats {
	t.Helper()
	out, err := exec.Command(sw.bin, "ctl", "--socket", sw.control, "stats", "--json").Output()
	if err != nil {
		t.Fatalf("softnet ctl stats: %v\n%s", err, out)
	}
	var rep struct {
		Devices []struct {
			Port      string `json:"port"`
			VhostUser *Stats `json:"vhost_user"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("softnet ctl stats: %v\n%s", err, out)
	}
	for _, d := range rep.Devices {
		if d.Port == "vm" && d.VhostUser != nil {
			return *d.VhostUser
		}
	}
	t.Fatalf("softnet ctl stats shows no vhost-user port:\n%s", out)
	return Stats{}
}

// cpuOver returns the share of a CPU the switch's threads used over d,
// from their run times in /proc (schedstat, in nanoseconds).
func (sw *switchProcess) cpuOver(t *testing.T, d time.Duration) float64 {
	t.Helper()
	ran := func() (sum time.Duration) {
		dir := fmt.Sprintf("/proc/%d/task", sw.cmd.Process.Pid)
		tasks, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			b, err := os.ReadFile(filepath.Join(dir, task.Name(), "schedstat"))
			if err != nil {
				continue // the thread ended
			}
			ns, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
			if err != nil {
				t.Fatalf("%s/%s/schedstat: %q", dir, task.Name(), b)
			}
			sum += time.Duration(ns)
		}
		return sum
	}
	start, ran0 := time.Now(), ran()
	time.Sleep(d)
	return float64(ran()-ran0) / float64(time.Since(start))
}

// fds returns how many descriptors the switch holds.
func (sw *switchProcess) fds(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", sw.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// stop stops the switch with SIGTERM: it must exit cleanly within 30 s,
// every buffer back in its pool.
func (sw *switchProcess) stop(t *testing.T) {
	t.Helper()
	if err := sw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sw.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the switch exited: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the switch did not stop within 30s of SIGTERM")
	}
	if b, _ := os.ReadFile(sw.out.Name()); !strings.Contains(string(b), "leak check: ok") {
		t.Error("no balanced leak check in the switch's report")
	}
}

// attacker is a running attacker process.
type attacker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	out   strings.Builder
	done  chan struct{}
}

func (a *attacker) output() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.out.String()
}

// startAttacker runs attack name against the port's socket and waits
// until the attack is in place.
func startAttacker(t *testing.T, name, socket string) *attacker {
	t.Helper()
	a := &attacker{done: make(chan struct{})}
	a.cmd = exec.Command(os.Args[0], "-test.run=^TestAttackerProcess$", "-test.count=1", "-test.v", "-test.timeout=2m")
	a.cmd.Env = append(os.Environ(), attackEnv+"="+name, attackSocketEnv+"="+socket)
	stdout, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	a.cmd.Stderr = a.cmd.Stdout
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.stdin.Close()
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.done
		}
		_ = a.cmd.Wait()
		if t.Failed() {
			t.Logf("the attacker's output:\n%s", a.output())
		}
	})
	ready := make(chan struct{})
	go func() {
		defer close(a.done)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			a.mu.Lock()
			a.out.WriteString(s.Text() + "\n")
			a.mu.Unlock()
			if s.Text() == attackReady {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-a.done:
		t.Fatalf("the attacker ended before its attack was in place:\n%s", a.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("the attack was not in place within 60s:\n%s", a.output())
	}
	return a
}

// later has the attacker do the attack's second part, and waits for it.
func (a *attacker) later(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(a.stdin, "later\n"); err != nil {
		t.Fatalf("the attacker's input: %v", err)
	}
	waitFor(t, func() bool { return strings.Contains(a.output(), laterDone) }, "end of the attack's second part")
}

// release lets the attacker end, and checks that its own checks passed.
func (a *attacker) release(t *testing.T) {
	t.Helper()
	a.stdin.Close()
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the attacker did not end within 10s of its release")
	}
	if err := a.cmd.Wait(); err != nil {
		t.Errorf("the attacker failed: %v\n%s", err, a.output())
	}
}
