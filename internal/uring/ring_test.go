package uring

import (
	"errors"
	"math"
	"os"
	"runtime"
	"testing"
	"testing/quick"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/internal/netnstest"
)

// waitLimit bounds every wait for a completion the test expects.
const waitLimit = 5 * time.Second

func newRing(t *testing.T, opt Options) *Ring {
	t.Helper()
	if opt.SingleIssuer {
		runtime.LockOSThread()
		t.Cleanup(runtime.UnlockOSThread)
	}
	r, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// reap waits for one completion and returns a copy of it.
func reap(t *testing.T, r *Ring) CQE {
	t.Helper()
	if r.Ready() == 0 {
		if _, err := r.SubmitAndWait(1, waitLimit); err != nil {
			t.Fatal(err)
		}
	}
	if r.Ready() == 0 {
		t.Fatalf("no completion within %v", waitLimit)
	}
	c := *r.CQE(0)
	r.Seen(1)
	return c
}

func TestSetupModes(t *testing.T) {
	for _, single := range []bool{false, true} {
		r := newRing(t, Options{Entries: 4, SingleIssuer: single})
		if r.SQEntries() != 4 || r.CQEntries() != 8 {
			t.Errorf("single issuer %v: entries %d/%d, want 4/8", single, r.SQEntries(), r.CQEntries())
		}
		if !single && r.Mode() != "default" {
			t.Errorf("mode %s without a single issuer", r.Mode())
		}
		t.Logf("single issuer %v: mode %s", single, r.Mode())
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
	}
}

// TestNopWrap runs more NOPs than the queues hold, in uneven batches, so
// that the queue indexes wrap around the rings many times.
func TestNopWrap(t *testing.T) {
	for _, single := range []bool{false, true} {
		r := newRing(t, Options{Entries: 8, SingleIssuer: single})
		next, want := uint64(0), uint64(0)
		for round := range 200 {
			batch := 1 + round%int(r.SQEntries())
			for range batch {
				e := r.GetSQE()
				if e == nil {
					t.Fatalf("round %d: queue full after %d", round, next-want)
				}
				e.PrepNop(next)
				next++
			}
			if n, err := r.SubmitAndWait(uint32(batch), waitLimit); err != nil || n != batch {
				t.Fatalf("round %d: submitted %d of %d: %v", round, n, batch, err)
			}
			for range batch {
				c := reap(t, r)
				if c.UserData != want || c.Res != 0 {
					t.Fatalf("round %d: completion %+v, want user data %d res 0", round, c, want)
				}
				want++
			}
		}
	}
}

func TestSQFull(t *testing.T) {
	r := newRing(t, Options{Entries: 2})
	for i := range 2 {
		if r.GetSQE() == nil {
			t.Fatalf("entry %d refused", i)
		}
	}
	if r.GetSQE() != nil || r.SQSpace() != 0 {
		t.Fatal("a full queue handed out an entry")
	}
	if _, err := r.SubmitAndWait(2, waitLimit); err != nil {
		t.Fatal(err)
	}
	if r.SQSpace() != 2 || r.Ready() != 2 {
		t.Fatalf("space %d ready %d after submitting, want 2 and 2", r.SQSpace(), r.Ready())
	}
	r.Seen(2)
}

// TestUnprepare drops prepared entries: the kernel never sees them, and
// the queue goes on from there.
func TestUnprepare(t *testing.T) {
	r := newRing(t, Options{Entries: 4})
	r.GetSQE().PrepNop(1)
	r.GetSQE().PrepNop(2)
	r.Unprepare()
	if r.Prepared() != 0 || r.SQSpace() != 4 {
		t.Fatalf("%d prepared, space %d after Unprepare, want 0 and 4", r.Prepared(), r.SQSpace())
	}
	r.GetSQE().PrepNop(3)
	if c := reap(t, r); c.UserData != 3 {
		t.Fatalf("completion %+v, want only the NOP prepared after Unprepare", c)
	}
	if _, err := r.Submit(); err != nil || r.Ready() != 0 {
		t.Fatalf("Submit: %v, %d more completions", err, r.Ready())
	}
}

// TestIndexArithmetic checks the free-space and readiness arithmetic at
// every distance from a wrap of the 32-bit counters.
func TestIndexArithmetic(t *testing.T) {
	prop := func(head uint32, used uint16, shift uint8) bool {
		entries := uint32(1) << (shift % 16)
		u := uint32(used) % (entries + 1)
		tail := head + u
		return sqSpace(head, tail, entries) == entries-u && cqReady(head, tail) == u
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 100000}); err != nil {
		t.Fatal(err)
	}
	for _, head := range []uint32{math.MaxUint32, math.MaxUint32 - 1, 0} {
		if !prop(head, 3, 2) {
			t.Fatalf("wrap at head %d", head)
		}
	}
}

