//go:build linux

package vhostuser

import (
	"encoding/binary"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
)

// Front-ends that attack the port with their memory and descriptors,
// played in this process against the package. The same attacks from a
// process of their own, against a running switch, are in
// attack_test.go.

// wantRefused checks that p counted n refusals of reason r.
func wantRefused(t testing.TB, p *Port, r Refusal, n uint64) {
	t.Helper()
	if s := p.Stats(); s.Refusals[r] != n {
		t.Errorf("%d %s refusals, want %d; refusals %v", s.Refusals[r], r, n, &s.Refusals)
	}
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// returns runs f, which must return within 5 s. If it does not, release
// unblocks it (so that the test can end) and the test fails.
func returns(t *testing.T, what string, f, release func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
		return
	case <-time.After(5 * time.Second):
	}
	release()
	select {
	case <-done:
		t.Fatalf("%s blocked until the test unblocked it", what)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s blocked, for good", what)
	}
}

// eventfd returns a new eventfd holding count, blocking unless flags say
// otherwise, closed when the test ends.
func eventfd(t testing.TB, count uint64, flags int) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|flags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if count > 0 {
		if _, err := unix.Write(fd, binary.NativeEndian.AppendUint64(nil, count)); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

// saturated is the largest count an eventfd holds: a write of one more
// blocks, or fails with EAGAIN.
const saturated = 0xfffffffffffffffe

// readableWithin reports whether fd becomes readable within d.
func readableWithin(fd int, d time.Duration) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, _ := unix.Poll(pfd, int(d.Milliseconds()))
	return n == 1
}

// shrink truncates the guest's memory file to nothing under every
// mapping of it; the front-end must not touch its own after that.
func shrink(t testing.TB, f *testFrontend) {
	t.Helper()
	if err := unix.Ftruncate(f.memFD, 0); err != nil {
		t.Fatal(err)
	}
}

// A front-end that shrinks its memory file while the worker goes to
// sleep or wakes: Arm and Disarm, which ask the guest for kicks in guest
// memory, survive the fault, and the ring is given up.
func TestGuestMemoryShrinksUnderArm(t *testing.T) {
	for _, disarm := range []bool{false, true} {
		name := map[bool]string{false: "arm", true: "disarm"}[disarm]
		t.Run(name, func(t *testing.T) {
			p, _, _ := testPort(t, Config{})
			f := newTestFrontend(t, p.Socket())
			f.setup(featVersion1 | featMrgRxbuf)
			waitRunning(t, p, 1)
			q := p.RxQueue(0)
			if disarm && q.Arm() {
				t.Fatal("Arm reports packets on an empty ring")
			}
			shrink(t, f)
			if !disarm && q.Arm() {
				t.Error("Arm on guest memory that faults reports packets")
			}
			q.Disarm()
			wantRefused(t, p, RefusedRingFault, 1)
			if q.Arm() || readableWithin(q.FD(), 100*time.Millisecond) {
				t.Error("a ring given up keeps its worker awake")
			}
		})
	}
}

// A front-end that shrinks its memory file and then has the rings
// restarted (SET_FEATURES does): starting a ring reads its used index,
// on the control goroutine. The fault ends the session, counted, and the
// port serves the next front-end.
func TestGuestMemoryShrinksUnderControlPlane(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 1)
	shrink(t, f)
	if err := f.send(reqSetFeatures, flagNeedReply, u64Payload(featVersion1|featMrgRxbuf|featProtocol)); err != nil {
		t.Fatal(err)
	}
	if r, err := f.reply(reqSetFeatures); err == nil {
		t.Fatalf("the session went on after guest memory faulted (reply %x)", r)
	}
	waitDisconnected(t, p)
	wantRefused(t, p, RefusedMemoryFault, 1)
	g := newTestFrontend(t, p.Socket())
	g.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 1)
	g.transmit(0, testFrame(64, 1))
	got := receiveAll(t, p, c, 1)
	if len(got) != 1 {
		t.Fatal("the next front-end's packet was not received")
	}
	c.ConsumeBulk(got)
}

