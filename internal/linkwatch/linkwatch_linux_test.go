package linkwatch

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"softnet.dev/internal/netnstest"
)

// events records what a watch heard.
type events struct {
	mu      sync.Mutex
	up      []bool
	mtu     int
	deleted bool
	lost    error
}

func (e *events) Up(up bool) { e.mu.Lock(); e.up = append(e.up, up); e.mu.Unlock() }
func (e *events) MTU(m int)  { e.mu.Lock(); e.mtu = m; e.mu.Unlock() }
func (e *events) Deleted()   { e.mu.Lock(); e.deleted = true; e.mu.Unlock() }
func (e *events) Lost(err error) {
	e.mu.Lock()
	e.lost = err
	e.mu.Unlock()
}

// wait waits for cond on what e heard.
func (e *events) wait(t *testing.T, what string, cond func(e *events) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		e.mu.Lock()
		ok := cond(e)
		e.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not heard", what)
		}
	}
}

// The watches of one namespace share one subscription, each hears only
// its own link, and the subscription goes with the last of them; a
// watch in another namespace has its own.
func TestOneSubscriptionPerNamespace(t *testing.T) {
	netnstest.RequireTools(t, "ip")
	base := Subscriptions()
	a, b := netnstest.New(t), netnstest.New(t)
	const links = 3
	var ws []*Watch
	var evs []*events
	for i := range links {
		dev := fmt.Sprintf("lw%d", i)
		if out, err := a.Exec("ip", "link", "add", dev, "type", "veth", "peer", "name", "p"+dev); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var w *Watch
		var index int
		if err := a.Do(func() error {
			var err error
			if w, err = New(); err != nil {
				return err
			}
			index, err = ifindex(dev)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		e := &events{}
		w.Start(index, e)
		ws, evs = append(ws, w), append(evs, e)
	}
	if n := Subscriptions() - base; n != 1 {
		t.Errorf("%d subscriptions for %d watches in one namespace, want 1", n, links)
	}
	if ws[0].s != ws[links-1].s {
		t.Error("two watches of one namespace on different subscriptions")
	}
	for i, e := range evs {
		e.wait(t, fmt.Sprintf("lw%d's state", i), func(e *events) bool { return len(e.up) > 0 && !e.up[0] && e.mtu == 1500 })
	}
	if out, err := a.Exec("ip", "link", "set", "lw1", "up", "mtu", "9000"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	evs[1].wait(t, "lw1 up, MTU 9000", func(e *events) bool { return e.up[len(e.up)-1] && e.mtu == 9000 })
	if out, err := a.Exec("ip", "link", "del", "lw2"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	evs[2].wait(t, "lw2 deleted", func(e *events) bool { return e.deleted })
	for _, i := range []int{0, 1} {
		evs[i].mu.Lock()
		if evs[i].deleted || evs[i].lost != nil || (i == 0 && evs[i].up[len(evs[i].up)-1]) || (i == 0 && evs[i].mtu != 1500) {
			t.Errorf("lw%d heard another link's events: %+v", i, evs[i])
		}
		evs[i].mu.Unlock()
	}

	// Another namespace: another subscription.
	if out, err := b.Exec("ip", "link", "add", "lw0", "type", "veth", "peer", "name", "plw0"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var wb *Watch
	if err := b.Do(func() error {
		var err error
		wb, err = New()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n := Subscriptions() - base; n != 2 {
		t.Errorf("%d subscriptions for two namespaces, want 2", n)
	}
	wb.Stop()
	for _, w := range ws {
		w.Stop()
		w.Stop() // again: nothing
	}
	if n := Subscriptions() - base; n != 0 {
		t.Errorf("%d subscriptions left after every watch stopped", n)
	}
}

// ifindex is dev's index in the calling thread's namespace.
func ifindex(dev string) (int, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}
