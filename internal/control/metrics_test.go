package control

import (
	"io"
	"log/slog"
	"net/http/httptest"
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