// A kick eventfd that blocks (eventfd(0, 0)): the worker never reads it,
// so going to sleep cannot block on it, and a kick still wakes it.
func TestBlockingKick(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.kick[1] = eventfd(t, 0, 0)
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 1)
	q := p.RxQueue(0)
	for range 2 {
		returns(t, "Arm with a blocking kick eventfd", func() {
			if q.Arm() {
				t.Error("Arm reports packets on an empty ring")
			}
		}, func() { signalFD(f.kick[1]) })
		f.transmit(0, testFrame(64, 1))
		signalFD(f.kick[1])
		if !readable(q.FD()) {
			t.Fatal("a kick did not make the queue's descriptor readable")
		}
		q.Disarm()
		got := receiveAll(t, p, c, 1)
		if len(got) != 1 {
			t.Fatal("the kicked packet was not received")
		}
		c.ConsumeBulk(got)
	}
}

// A call eventfd whose counter the front-end saturates, left
// non-blocking or made blocking again after SET_VRING_CALL (O_NONBLOCK
// belongs to the file the front-end shares): no call blocks the
// worker, toward the guest or from it. The first call on each ring
// waits in the kernel, the calls meanwhile are not made and count as
// failed, and once the guest reads its eventfd the waiting call lands
// and calls go through again.
func TestSaturatedCall(t *testing.T) {
	for _, blocking := range []bool{false, true} {
		name := map[bool]string{false: "non-blocking", true: "made-blocking"}[blocking]
		t.Run(name, func(t *testing.T) {
			p, _, c := testPort(t, Config{})
			f := newTestFrontend(t, p.Socket())
			for r := range 2 {
				f.call[r] = eventfd(t, 0, 0)
			}
			f.setup(featVersion1 | featMrgRxbuf)
			waitRunning(t, p, 0)
			waitRunning(t, p, 1)
			for r := range 2 {
				if fl, err := unix.FcntlInt(uintptr(f.call[r]), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK == 0 {
					t.Errorf("ring %d: the call eventfd's flags %#x (%v): not made non-blocking", r, fl, err)
				}
				if blocking {
					if err := unix.SetNonblock(f.call[r], false); err != nil {
						t.Fatal(err)
					}
				}
				saturate(t, f.call[r])
			}
			f.postRx(0, 8, bufSize)
			bufs := make([]*buffer.Buf, 8)
			burst := func(round int) {
				t.Helper()
				f.transmit(round, testFrame(64, byte(round)))
				got := 0
				returns(t, "Receive with a saturated call eventfd", func() {
					for deadline := time.Now().Add(3 * time.Second); got == 0 && time.Now().Before(deadline); {
						n, _ := p.RxQueue(0).Receive(c, bufs)
						c.ConsumeBulk(bufs[:n])
						got += n
					}
				}, func() { takeCalls(f.call[1]) })
				if got != 1 {
					t.Fatalf("round %d: received %d packets, want 1", round, got)
				}
				sent := 0
				returns(t, "Transmit with a saturated call eventfd", func() {
					sent, _ = p.TxQueue(0).Transmit(c, []*buffer.Buf{bufWith(t, c, testFrame(64, byte(round)))})
				}, func() { takeCalls(f.call[0]) })
				if sent != 1 {
					t.Fatalf("round %d: sent %d packets, want 1", round, sent)
				}
			}
			burst(0)
			burst(1)
			if s := p.Stats(); s.Calls != 0 || s.CallsFailed != 2 {
				t.Errorf("%d calls, %d failed with both counters saturated; want 0 and 2: one call per ring waits, the next is not made", s.Calls, s.CallsFailed)
			}
			for r := range 2 {
				if takeCalls(f.call[r]) != saturated {
					t.Fatalf("ring %d: the guest's counter moved while saturated", r)
				}
				if n := takeCalls(f.call[r]); n != 1 {
					t.Errorf("ring %d: the call that waited landed %d times, want once", r, n)
				}
			}
			burst(2)
			if s := p.Stats(); s.Calls < 2 || s.CallsFailed != 2 {
				t.Errorf("%d calls, %d failed once the guest read its eventfds; want the 2 that waited, and 2", s.Calls, s.CallsFailed)
			}
			for r := range 2 {
				if n := takeCalls(f.call[r]); n != 1 {
					t.Errorf("ring %d: %d calls after the guest read its eventfd, want 1", r, n)
				}
			}
		})
	}
}

// saturate fills the eventfd fd's counter, which is empty.
func saturate(t testing.TB, fd int) {
	t.Helper()
	if _, err := unix.Write(fd, binary.NativeEndian.AppendUint64(nil, saturated)); err != nil {
		t.Fatal(err)
	}
}

// takeCalls reads the eventfd fd's counter, as the guest does, once fd
// is readable, within 5 s: its count, 0 if it never was. It does not
// block on an eventfd that blocks.
func takeCalls(fd int) uint64 {
	if !readableWithin(fd, 5*time.Second) {
		return 0
	}
	var b [8]byte
	if n, _ := unix.Read(fd, b[:]); n != 8 {
		return 0
	}
	return binary.NativeEndian.Uint64(b[:])
}

// fdKind is a kind of descriptor: open returns a new one, which the
// caller closes.
type fdKind struct {
	name string
	open func() int
}

// refused sends a request that the port must refuse: with REPLY_ACK
// negotiated, the acknowledgement says so.
func (f *testFrontend) refused(what string, req uint32, payload []byte, fds ...int) {
	f.t.Helper()
	if err := f.send(req, flagNeedReply, payload, fds...); err != nil {
		f.t.Fatalf("%s: %v", what, err)
	}
	if r, err := f.reply(req); err != nil || len(r) != 8 || binary.LittleEndian.Uint64(r) == 0 {
		f.t.Errorf("%s: %s accepted (%x, %v)", what, requestName(req), r, err)
	}
}

// notEventfds are descriptors a front-end may send where an eventfd
// belongs.
func notEventfds(t testing.TB) []fdKind {
	return []fdKind{
		{"pipe", func() int {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			unix.Close(p[1])
			return p[0]
		}},
		{"regular file", func() int {
			fd, err := unix.Open(filepath.Join(t.TempDir(), "f"), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			return fd
		}},
		{"socket", func() int {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(fds[1])
			return fds[0]
		}},
		{"/dev/zero", func() int {
			fd, err := unix.Open("/dev/zero", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			return fd
		}},
		{"timerfd", func() int {
			fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			return fd
		}},
	}
}

// Kick and call descriptors that are not eventfds are refused, counted,
// and change nothing: the rings run on with the eventfds they had.
func TestDescriptorsNotEventfd(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 1)
	kinds := notEventfds(t)
	for _, k := range kinds {
		for _, req := range []uint32{reqSetVringKick, reqSetVringCall} {
			fd := k.open()
			f.refused(k.name, req, u64Payload(1), fd)
			unix.Close(fd)
		}
	}
	wantRefused(t, p, RefusedNotEventfd, uint64(2*len(kinds)))
	q := p.RxQueue(0)
	if q.Arm() {
		t.Fatal("Arm reports packets on an empty ring")
	}
	f.transmit(0, testFrame(64, 1))
	signalFD(f.kick[1])
	if !readable(q.FD()) {
		t.Fatal("the ring's own kick no longer wakes the queue")
	}
	q.Disarm()
	got := receiveAll(t, p, c, 1)
	if len(got) != 1 {
		t.Fatal("no packet after the refused descriptors")
	}
	c.ConsumeBulk(got)
	if s := p.Stats(); s.Calls != 1 {
		t.Errorf("%d calls through the ring's own call eventfd, want 1", s.Calls)
	}
}

// setRingAddr sets ring r's addresses, its descriptor table at desc.
func (f *testFrontend) setRingAddr(r int, desc uint64) {
	f.t.Helper()
	a := binary.LittleEndian.AppendUint32(nil, uint32(r))
	a = binary.LittleEndian.AppendUint32(a, 0)
	a = binary.LittleEndian.AppendUint64(a, desc)
	a = binary.LittleEndian.AppendUint64(a, userBase+uint64(f.usedOff(r)))
	a = binary.LittleEndian.AppendUint64(a, userBase+uint64(f.availOff(r)))
	a = binary.LittleEndian.AppendUint64(a, 0)
	f.must(reqSetVringAddr, a)
}

// A ring that does not run (given up for an available index more than a
// ring ahead, disabled, or refused a start for its addresses) and is
// kicked anyway must not keep its worker awake; when the ring runs
// again, the worker looks at it.
func TestKickedRingThatDoesNotRun(t *testing.T) {
	restart := func(f *testFrontend) {
		f.get(reqGetVringBase, statePayload(vringState{1, 0}))
		f.setAvailIdx(1, f.availIdx[1])
		f.startRing(1, f.lastUsed[1])
	}
	for _, tc := range []struct {
		name      string
		stop      func(*testing.T, *Port, *buffer.Cache, *testFrontend)
		reason    Refusal
		start     func(*testFrontend)
		pending   bool // a packet offered before the stop waits when the ring runs again
		wantCount uint64
	}{
		{"ahead", func(t *testing.T, p *Port, c *buffer.Cache, f *testFrontend) {
			f.setAvailIdx(1, f.availIdx[1]+testNum+1)
			if n, _ := p.RxQueue(0).Receive(c, make([]*buffer.Buf, 8)); n != 0 {
				t.Fatal("received from a ring more than full")
			}
		}, RefusedRingAhead, restart, false, 1},
		{"disabled", func(t *testing.T, p *Port, c *buffer.Cache, f *testFrontend) {
			f.must(reqSetVringEnable, statePayload(vringState{1, 0}))
			f.transmit(0, testFrame(64, 1))
		}, NumRefusals, func(f *testFrontend) {
			f.must(reqSetVringEnable, statePayload(vringState{1, 1}))
		}, true, 0},
		{"not started", func(t *testing.T, p *Port, c *buffer.Cache, f *testFrontend) {
			f.get(reqGetVringBase, statePayload(vringState{1, 0}))
			f.setRingAddr(1, userBase+memSize) // the descriptor table past the guest's memory
			f.must(reqSetVringKick, u64Payload(1), f.kick[1])
		}, RefusedRingAddress, func(f *testFrontend) {
			f.setRingAddr(1, userBase+uint64(f.descOff(1)))
		}, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, c := testPort(t, Config{})
			f := newTestFrontend(t, p.Socket())
			f.setup(featVersion1 | featMrgRxbuf)
			waitRunning(t, p, 1)
			q := p.RxQueue(0)
			tc.stop(t, p, c, f)
			if tc.reason < NumRefusals {
				wantRefused(t, p, tc.reason, tc.wantCount)
			}
			signalFD(f.kick[1])
			for range 3 {
				if q.Arm() {
					t.Fatal("Arm reports packets on a ring that does not run")
				}
				if readableWithin(q.FD(), 100*time.Millisecond) {
					t.Fatal("the queue's descriptor stays readable: its worker would never sleep")
				}
				q.Disarm()
			}
			if q.Arm() {
				t.Fatal("Arm reports packets on a ring that does not run")
			}
			tc.start(f)
			waitRunning(t, p, 1)
			if !readable(q.FD()) {
				t.Fatal("a ring that runs again does not wake its worker")
			}
			if !tc.pending {
				f.transmit(1, testFrame(64, 2))
			}
			if !q.Arm() {
				t.Error("Arm does not see the packet waiting on the ring that runs again")
			}
			q.Disarm()
			got := receiveAll(t, p, c, 1)
			if len(got) != 1 {
				t.Fatal("no packet from the ring that runs again")
			}
			c.ConsumeBulk(got)
		})
	}
}

// A ring whose front-end gave no kick descriptor (VHOST_USER_VRING_NOFD)
// is polled: while its worker sleeps, the queue's descriptor becomes
// readable by itself, and the polls are counted.
func TestNoKickRingIsPolled(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 1)
	f.must(reqSetVringKick, u64Payload(1|vringNoFD))
	waitRunning(t, p, 1)
	q := p.RxQueue(0)
	if readable(q.FD()) { // the change woke the queue
		_ = q.Arm()
		q.Disarm()
	}
	for i := range 3 {
		if q.Arm() {
			t.Fatal("Arm reports packets on an empty ring")
		}
		f.transmit(i, testFrame(64, byte(i))) // and no kick: there is none
		if !readable(q.FD()) {
			t.Fatal("a ring without a kick descriptor is never looked at while its worker sleeps")
		}
		q.Disarm()
		got := receiveAll(t, p, c, 1)
		if len(got) != 1 {
			t.Fatal("the packet was not received")
		}
		c.ConsumeBulk(got)
	}
	_ = q.Arm() // takes the last poll's edge
	q.Disarm()
	if n := p.Stats().Polls; n < 3 {
		t.Errorf("%d polls counted, want at least 3", n)
	}
	if allocs := testing.AllocsPerRun(100, func() { q.Arm(); q.Disarm() }); allocs != 0 {
		t.Errorf("%v allocations per sleep on a polled ring", allocs)
	}
}

