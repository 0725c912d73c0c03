package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"softnet.dev/drop"
	"softnet.dev/internal/buildinfo"
	"softnet.dev/internal/netnstest"
	"softnet.dev/internal/vswitch"
	"softnet.dev/packet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// liveSwitch is a running switch between two guests, with its API on a
// socket of the test's own.
type liveSwitch struct {
	sw     *vswitch.Switch
	ns     [2]*netnstest.NS
	socket string
	client *Client
	logs   logBuffer // the switch's and the server's, as JSON lines

	srv      *Server
	served   chan error
	stopOnce sync.Once
}

func startLive(t *testing.T) *liveSwitch {
	t.Helper()
	netnstest.RequireRoot(t)
	ls := &liveSwitch{socket: filepath.Join(t.TempDir(), "softnet.sock")}
	var cfg vswitch.Config
	for i := range ls.ns {
		ls.ns[i] = netnstest.New(t)
		p, err := vswitch.ParsePort(fmt.Sprintf("tun:ct%d,netns=%s", i, ls.ns[i].Name))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Ports = append(cfg.Ports, p)
		cfg.Routes = append(cfg.Routes, vswitch.RouteSpec{Prefix: netip.MustParsePrefix(fmt.Sprintf("198.18.%d.0/24", i+1)), Port: p.Name})
	}
	log := slog.New(slog.NewJSONHandler(&ls.logs, nil))
	sw, err := vswitch.Open(cfg, vswitch.Tuning{}, log)
	if err != nil {
		t.Fatal(err)
	}
	ls.sw = sw
	if err := sw.Start(); err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(ls.socket, -1)
	if err != nil {
		t.Fatal(err)
	}
	ls.srv, ls.served = NewServer(sw, log), make(chan error, 1)
	go func() { ls.served <- ls.srv.Serve(ln) }()
	t.Cleanup(func() { ls.stop(t, nil) })
	for i, ns := range ls.ns {
		other := 2 - i
		dev := fmt.Sprintf("ct%d", i)
		ns.AddAddr(t, dev, netip.MustParsePrefix(fmt.Sprintf("198.18.%d.1/24", i+1)))
		if out, err := ns.Exec("ip", "route", "add", fmt.Sprintf("198.18.%d.0/24", other), "dev", dev); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	ls.client = NewClient(ls.socket)
	return ls
}

// stop shuts the server down, calls between (if not nil), and closes
// the switch, as softnet switch does; once.
func (ls *liveSwitch) stop(t *testing.T, between func()) {
	ls.stopOnce.Do(func() { ls.stopNow(t, between) })
}

func (ls *liveSwitch) stopNow(t *testing.T, between func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ls.srv.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if between != nil {
		between()
	}
	if err := <-ls.served; err != nil {
		t.Errorf("serve: %v", err)
	}
	if _, err := os.Stat(ls.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	rep, err := ls.sw.Close()
	if err != nil {
		t.Errorf("close: %v", err)
	}
	if rep != nil && rep.Leak != "ok" {
		t.Errorf("leak check: %s", rep.Leak)
	}
}

func (ls *liveSwitch) ping(t *testing.T, n int) {
	t.Helper()
	netnstest.RequireTools(t, "ping")
	if out, err := ls.ns[0].Exec("ping", "-c", fmt.Sprint(n), "-i", "0.2", "-W", "2", "198.18.2.1"); err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
}

func TestAPI(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	ls := startLive(t)
	ls.ping(t, 3)
	ctx := context.Background()
	fi, err := os.Stat(ls.socket)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v, %v; want 0660", fi.Mode(), err)
	}

	// The workers publish their counters every few dozen rounds and
	// before they sleep (docs/api.md): the last ping's may come a little
	// after its reply.
	var rep vswitch.Report
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := ls.client.Get(ctx, "/v1/stats", &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Ports) == 2 && rep.Ports[0].RxPackets >= 3 && rep.Ports[1].TxPackets >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if len(rep.Ports) != 2 || rep.Ports[0].RxPackets < 3 || rep.Ports[1].TxPackets < 3 {
		t.Errorf("stats after 3 pings: %+v", rep.Ports)
	}
	var ports []Port
	if err := ls.client.Get(ctx, "/v1/ports", &ports); err != nil || len(ports) != 2 || ports[0].Name != "ct0" || !ports[0].Created || ports[0].Down {
		t.Errorf("ports %+v, %v", ports, err)
	}
	// The default port security: each port may send from what is routed
	// to it.
	if len(ports) == 2 && (ports[0].Allow != "198.18.1.0/24" || ports[1].Allow != "198.18.2.0/24" || ports[0].DHCPServer || ports[0].Router) {
		t.Errorf("ports' security %+v", ports)
	}
	var routes []Route
	if err := ls.client.Get(ctx, "/v1/routes", &routes); err != nil || len(routes) != 2 || routes[1] != (Route{Prefix: "198.18.2.0/24", Port: "ct1", Origin: "config"}) {
		t.Errorf("routes %+v, %v", routes, err)
	}
	var ver buildinfo.Info
	if err := ls.client.Get(ctx, "/v1/version", &ver); err != nil || ver != buildinfo.Get() {
		t.Errorf("version %+v, %v; want %+v", ver, err, buildinfo.Get())
	}
	var cfg Config
	if err := ls.client.Get(ctx, "/v1/config", &cfg); err != nil {
		t.Fatal(err)
	}
	// The running configuration reads back as itself.
	parsed, err := vswitch.ParseConfig("running", strings.NewReader(cfg.Text))
	if err != nil || parsed.Text() != cfg.Text || !strings.Contains(cfg.Text, "route 198.18.1.0/24=ct0\n") {
		t.Errorf("config %q: %v", cfg.Text, err)
	}

	// Errors are JSON with a status that means something.
	var refused *RefusedError
	if err := ls.client.Get(ctx, "/v1/nothing", &cfg); !errors.As(err, &refused) || refused.Status != http.StatusNotFound || !strings.Contains(refused.Message, "/v1/nothing") {
		t.Errorf("unknown resource: %v", err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", ls.socket)
	}}}
	resp, err := hc.Post("http://softnet/v1/stats", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || !strings.HasPrefix(string(body), "{") {
		t.Errorf("POST /v1/stats: %s %s", resp.Status, body)
	}
	hc.CloseIdleConnections()
}

// A second switch on the same socket fails clearly and leaves the first
// one's socket alone; a stale socket file is replaced.
func TestListenRefusesALiveSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	ln, err := Listen(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if _, err := Listen(path, -1); !errors.Is(err, ErrInUse) {
		t.Errorf("second listen: %v, want ErrInUse", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("first socket gone: %v", err)
	}
	ln.Close()
	// A socket file nobody listens on: what a killed switch leaves.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	ln2, err := Listen(path, -1)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	ln2.Close()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path, -1); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("over a regular file: %v", err)
	}
	if err := NewClient(filepath.Join(dir, "none.sock")).Get(context.Background(), "/v1/stats", new(vswitch.Report)); !errors.Is(err, ErrNoSwitch) {
		t.Errorf("no switch: %v", err)
	}
}

// Clients that connect and say nothing are cut off, many at once are
// answered or turned away, and forwarding goes on meanwhile.
func TestAPIMisbehavingClients(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	ls := startLive(t)
	silent, err := net.Dial("unix", ls.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rep vswitch.Report
			err := ls.client.Get(context.Background(), "/v1/stats", &rep)
			var refused *RefusedError
			if err != nil && !(errors.As(err, &refused) && refused.Status == http.StatusServiceUnavailable) {
				errs <- err
			}
		}()
	}
	ls.ping(t, 3)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent client: %v", err)
	}
	silent.SetReadDeadline(time.Now().Add(3 * readHeaderTimeout))
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("a silent client was not cut off: %v", err)
	}
	ls.client.http.CloseIdleConnections()
}

