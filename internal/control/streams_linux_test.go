package control

import (
	"context"
	"encoding/json"
	"io"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
)

// When the switch stops, an open capture and an open drop watch end
// with their trailers saying so, and their handlers are gone before the
// switch closes.
func TestStreamsEndWhenTheSwitchStops(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	ls := startLive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := ls.client.Stream(ctx, "/v1/capture?port=ct0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	copied := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); copied <- err }()
	dresp, err := ls.client.Stream(ctx, "/v1/drops")
	if err != nil {
		t.Fatal(err)
	}
	defer dresp.Body.Close()
	lastStatus := make(chan DropEvent, 1)
	go func() {
		dec := json.NewDecoder(dresp.Body)
		var last DropEvent
		for {
			var ev DropEvent
			if dec.Decode(&ev) != nil {
				break
			}
			if ev.Type == "status" {
				last = ev
			}
		}
		lastStatus <- last
	}()
	ls.ping(t, 1) // a request and a reply through the captured port
	// A packet from ct1's prefix, sent on ct0: dropped as spoofed. Once
	// the counters show it, its sample waits in the watch's lane; the
	// switch stops at once, and the watch must still send it.
	before := ls.drops(t, "ct0", drop.IPRPFilter)
	pkt := make([]byte, 128)
	pkt = pkt[:packet.PutUDP(pkt, netip.MustParseAddrPort("198.18.2.7:1000"), netip.MustParseAddrPort("198.18.2.1:7"), []byte("spoofed"))]
	ls.ns[0].Inject(t, "ct0", false, pkt)
	for deadline := time.Now().Add(10 * time.Second); ls.drops(t, "ct0", drop.IPRPFilter) == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the spoofed packet was not dropped within 10 s")
		}
	}

	ls.stop(t, func() {
		// The server has shut down; the switch closes next.
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, fn := range []string{"(*Server).watchDrops", "(*Server).capture", "(*capture).write"} {
			if strings.Contains(stacks, fn) {
				t.Errorf("%s still runs after Shutdown:\n%s", fn, stacks)
			}
		}
	})
	select {
	case err := <-copied:
		if err != nil {
			t.Errorf("capture stream: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the capture did not end when the switch stopped")
	}
	if n, _ := strconv.Atoi(resp.Trailer.Get("Softnet-Captured")); resp.Trailer.Get("Softnet-End") != EndStopped || n < 2 {
		t.Errorf("capture's trailers: %v", resp.Trailer)
	}
	select {
	case last := <-lastStatus:
		if last.End != EndStopped || last.Sent == 0 {
			t.Errorf("the drop watch's last status: %+v", last)
		}
	case <-ctx.Done():
		t.Fatal("the drop watch did not end when the switch stopped")
	}
	ls.client.http.CloseIdleConnections()
}