// memTablePayload is SET_MEM_TABLE's payload for regions rs.
func memTablePayload(rs ...memRegion) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(rs)))
	b = binary.LittleEndian.AppendUint32(b, 0)
	for _, r := range rs {
		for _, v := range []uint64{r.GuestAddr, r.Size, r.UserAddr, r.MmapOffset} {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
	}
	return b
}

// Memory tables that cannot be mapped safely are refused, counted, and
// change nothing: regions that overlap, and files that are not memory (a
// file on disk, a device, a pipe).
func TestMemTableRefused(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 1)
	const half = memSize / 2
	region := func(guest, size, user, off uint64) memRegion { return memRegion{guest, size, user, off} }
	whole := region(guestBase, memSize, userBase, 0)
	openFile := func(path string, size int64) int {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if size > 0 {
			if err := unix.Ftruncate(fd, size); err != nil {
				t.Fatal(err)
			}
		}
		return fd
	}
	type tcase struct {
		name    string
		regions []memRegion
		fds     func() []int
	}
	dup := func() int {
		fd, err := unix.Dup(f.memFD)
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	cases := []tcase{
		{"overlap in guest memory", []memRegion{region(guestBase, half, userBase, 0), region(guestBase+half/2, half, userBase+half, half)}, func() []int { return []int{dup(), dup()} }},
		{"overlap in the front-end's addresses", []memRegion{region(guestBase, half, userBase, 0), region(guestBase+half, half, userBase+half/2, half)}, func() []int { return []int{dup(), dup()} }},
		{"same region twice", []memRegion{whole, whole}, func() []int { return []int{dup(), dup()} }},
		{"device", []memRegion{whole}, func() []int { return []int{openFile("/dev/zero", 0)} }},
		{"more address space than a port may map", []memRegion{region(guestBase, maxTableMapping+memSize, userBase, 0)}, func() []int {
			fd, err := unix.MemfdCreate("sparse", unix.MFD_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Ftruncate(fd, maxTableMapping+memSize); err != nil {
				t.Fatal(err)
			}
			return []int{fd}
		}},
		{"pipe", []memRegion{whole}, func() []int {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			unix.Close(p[1])
			return p[:1]
		}},
	}
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type != unix.TMPFS_MAGIC {
		cases = append(cases, tcase{"file on disk", []memRegion{whole}, func() []int { return []int{openFile(filepath.Join(dir, "mem"), memSize)} }})
	} else {
		t.Logf("%s is on tmpfs: no file on disk to try", dir)
	}
	for _, tc := range cases {
		fds := tc.fds()
		f.refused(tc.name, reqSetMemTable, memTablePayload(tc.regions...), fds...)
		closeFDs(fds)
	}
	wantRefused(t, p, RefusedMemTable, uint64(len(cases)))
	f.transmit(0, testFrame(64, 3))
	got := receiveAll(t, p, c, 1)
	if len(got) != 1 {
		t.Fatal("no packet after the refused memory tables")
	}
	c.ConsumeBulk(got)
}

// What the control plane refuses is counted by reason: a message that
// does not parse and one cut short by a hang-up each end their session;
// a request that names what the port does not have, or that it does not
// know, is answered as refused. The counts survive a JSON round trip, as
// softnet ctl reads them.
func TestRefusalReasons(t *testing.T) {
	p, _, _ := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	if err := f.send(reqSetVringNum, flagNeedReply, statePayload(vringState{9, 256})); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reply(reqSetVringNum); err != nil {
		t.Fatal(err)
	}
	if err := f.send(99, flagNeedReply, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reply(99); err != nil {
		t.Fatal(err)
	}
	// A header of version 2.
	if _, err := f.conn.Write(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, reqGetFeatures), 2), 0)); err != nil {
		t.Fatal(err)
	}
	waitDisconnected(t, p)
	// Half a header, then the hang-up.
	g := newTestFrontend(t, p.Socket())
	waitFor(t, p.Connected, "connection")
	if _, err := g.conn.Write([]byte{reqGetFeatures, 0, 0, 0, version}); err != nil {
		t.Fatal(err)
	}
	g.conn.Close()
	waitFor(t, func() bool { return p.Stats().Refusals[RefusedTruncated] > 0 }, "truncated message counted")
	waitDisconnected(t, p)
	want := Refusals{RefusedRequest: 1, RefusedUnsupported: 1, RefusedMalformed: 1, RefusedTruncated: 1}
	s := p.Stats()
	if s.Refusals != want || s.Refused != 4 {
		t.Errorf("refusals %v (%d in all), want %v", s.Refusals, s.Refused, want)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Stats
	if err := json.Unmarshal(b, &back); err != nil || back.Refusals != want {
		t.Errorf("refusals after a JSON round trip: %v (%v) from %s", back.Refusals, err, b)
	}
}
