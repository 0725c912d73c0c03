package program

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"softnet.dev/packet"
)

// Two workers run the same forwarder and bridge on their own batches
// while both learn, a host flaps between their ports, and a control
// goroutine reads the tables and changes routes. Run with -race.
func TestConcurrentLearning(t *testing.T) {
	e := newPktEnv(t)
	sec := newPortSecurity(t, map[int]PortPolicy{1: {Allow: Allow{Any: true}}, 2: {Allow: Allow{Any: true}}})
	fwd := newForwarder(t, L3Config{Policy: sec, MoveHold: 1})
	br := NewBridge(BridgeConfig{AgeingTime: time.Second, MoveHold: 1})
	const hosts, rounds = 40, 200

	type worker struct{ l3, l2 *Batch }
	var workers [2]worker
	for w := range workers {
		var l3, l2 []func([]byte) int
		for i := range hosts {
			src, dst := fmt.Sprintf("10.%d.0.%d", w, i+1), fmt.Sprintf("10.%d.0.%d", 1-w, i+1)
			l3 = append(l3, udp(src, dst))
			l2 = append(l2, frame(mac(byte(w*hosts+i+1)), mac(byte((1-w)*hosts+i+1))))
		}
		l3 = append(l3, udp("10.9.9.9", "10.0.0.1"))       // flaps between the ports
		l2 = append(l2, frame(packet.Broadcast, mac(200))) // flaps too
		workers[w] = worker{e.batch(packet.L3, w+1, 0, l3...), e.batch(packet.L2, w+1, 0, l2...)}
	}

	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			_ = fwd.Learned()
			_ = br.Table()
			_ = fwd.AddRoute(Route{netip.MustParsePrefix("192.0.2.0/24"), 3})
			_ = fwd.RemoveRoute(netip.MustParsePrefix("192.0.2.0/24"))
			br.Age(0)
			fwd.Age(0)
			_ = sec.SetPolicy(3, PortPolicy{Allow: Allow{Any: true}})
			sec.RemovePolicy(3)
			_ = fwd.LearnStats()
			_ = br.Stats()
		}
	})
	var workersDone sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		workersDone.Go(func() {
			<-start
			l3, l2 := workers[w].l3, workers[w].l2
			for r := range rounds {
				l3.Reset(l3.Len())
				l3.Now = int64(r) * int64(time.Millisecond)
				sec.Run(l3)
				fwd.Run(l3)
				l2.Reset(l2.Len())
				l2.Now = int64(r) * int64(time.Millisecond)
				br.Run(l2)
			}
		})
	}
	close(start)
	workersDone.Wait()
	close(done)
	wg.Wait()

	// One worker may have finished before the other started: one more
	// round each, now that both have learned.
	for w, wk := range workers {
		wk.l3.Reset(wk.l3.Len())
		fwd.Run(wk.l3)
		wk.l2.Reset(wk.l2.Len())
		br.Run(wk.l2)
		for i := range hosts {
			if v := wk.l3.Verdicts[i]; v != RedirectVerdict(2-w) {
				t.Errorf("worker %d l3 packet %d: %v", w, i, v)
			}
			if v := wk.l2.Verdicts[i]; v != RedirectVerdict(2-w) {
				t.Errorf("worker %d l2 frame %d: %v", w, i, v)
			}
		}
	}
	if n := len(fwd.Learned()); n != 2*hosts+1 {
		t.Errorf("%d hosts learned, want %d", n, 2*hosts+1)
	}
	if n := len(br.Table()); n != 2*hosts+1 {
		t.Errorf("%d stations learned, want %d", n, 2*hosts+1)
	}
}