func TestProbe(t *testing.T) {
	p, err := Supported()
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []uint8{OpNop, OpWritev, OpRead, OpWrite, OpAsyncCancel} {
		if !p.Has(op) {
			t.Errorf("opcode %d not supported (last op %d)", op, p.LastOp)
		}
	}
	if p.Has(p.LastOp + 1) {
		t.Errorf("opcode %d past the last one supported", p.LastOp+1)
	}
	t.Logf("last op %d, read multishot %v", p.LastOp, p.Has(OpReadMultishot))
}

func requireMultishot(t *testing.T) {
	t.Helper()
	if p, err := Supported(); err != nil || !p.Has(OpReadMultishot) {
		t.Skipf("kernel lacks IORING_OP_READ_MULTISHOT (Linux 6.7): %v", err)
	}
}

func newPipe(t *testing.T) (r, w int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p[0], p[1]
}

func write(t *testing.T, fd int, p []byte) {
	t.Helper()
	if n, err := unix.Write(fd, p); err != nil || n != len(p) {
		t.Fatalf("write %d bytes: %d, %v", len(p), n, err)
	}
}

const (
	udRead   = 1
	udCancel = 2
)

// TestMultishotRecycle reads through a multishot request into a small
// buffer ring, recycling each buffer, for more reads than a 16-bit ring
// tail counts: the tail wraps, and every read lands in the buffer the
// completion names.
func TestMultishotRecycle(t *testing.T) {
	requireMultishot(t)
	rd, wr := newPipe(t)
	r := newRing(t, Options{Entries: 8, CQEntries: 64, SingleIssuer: true})
	if err := r.RegisterFiles([]int{rd}); err != nil {
		t.Fatal(err)
	}
	const entries = 4
	br, err := r.NewBufRing(7, entries)
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	var mem [entries][16]byte
	for i := range mem {
		br.Add(ptr(mem[i][:]), uint32(len(mem[i])), uint16(i))
	}
	br.Publish()
	r.GetSQE().PrepReadMultishot(0, true, br.Group(), udRead)
	arms := 1
	msg := []byte("0123")
	const reads = 70000
	for i := range reads {
		msg[0] = byte(i)
		write(t, wr, msg)
		c := reap(t, r)
		bid, ok := c.BufID()
		if c.UserData != udRead || c.Res != int32(len(msg)) || !ok || int(bid) >= entries {
			t.Fatalf("read %d: completion %+v", i, c)
		}
		if got := mem[bid][0]; got != byte(i) {
			t.Fatalf("read %d: buffer %d holds message %d", i, bid, got)
		}
		br.Add(ptr(mem[bid][:]), uint32(len(mem[bid])), bid)
		br.Publish()
		if c.Flags&CQEMore == 0 {
			// The kernel may end a multishot request at any time.
			r.GetSQE().PrepReadMultishot(0, true, br.Group(), udRead)
			arms++
		}
	}
	t.Logf("%d reads, %d arms", reads, arms)
	cancelRead(t, r)
}

