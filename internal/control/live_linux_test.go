package control

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"softnet.dev/drop"
	"softnet.dev/internal/netnstest"
	"softnet.dev/packet"
)

// call sends a request with a raw body and returns the status and the
// body, which must be JSON unless the status is 204.
func (ls *liveSwitch) call(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", ls.socket)
	}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(method, "http://softnet"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if resp.StatusCode == http.StatusNoContent {
		if len(raw) != 0 {
			t.Errorf("%s %s: 204 with a body %q", method, path, raw)
		}
		return resp.StatusCode, nil
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %s: not a JSON object: %q", method, path, resp.Status, raw)
	}
	if resp.StatusCode == http.StatusMethodNotAllowed {
		out["allow"] = resp.Header.Get("Allow")
	}
	return resp.StatusCode, out
}

// drops returns the named port's drops of reason r.
func (ls *liveSwitch) drops(t *testing.T, port string, r drop.Reason) uint64 {
	t.Helper()
	for _, p := range ls.sw.Stats().Ports {
		if p.Name == port {
			return p.Drops[r]
		}
	}
	t.Fatalf("no port %s in the stats", port)
	return 0
}

// waitDrops waits until port has counted more than n drops of reason r.
func (ls *liveSwitch) waitDrops(t *testing.T, port string, r drop.Reason, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ls.drops(t, port, r) <= n; {
		if time.Now().After(deadline) {
			t.Fatalf("port %s: %v drops stayed at %d", port, r, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustExec(t *testing.T, ns *netnstest.NS, args ...string) {
	t.Helper()
	if out, err := ns.Exec(args...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// A port added through the API forwards once a route to it is added, and
// stops when the route is removed (NO_ROUTE, counted); a removed port's
// device leaves its namespace.
func TestAPIAddRemovePortsAndRoutes(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	ls := startLive(t)
	ns3 := netnstest.New(t)
	status, body := ls.call(t, "POST", "/v1/ports", `{"spec": "tun:ct2,netns=`+ns3.Name+`,router=on"}`)
	if status != http.StatusCreated || body["name"] != "ct2" || body["created"] != true || body["down"] != false || body["router"] != true {
		t.Fatalf("POST /v1/ports: %d %v", status, body)
	}
	ns3.AddAddr(t, "ct2", netip.MustParsePrefix("198.18.3.1/24"))
	mustExec(t, ns3, "ip", "route", "add", "198.18.0.0/16", "dev", "ct2")
	mustExec(t, ls.ns[0], "ip", "route", "add", "198.18.3.0/24", "dev", "ct0")
	mustExec(t, ls.ns[1], "ip", "route", "add", "198.18.3.0/24", "dev", "ct1")
	ping := func(ns *netnstest.NS, to string) error {
		_, err := ns.Exec("ping", "-c", "2", "-i", "0.2", "-W", "1", to)
		return err
	}

	// No route yet: the switch drops the echo requests.
	before := ls.drops(t, "ct0", drop.NoRoute)
	if err := ping(ls.ns[0], "198.18.3.1"); err == nil {
		t.Fatal("ping to 198.18.3.1 answered with no route to it")
	}
	ls.waitDrops(t, "ct0", drop.NoRoute, before)

	status, body = ls.call(t, "POST", "/v1/routes", `{"prefix": "198.18.3.0/24", "port": "ct2"}`)
	if status != http.StatusCreated || body["prefix"] != "198.18.3.0/24" || body["port"] != "ct2" {
		t.Fatalf("POST /v1/routes: %d %v", status, body)
	}
	for _, c := range []struct {
		from *netnstest.NS
		to   string
	}{{ls.ns[0], "198.18.3.1"}, {ns3, "198.18.1.1"}, {ns3, "198.18.2.1"}} {
		if err := ping(c.from, c.to); err != nil {
			t.Errorf("with the route, ping %s: %v", c.to, err)
		}
	}
	var routes []Route
	if err := ls.client.Get(context.Background(), "/v1/routes", &routes); err != nil || len(routes) != 3 || routes[2] != (Route{Prefix: "198.18.3.0/24", Port: "ct2", Origin: "api"}) {
		t.Errorf("routes %v, %v", routes, err)
	}
	var ports []Port
	if err := ls.client.Get(context.Background(), "/v1/ports", &ports); err != nil || len(ports) != 3 || ports[2].Allow != "198.18.3.0/24" {
		t.Errorf("ports %+v, %v", ports, err)
	}

	if status, body = ls.call(t, "DELETE", "/v1/routes/198.18.3.0/24", ""); status != http.StatusNoContent {
		t.Fatalf("DELETE /v1/routes/198.18.3.0/24: %d %v", status, body)
	}
	before = ls.drops(t, "ct0", drop.NoRoute)
	if err := ping(ls.ns[0], "198.18.3.1"); err == nil {
		t.Error("ping to 198.18.3.1 answered after its route was removed")
	}
	ls.waitDrops(t, "ct0", drop.NoRoute, before)

	if status, body = ls.call(t, "DELETE", "/v1/ports/ct2", ""); status != http.StatusNoContent {
		t.Fatalf("DELETE /v1/ports/ct2: %d %v", status, body)
	}
	if out, err := ns3.Exec("ip", "link", "show", "ct2"); err == nil {
		t.Errorf("ct2 still in its namespace after DELETE:\n%s", out)
	}
	if err := ls.client.Get(context.Background(), "/v1/ports", &ports); err != nil || len(ports) != 2 {
		t.Errorf("ports after DELETE %+v, %v", ports, err)
	}
	ls.ping(t, 3)
}

// Every bad request gets its status and a JSON message, and changes
// nothing.
func TestAPIWritesBadInput(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	ls := startLive(t)
	ctx := context.Background()
	var before Config
	if err := ls.client.Get(ctx, "/v1/config", &before); err != nil {
		t.Fatal(err)
	}
	other := netnstest.New(t)
	for _, c := range []struct {
		method, path, body string
		status             int
		want               string // in the message
	}{
		{"POST", "/v1/ports", `{"spec": "tun:cx", "netns": "x"}`, 400, `unknown field "netns"`},
		{"POST", "/v1/ports", `{"spec": "tun:cx"} {"spec": "tun:cy"}`, 400, "more than one JSON value"},
		{"POST", "/v1/ports", `{"spec": "tun:cx"} x`, 400, "invalid character"},
		{"POST", "/v1/ports", `{"spec": "` + strings.Repeat("a", maxBody) + `"}`, 413, "larger than 65536 bytes"},
		{"POST", "/v1/ports", `{"spec": "tun:cx"}` + strings.Repeat(" ", maxBody), 413, "larger than"},
		{"POST", "/v1/ports", ``, 400, "empty"},
		{"POST", "/v1/ports", `["tun:cx"]`, 400, "cannot unmarshal array"},
		{"POST", "/v1/ports", `{"spec": "tux:cx"}`, 400, `unknown kind "tux"`},
		{"POST", "/v1/ports", `{"spec": "tun:cx,queues=0"}`, 400, "queues"},
		{"POST", "/v1/ports", `{"spec": "tun:bad/name"}`, 400, "invalid device name"},
		{"POST", "/v1/ports", `{"spec": "tap:cx"}`, 400, "mixing tun and tap"},
		{"POST", "/v1/ports", `{"spec": "tun:ct1,netns=` + other.Name + `"}`, 409, "already exists: a port named ct1"},
		{"POST", "/v1/ports", `{"spec": "tun:cx,netns=softnet-no-such-ns"}`, 422, "softnet-no-such-ns"},
		{"DELETE", "/v1/ports/nope", ``, 404, "port nope: not found"},
		{"POST", "/v1/routes", `{"prefix": "198.18.9.0/24", "port": "nope"}`, 404, "no port nope"},
		{"POST", "/v1/routes", `{"prefix": "198.18.1.0/24", "port": "ct1"}`, 409, "a route to 198.18.1.0/24"},
		{"POST", "/v1/routes", `{"prefix": "198.18.9.1/24", "port": "ct1"}`, 400, "host bits set"},
		{"POST", "/v1/routes", `{"prefix": "198.18.9.0/24"}`, 400, `want {"prefix"`},
		{"POST", "/v1/routes", `{"route": "198.18.9.0/24=ct1"}`, 400, `unknown field "route"`},
		{"DELETE", "/v1/routes/198.18.9.0/24", ``, 404, "not found"},
		{"DELETE", "/v1/routes/198.18.9.1/24", ``, 400, "host bits set"},
		{"DELETE", "/v1/routes/nonsense", ``, 400, "route:"},
		{"PUT", "/v1/ports", `{}`, 405, "GET, HEAD, POST"},
		{"POST", "/v1/ports/ct0", `{}`, 405, "DELETE"},
		{"DELETE", "/v1/stats", ``, 405, "GET, HEAD"},
		{"GET", "/v1/routes/198.18.1.0/24", ``, 405, "DELETE"},
		{"DELETE", "/v1/nothing", ``, 404, "no such resource"},
	} {
		status, body := ls.call(t, c.method, c.path, c.body)
		msg, _ := body["error"].(string)
		if c.status == 405 {
			msg, _ = body["allow"].(string)
			if e, _ := body["error"].(string); e == "" {
				t.Errorf("%s %s: 405 without a message", c.method, c.path)
			}
		}
		if status != c.status || !strings.Contains(msg, c.want) {
			short := c.body
			if len(short) > 60 {
				short = short[:60] + "..."
			}
			t.Errorf("%s %s %s: %d %q, want %d and %q", c.method, c.path, short, status, msg, c.status, c.want)
		}
	}
	var after Config
	if err := ls.client.Get(ctx, "/v1/config", &after); err != nil || after != before {
		t.Errorf("configuration changed by bad requests:\n%s\nnow:\n%s (%v)", before.Text, after.Text, err)
	}
	if out, err := other.Exec("ip", "link", "show", "ct1"); err == nil {
		t.Errorf("a refused port's device was left behind:\n%s", out)
	}
	ls.ping(t, 3)
}

// A capture whose port is removed ends, with its trailers; a drop watch
// goes on across port changes and names a port added at a removed one's
// index by its own name.
func TestStreamsAcrossPortChanges(t *testing.T) {
	ls := startLive(t)
	ns3 := netnstest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ls.client.Post(ctx, "/v1/ports", PortRequest{Spec: "tun:ct2,netns=" + ns3.Name}, nil); err != nil {
		t.Fatal(err)
	}
	resp, err := ls.client.Stream(ctx, "/v1/capture?port=ct2")
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
	idx, _ := ls.sw.Engine().PortIndex("ct2")

	if err := ls.client.Delete(ctx, "/v1/ports/ct2"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-copied:
		if err != nil {
			t.Errorf("capture stream: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the capture of a removed port did not end")
	}
	if resp.Trailer.Get("Softnet-End") != "port-removed" || resp.Trailer.Get("Softnet-Captured") == "" || resp.Trailer.Get("Softnet-Lost") != "0" {
		t.Errorf("trailers of the ended capture: %v", resp.Trailer)
	}

	if err := ls.client.Post(ctx, "/v1/ports", PortRequest{Spec: "tun:ct3,netns=" + ns3.Name}, nil); err != nil {
		t.Fatal(err)
	}
	if i, _ := ls.sw.Engine().PortIndex("ct3"); i != idx {
		t.Fatalf("ct3 has index %d, ct2 had %d: the test needs the index reused", i, idx)
	}
	// A capture of the new port is not taken for the old one's.
	cresp, err := ls.client.Stream(ctx, "/v1/capture?port=ct3&count=1")
	if err != nil {
		t.Fatalf("capture of ct3: %v", err)
	}
	cresp.Body.Close()

	// ct3 has no route and no allow=: whatever it sends is dropped.
	// The packet is told from what the guest's own stack sends by its
	// length.
	const length = 65
	pkt := make([]byte, 128)
	pkt = pkt[:packet.PutUDP(pkt, netip.MustParseAddrPort("198.18.3.1:1000"), netip.MustParseAddrPort("198.18.1.1:7"), make([]byte, length-28))]
	ns3.Inject(t, "ct3", false, pkt)
	dec := json.NewDecoder(dresp.Body)
	for {
		var ev DropEvent
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("drop watch ended: %v", err)
		}
		if ev.Type == "drop" && ev.Length == length {
			if ev.Port != "ct3" || ev.Reason != drop.IPRPFilter.String() || !strings.Contains(ev.Summary, "198.18.3.1") {
				t.Errorf("the injected packet's drop: %+v", ev)
			}
			break
		}
	}
}
