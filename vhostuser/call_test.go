//go:build linux

package vhostuser

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"softnet.dev/buffer"
	"softnet.dev/internal/uring"
)

// waitingCall leaves a call of ring 1 waiting in the kernel: the
// guest's eventfd is saturated, and a packet from the guest is
// received.
func waitingCall(t *testing.T, p *Port, c *buffer.Cache, f *testFrontend) {
	t.Helper()
	saturate(t, f.call[1])
	f.transmit(0, testFrame(64, 1))
	got := receiveAll(t, p, c, 1)
	if len(got) != 1 {
		t.Fatal("the packet was not received")
	}
	c.ConsumeBulk(got)
	if s := p.Stats(); s.Calls != 0 || s.CallsFailed != 0 {
		t.Fatalf("%d calls, %d failed into a saturated counter; want the call waiting", s.Calls, s.CallsFailed)
	}
}

// landsAfterRead reports whether a call lands on the eventfd fd, which
// is saturated, once the guest reads it.
func landsAfterRead(t *testing.T, fd int) bool {
	t.Helper()
	if n := takeCalls(fd); n != saturated {
		t.Fatalf("the guest's counter is %#x, want it saturated", n)
	}
	return readableWithin(fd, 200*time.Millisecond)
}

// A call that waits when the front-end replaces its call eventfd, or
// goes away, is cancelled: it never lands on the old eventfd, and the
// next call goes to the new one.
func TestWaitingCallCancelled(t *testing.T) {
	for _, how := range []string{"replaced", "disconnected"} {
		t.Run(how, func(t *testing.T) {
			p, _, c := testPort(t, Config{})
			f := newTestFrontend(t, p.Socket())
			f.setup(featVersion1 | featMrgRxbuf)
			waitRunning(t, p, 1)
			waitingCall(t, p, c, f)
			old := f.call[1]
			if how == "disconnected" {
				f.conn.Close()
				waitDisconnected(t, p)
				if landsAfterRead(t, old) {
					t.Fatal("the call waiting when the front-end went away landed")
				}
				f = newTestFrontend(t, p.Socket())
				f.setup(featVersion1 | featMrgRxbuf)
				waitRunning(t, p, 1)
			} else {
				f.call[1] = eventfd(t, 0, unix.EFD_NONBLOCK)
				f.must(reqSetVringCall, u64Payload(1), f.call[1])
				if landsAfterRead(t, old) {
					t.Fatal("the call waiting on the replaced eventfd landed")
				}
			}
			f.transmit(1, testFrame(64, 2))
			got := receiveAll(t, p, c, 1)
			if len(got) != 1 {
				t.Fatal("the next packet was not received")
			}
			c.ConsumeBulk(got)
			if n := takeCalls(f.call[1]); n != 1 {
				t.Errorf("%d calls on the new eventfd, want 1", n)
			}
			if s := p.Stats(); s.Calls != 1 || s.CallsFailed != 1 {
				t.Errorf("%d calls, %d failed; want 1, and the one cancelled", s.Calls, s.CallsFailed)
			}
		})
	}
}

// Closing the port while a call waits (the front-end still connected)
// does not hang, and cancels the call: it never lands.
func TestWaitingCallAtClose(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 1)
	waitingCall(t, p, c, f)
	returns(t, "CloseInto with a call waiting", func() {
		if err := p.CloseInto(c); err != nil {
			t.Error(err)
		}
	}, func() { takeCalls(f.call[1]) })
	if landsAfterRead(t, f.call[1]) {
		t.Error("the call waiting when the port closed landed")
	}
}

// Calls allocate nothing: those that go through, and those not made
// while one waits.
func TestCallsAllocateNothing(t *testing.T) {
	p, _, c := testPort(t, Config{})
	f := newTestFrontend(t, p.Socket())
	f.setup(featVersion1 | featMrgRxbuf)
	waitRunning(t, p, 1)
	bufs := make([]*buffer.Buf, 8)
	rx := p.RxQueue(0)
	slot := 0
	burst := func() {
		f.transmit(slot, testFrame(64, byte(slot)))
		slot = (slot + 1) % testNum
		n, _ := rx.Receive(c, bufs)
		if n != 1 {
			t.Fatalf("received %d", n)
		}
		c.ConsumeBulk(bufs[:n])
	}
	burst() // warm the cache
	s := p.Stats()
	if allocs := testing.AllocsPerRun(100, burst); allocs != 0 {
		t.Errorf("%v allocations per burst and call", allocs)
	}
	if calls := p.Stats().Calls - s.Calls; calls < 100 {
		t.Errorf("%d calls in 101 bursts", calls)
	}
	takeCalls(f.call[1])
	saturate(t, f.call[1])
	burst() // its call waits
	s = p.Stats()
	if allocs := testing.AllocsPerRun(100, burst); allocs != 0 {
		t.Errorf("%v allocations per burst while a call waits", allocs)
	}
	if failed := p.Stats().CallsFailed - s.CallsFailed; failed < 100 {
		t.Errorf("%d calls not made in 101 bursts while one waited", failed)
	}
}

// syncBuffer is a bytes.Buffer for a logger that more than one
// goroutine may use.
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

// Where io_uring is refused (the kernel has none, or a seccomp filter
// refuses io_uring_setup), calls are plain writes, and that is logged
// once for all ports.
func TestCallsWithoutIOUring(t *testing.T) {
	defer func(f func() (*uring.Ring, error)) { newCallRing = f }(newCallRing)
	newCallRing = func() (*uring.Ring, error) {
		return nil, fmt.Errorf("%w: io_uring_setup refused (test)", uring.ErrUnavailable)
	}
	plainCallsLogged = new(sync.Once)
	var log syncBuffer
	for i := range 2 {
		p, _, c := testPort(t, Config{Name: fmt.Sprintf("vu%d", i), Log: slog.New(slog.NewTextHandler(&log, nil))})
		for _, v := range p.rings {
			if v.calls.ring != nil {
				t.Fatalf("ring %d has an io_uring", v.index)
			}
		}
		f := newTestFrontend(t, p.Socket())
		f.setup(featVersion1 | featMrgRxbuf)
		waitRunning(t, p, 1)
		f.transmit(0, testFrame(64, 1))
		c.ConsumeBulk(receiveAll(t, p, c, 1))
		if n := takeCalls(f.call[1]); n != 1 {
			t.Errorf("port %d: %d calls through plain writes, want 1", i, n)
		}
		saturate(t, f.call[1])
		f.transmit(1, testFrame(64, 2))
		c.ConsumeBulk(receiveAll(t, p, c, 1))
		if s := p.Stats(); s.Calls != 1 || s.CallsFailed != 1 {
			t.Errorf("port %d: %d calls, %d failed; want 1, and 1 into the saturated counter", i, s.Calls, s.CallsFailed)
		}
	}
	if n := strings.Count(log.String(), "calls are plain writes"); n != 1 {
		t.Errorf("the fallback logged %d times for two ports, want once:\n%s", n, log.String())
	}
}