// /metrics carries the counters the final report shows.
func TestMetricsMatchTheReport(t *testing.T) {
	netnstest.RequireTools(t, "ping")
	ls := startLive(t)
	ls.ping(t, 5)
	scrape := func() map[string]float64 {
		_, got := scrapeFamilies(t, ls.sw)
		return got
	}
	got := scrape()
	if !hasPrefix(got, "go_build_info") {
		t.Error("no build info")
	}
	bi := buildinfo.Get()
	if k := fmt.Sprintf("softnet_build_info,goversion=%s,modified=%t,revision=%s,version=%s", bi.Go, bi.Modified, bi.Revision, bi.Version); got[k] != 1 {
		t.Errorf("no %s", k)
	}
	// The workers publish before they sleep: once the pings are over, a
	// scrape and the report agree.
	rep := ls.sw.Stats()
	for i, p := range rep.Ports {
		for metric, want := range map[string]uint64{
			"softnet_port_rx_packets_total": p.RxPackets, "softnet_port_tx_packets_total": p.TxPackets,
			"softnet_port_rx_bytes_total": p.RxBytes, "softnet_port_tx_bytes_total": p.TxBytes,
		} {
			if v := got[metric+",port="+p.Name]; v != float64(want) || want == 0 {
				t.Errorf("%s{port=%s} = %v, report %d", metric, p.Name, v, want)
			}
		}
		if got["softnet_port_up,port="+p.Name] != 1 {
			t.Errorf("port %d not up", i)
		}
	}
	if got["softnet_pool_buffers,state=free"]+got["softnet_pool_buffers,state=in_use"]+got["softnet_pool_buffers,state=pending_remote"] != float64(rep.Buffers.Capacity) {
		t.Errorf("pool states do not add up to %d: %v", rep.Buffers.Capacity, got)
	}
	if got["softnet_worker_rounds_total,kind=busy,worker=0"] == 0 {
		t.Error("no busy rounds")
	}
	if _, ok := got["softnet_learned_entries,table=hosts"]; !ok {
		t.Error("no learned hosts gauge")
	}
}