// cancelRead cancels the armed read and checks both completions.
func cancelRead(t *testing.T, r *Ring) {
	t.Helper()
	r.GetSQE().PrepCancel(udRead, 0, udCancel)
	seen := map[uint64]int32{}
	for len(seen) < 2 {
		c := reap(t, r)
		seen[c.UserData] = c.Res
	}
	if seen[udRead] != -int32(unix.ECANCELED) || seen[udCancel] != 0 {
		t.Fatalf("cancel: read %d, cancel %d", seen[udRead], seen[udCancel])
	}
}

// TestBufRingEmpty: with the ring empty the multishot read ends with
// ENOBUFS, and once refilled and re-armed it reads the data that waited.
func TestBufRingEmpty(t *testing.T) {
	requireMultishot(t)
	rd, wr := newPipe(t)
	r := newRing(t, Options{Entries: 4, SingleIssuer: true})
	br, err := r.NewBufRing(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	var mem [64]byte
	br.Add(ptr(mem[:]), uint32(len(mem)), 0)
	br.Publish()
	r.GetSQE().PrepReadMultishot(rd, false, br.Group(), udRead)
	write(t, wr, []byte("a"))
	if c := reap(t, r); c.Res != 1 || c.Flags&CQEMore == 0 {
		t.Fatalf("first read %+v", c)
	}
	write(t, wr, []byte("bc"))
	if c := reap(t, r); c.Res != -int32(unix.ENOBUFS) || c.Flags&CQEMore != 0 {
		t.Fatalf("read with an empty ring: %+v, want -ENOBUFS and the end", c)
	}
	br.Add(ptr(mem[:]), uint32(len(mem)), 0)
	br.Publish()
	r.GetSQE().PrepReadMultishot(rd, false, br.Group(), udRead)
	if c := reap(t, r); c.Res != 2 || string(mem[:2]) != "bc" {
		t.Fatalf("read after refill: %+v %q", c, mem[:2])
	}
	cancelRead(t, r)
}

// TestEventfdWakes: a thread asleep in poll on the registered eventfd
// wakes when a read completes.
func TestEventfdWakes(t *testing.T) {
	requireMultishot(t)
	for _, single := range []bool{false, true} {
		rd, wr := newPipe(t)
		r := newRing(t, Options{Entries: 4, SingleIssuer: single})
		efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(efd)
		if err := r.RegisterEventfd(efd); err != nil {
			t.Fatal(err)
		}
		br := armRead(t, r, rd)
		var cnt [8]byte
		_, _ = unix.Read(efd, cnt[:])
		go func() { _, _ = unix.Write(wr, []byte("x")) }()
		pfd := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}}
		if n, err := unix.Poll(pfd, int(waitLimit/time.Millisecond)); err != nil || n != 1 {
			t.Fatalf("single issuer %v: eventfd not signalled: %d, %v", single, n, err)
		}
		if c := reap(t, r); c.Res != 1 {
			t.Fatalf("single issuer %v: read %+v", single, c)
		}
		cancelRead(t, r)
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// armRead arms a multishot read of fd into a buffer ring of two 64-byte
// buffers, group 1.
func armRead(t *testing.T, r *Ring, fd int) *BufRing {
	t.Helper()
	br, err := r.NewBufRing(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	mem := new([2][64]byte)
	br.Add(ptr(mem[0][:]), 64, 0)
	br.Add(ptr(mem[1][:]), 64, 1)
	br.Publish()
	t.Cleanup(func() { runtime.KeepAlive(mem) })
	r.GetSQE().PrepReadMultishot(fd, false, br.Group(), udRead)
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	return br
}

// On a single-issuer ring a read the kernel did waits as task work,
// which TaskWork reports without a system call until entering runs it;
// then the completion is ready and TaskWork is false again.
func TestTaskWorkFlag(t *testing.T) {
	requireMultishot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rd, wr := newPipe(t)
	r := newRing(t, Options{Entries: 4, SingleIssuer: true})
	if r.flags&setupTaskrunFlag == 0 {
		t.Skip("the kernel refused IORING_SETUP_TASKRUN_FLAG with DEFER_TASKRUN; TaskWork always reports true")
	}
	br := armRead(t, r, rd)
	if r.TaskWork() {
		t.Fatal("TaskWork before anything was read")
	}
	write(t, wr, []byte("x"))
	deadline := time.Now().Add(waitLimit)
	for !r.TaskWork() {
		if time.Now().After(deadline) {
			t.Fatal("TaskWork never reported the read")
		}
		time.Sleep(time.Millisecond)
	}
	if r.Ready() != 0 {
		t.Fatal("a completion posted before the ring was entered")
	}
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	if r.TaskWork() || r.Ready() != 1 {
		t.Fatalf("after entering: TaskWork %v, %d ready; want false, 1", r.TaskWork(), r.Ready())
	}
	if c := reap(t, r); c.Res != 1 {
		t.Fatalf("read %+v", c)
	}
	cancelRead(t, r)
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCancelAny cancels several requests at once, as a closing port does.
func TestCancelAny(t *testing.T) {
	var fds [3]int
	for i := range fds {
		fds[i], _ = newPipe(t)
	}
	r := newRing(t, Options{Entries: 8})
	var bufs [3][8]byte
	for i, fd := range fds {
		r.GetSQE().PrepRead(fd, bufs[i][:], uint64(10+i))
	}
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	r.GetSQE().PrepCancel(0, CancelAny|CancelAll, udCancel)
	cancelled := 0
	for range len(fds) + 1 {
		c := reap(t, r)
		switch {
		case c.UserData == udCancel && c.Res == int32(len(fds)):
		case c.UserData >= 10 && c.Res == -int32(unix.ECANCELED):
			cancelled++
		default:
			t.Fatalf("completion %+v", c)
		}
	}
	if cancelled != len(fds) {
		t.Fatalf("%d of %d cancelled", cancelled, len(fds))
	}
}

func TestNoAllocs(t *testing.T) {
	r := newRing(t, Options{Entries: 8, SingleIssuer: true})
	allocs := testing.AllocsPerRun(1000, func() {
		for range 4 {
			r.GetSQE().PrepNop(1)
		}
		if _, err := r.SubmitAndWait(4, waitLimit); err != nil {
			t.Fatal(err)
		}
		r.Seen(r.Ready())
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per round", allocs)
	}
}

// TestDisabled turns io_uring off through the sysctl, checks that New
// says so, and restores the setting.
func TestDisabled(t *testing.T) {
	netnstest.RequireRoot(t)
	old, err := os.ReadFile(disabledPath)
	if err != nil {
		t.Skipf("kernel has no %s (older than 6.6): %v", disabledPath, err)
	}
	if err := os.WriteFile(disabledPath, []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := os.WriteFile(disabledPath, old, 0); err != nil {
			t.Errorf("restore %s: %v", disabledPath, err)
		}
	}()
	_, err = New(Options{})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("New with io_uring disabled: %v, want ErrUnavailable", err)
	}
	t.Log(err)
}

// A registered file is the ring's until UnregisterFiles: with the only
// other reference to a pipe's write end closed, the read end sees no end
// of file while the ring holds it, and sees it once the ring lets go,
// with the ring still open.
func TestUnregisterFiles(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	rd, wr := p[0], p[1]
	defer unix.Close(rd)
	r := newRing(t, Options{Entries: 4})
	if err := r.RegisterFiles([]int{wr}); err != nil {
		unix.Close(wr)
		t.Fatal(err)
	}
	unix.Close(wr)
	var buf [8]byte
	if n, err := unix.Read(rd, buf[:]); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("read with the write end registered: %d, %v; want EAGAIN", n, err)
	}
	if err := r.UnregisterFiles(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitLimit)
	for {
		n, err := unix.Read(rd, buf[:])
		if n == 0 && err == nil {
			return // end of file: the ring let the write end go
		}
		if !errors.Is(err, unix.EAGAIN) || time.Now().After(deadline) {
			t.Fatalf("read once the ring let the write end go: %d, %v; want end of file within %v", n, err, waitLimit)
		}
		time.Sleep(time.Millisecond)
	}
}
