package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the agent's softnet_agent_* metrics.
type Metrics struct {
	syncs    *prometheus.CounterVec
	errors   *prometheus.CounterVec
	lastSync prometheus.Gauge
	duration prometheus.Histogram
	lag      prometheus.Gauge
	peers    prometheus.Gauge
	skipped  prometheus.Gauge
	api      prometheus.Gauge
}

// NewMetrics registers the agent's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "softnet_agent_syncs_total",
			Help: "Syncs of the switch with the cluster's Nodes, by result (ok, error)."}, []string{"result"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "softnet_agent_errors_total",
			Help: "Errors by where they came from: kubernetes (a failed list or watch of Nodes), sync (the switch refused or could not be reached, this Node is missing or incomplete, its annotations could not be patched)."}, []string{"source"}),
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{Name: "softnet_agent_last_sync_timestamp_seconds",
			Help: "When the switch was last found or made as the cluster says (Unix time)."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "softnet_agent_sync_duration_seconds",
			Help: "Time a sync took, from reading the Nodes to the switch's answer.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 8)}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "softnet_agent_lag_seconds",
			Help: "Time from the first Node event of the last successful sync to its end: how far the switch lagged behind the cluster."}),
		peers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "softnet_agent_peers",
			Help: "Other nodes the switch routes to."}),
		skipped: prometheus.NewGauge(prometheus.GaugeOpts{Name: "softnet_agent_skipped_nodes",
			Help: "Nodes left out for bad or conflicting annotations or pod CIDRs (the agent's status file says why)."}),
		api: prometheus.NewGauge(prometheus.GaugeOpts{Name: "softnet_agent_api_up",
			Help: "1 while the last list or watch of Nodes succeeded, 0 from a failed one."}),
	}
	reg.MustRegister(m.syncs, m.errors, m.lastSync, m.duration, m.lag, m.peers, m.skipped, m.api)
	m.syncs.WithLabelValues("ok")
	m.syncs.WithLabelValues("error")
	m.errors.WithLabelValues("kubernetes")
	m.errors.WithLabelValues("sync")
	return m
}

func (m *Metrics) apiUp(ok bool) {
	if ok {
		m.api.Set(1)
	} else {
		m.api.Set(0)
	}
}

// synced records a sync that started at start for events pending since
// pending (zero: none).
func (m *Metrics) synced(start, pending time.Time, err error) {
	now := time.Now()
	m.duration.Observe(now.Sub(start).Seconds())
	if err != nil {
		m.syncs.WithLabelValues("error").Inc()
		m.errors.WithLabelValues("sync").Inc()
		return
	}
	m.syncs.WithLabelValues("ok").Inc()
	m.lastSync.Set(float64(now.UnixNano()) / 1e9)
	if !pending.IsZero() {
		m.lag.Set(now.Sub(pending).Seconds())
	}
}