func hasPrefix(m map[string]float64, prefix string) bool {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// A capture of a ping, read back by tcpdump, shows its requests and
// replies; a drop watch sees what a guest injects, with the reasons the
// counters give.
func TestCaptureAndDropWatch(t *testing.T) {
	netnstest.RequireTools(t, "ping", "tcpdump")
	ls := startLive(t)
	ls.ping(t, 1) // routes and neighbours settled
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := ls.client.Stream(ctx, "/v1/capture?port=ct0&count=6&buffer=256&filter=proto+icmp+and+host+198.18.2.1")
	if err != nil {
		t.Fatal(err)
	}
	pcapFile := filepath.Join(t.TempDir(), "ping.pcap")
	f, err := os.Create(pcapFile)
	if err != nil {
		t.Fatal(err)
	}
	copied := make(chan error, 1)
	go func() { _, err := io.Copy(f, resp.Body); copied <- err }()
	// A second capture of the same port is refused while this one runs.
	var refused *RefusedError
	if _, err := ls.client.Stream(ctx, "/v1/capture?port=ct0"); !errors.As(err, &refused) || refused.Status != http.StatusConflict {
		t.Errorf("second capture: %v", err)
	}
	for _, bad := range []string{"port=nope", "port=ct0&dir=up", "port=ct0&filter=host+x", "port=ct0&snaplen=1", "port=ct1&buffer=255", "port=ct1&buffer=65537"} {
		if _, err := ls.client.Stream(ctx, "/v1/capture?"+bad); !errors.As(err, &refused) || refused.Status/100 != 4 {
			t.Errorf("capture %s: %v", bad, err)
		}
	}
	// A tap the server did not set (one a capture set on a port that
	// took the index since) is not replaced either.
	other, err := newCapture(captureOptions{snaplen: 64, buffer: MinCaptureBufferKiB << 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.sw.Engine().SetTap(1, other); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.client.Stream(ctx, "/v1/capture?port=ct1"); !errors.As(err, &refused) || refused.Status != http.StatusConflict || !strings.Contains(refused.Message, "ct1: a capture is already running") {
		t.Errorf("capture of a port with a tap: %v", err)
	}
	if !ls.sw.Engine().ClearTap(1, other) {
		t.Error("a refused capture took the tap it found off")
	}
	ls.ping(t, 3)
	if err := <-copied; err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	f.Close()
	if resp.Trailer.Get("Softnet-Captured") != "6" || resp.Trailer.Get("Softnet-Lost") != "0" {
		t.Errorf("trailers %v", resp.Trailer)
	}
	out, err := exec.Command("tcpdump", "-n", "-r", pcapFile).CombinedOutput()
	if err != nil {
		t.Fatalf("tcpdump -r: %v\n%s", err, out)
	}
	if strings.Count(string(out), "ICMP echo request") != 3 || strings.Count(string(out), "ICMP echo reply") != 3 {
		t.Errorf("tcpdump -r:\n%s", out)
	}

	// The drop watch.
	dresp, err := ls.client.Stream(ctx, "/v1/drops?count=5")
	if err != nil {
		t.Fatal(err)
	}
	defer dresp.Body.Close()
	if _, err := ls.client.Stream(ctx, "/v1/drops"); !errors.As(err, &refused) || refused.Status != http.StatusConflict {
		t.Errorf("second drop watch: %v", err)
	}
	before := ls.sw.Stats().Ports[0].Drops
	good := []byte{0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 1, 1, 198, 18, 2, 1, 0, 1, 0, 2, 0, 8, 0, 0}
	injected := [][]byte{
		good[:24],                         // truncated
		append([]byte{0x65}, good[1:]...), // IP version 6 in an IPv4 header
		append([]byte{0x45, 0, 0, 200}, good[4:]...),                                  // total length past the end
		append(append([]byte{}, good[:16]...), 198, 20, 0, 1, 0, 1, 0, 2, 0, 8, 0, 0), // no route
		append(append(append([]byte{}, good[:12]...), 198, 18, 2, 1), good[16:]...),   // ct1's source: spoofed
	}
	// The forwarder verifies the header checksum before it routes.
	packet.SetIPv4HeaderChecksum(injected[3])
	ls.ns[0].Inject(t, "ct0", false, injected...)
	dec := json.NewDecoder(dresp.Body)
	var seen []string
	for len(seen) < len(injected) {
		var ev DropEvent
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("after %v: %v", seen, err)
		}
		if ev.Type == "drop" {
			if ev.Port != "ct0" || ev.Summary == "" {
				t.Errorf("drop event %+v", ev)
			}
			seen = append(seen, ev.Reason)
		}
	}
	var counted []string
	deadline := time.Now().Add(10 * time.Second)
	for len(counted) < len(injected) && time.Now().Before(deadline) {
		counted = counted[:0]
		after := ls.sw.Stats().Ports[0].Drops
		for r := range after {
			for range after[r] - before[r] {
				counted = append(counted, drop.Reason(r).String())
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	slices.Sort(seen)
	slices.Sort(counted)
	if !slices.Equal(seen, counted) || !slices.Contains(seen, "NO_ROUTE") || !slices.Contains(seen, "IP_RPFILTER") {
		t.Errorf("watch saw %v, counters say %v", seen, counted)
	}
}

// GET /v1/stats counts the process's heap allocations, before it builds
// its answer: a second request counts what the first allocated.
func TestStatsHeapAllocs(t *testing.T) {
	ls := startLive(t)
	var a, b vswitch.Report
	if err := ls.client.Get(context.Background(), "/v1/stats", &a); err != nil {
		t.Fatal(err)
	}
	if err := ls.client.Get(context.Background(), "/v1/stats", &b); err != nil {
		t.Fatal(err)
	}
	if a.HeapAllocs == 0 || b.HeapAllocs <= a.HeapAllocs {
		t.Errorf("heap_allocs %d then %d, want a count that grows", a.HeapAllocs, b.HeapAllocs)
	}
	if rep := ls.sw.Stats(); rep.HeapAllocs != 0 {
		t.Errorf("the switch's own report has heap_allocs %d: only the API counts them", rep.HeapAllocs)
	}
}
