package control

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"softnet.dev/internal/vswitch"
)

// scrape serves sw's /metrics once and parses it.
func scrapeFamilies(t *testing.T, sw *vswitch.Switch) (string, map[string]float64) {
	t.Helper()
	rec := httptest.NewRecorder()
	MetricsHandler(sw).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			key := name
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return body, out
}

// /metrics has the process's CPU time, resident memory and open file
// descriptors, and the whole of it passes the linter that `promtool
// check metrics` runs (client_golang's promlint).
func TestMetricsProcess(t *testing.T) {
	sw, err := vswitch.Open(vswitch.Config{}, vswitch.Tuning{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Start(); err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	body, got := scrapeFamilies(t, sw)
	for _, name := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_max_fds", "process_start_time_seconds"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no %s", name)
		}
	}
	if got["process_resident_memory_bytes"] < 1<<20 || got["process_open_fds"] < 3 {
		t.Errorf("resident memory %v bytes, %v open fds: not this process's", got["process_resident_memory_bytes"], got["process_open_fds"])
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// A port added for a pod keeps it: the API lists it, and
// softnet_port_info carries it beside the port's kind; a pod Kubernetes
// could not have named is refused, and no label comes of it.
func TestPortPod(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sw, err := vswitch.Open(vswitch.Config{}, vswitch.Tuning{}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Start(); err != nil {
		t.Fatal(err)
	}
	ls := &liveSwitch{sw: sw, socket: filepath.Join(dir, "softnet.sock")}
	ln, err := Listen(ls.socket, -1)
	if err != nil {
		t.Fatal(err)
	}
	ls.srv, ls.served = NewServer(sw, log), make(chan error, 1)
	go func() { ls.served <- ls.srv.Serve(ln) }()
	t.Cleanup(func() { ls.stop(t, nil) })
	ls.client = NewClient(ls.socket)
	ctx := context.Background()

	pod := vswitch.Pod{Namespace: "default", Name: "web-0", InfraContainerID: strings.Repeat("0f", 32)}
	var added Port
	if err := ls.client.Post(ctx, "/v1/ports", PortRequest{Spec: "vhost-user:vm1,socket=" + filepath.Join(dir, "vm1.sock"), Pod: &pod}, &added); err != nil {
		t.Fatal(err)
	}
	if err := ls.client.Post(ctx, "/v1/ports", PortRequest{Spec: "vhost-user:vm2,socket=" + filepath.Join(dir, "vm2.sock")}, &Port{}); err != nil {
		t.Fatal(err)
	}
	var ports []Port
	if err := ls.client.Get(ctx, "/v1/ports", &ports); err != nil {
		t.Fatal(err)
	}
	if added.Pod == nil || *added.Pod != pod || len(ports) != 2 || ports[0].Pod == nil || *ports[0].Pod != pod || ports[1].Pod != nil {
		t.Errorf("added %+v; listed %+v", added, ports)
	}
	for _, bad := range []vswitch.Pod{
		{Namespace: "default", Name: `web"} softnet_port_up{port="x`},
		{Namespace: "default", Name: "web\nsoftnet_port_up 1"},
		{Namespace: "Default", Name: "web"},
		{Name: "web"},
		{Namespace: "default", Name: "web", InfraContainerID: "a b"},
	} {
		var refused *RefusedError
		err := ls.client.Post(ctx, "/v1/ports", PortRequest{Spec: "vhost-user:vm3,socket=" + filepath.Join(dir, "vm3.sock"), Pod: &bad}, &Port{})
		if !errors.As(err, &refused) || refused.Status != 400 {
			t.Errorf("pod %+v: %v, want 400", bad, err)
		}
	}
	body, got := scrapeFamilies(t, sw)
	for key, want := range map[string]float64{
		"softnet_port_info,dev=,kind=vhost-user,netns=,pod=web-0,pod_namespace=default,port=vm1": 1,
		"softnet_port_info,dev=,kind=vhost-user,netns=,pod=,pod_namespace=,port=vm2":             1,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v\n%s", key, got[key], want, body)
		}
	}
	if n := strings.Count(body, "\nsoftnet_port_info{"); n != 2 {
		t.Errorf("%d softnet_port_info series, want 2:\n%s", n, body)
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}
