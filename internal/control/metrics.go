package control

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"softnet.dev/drop"
	"softnet.dev/internal/buildinfo"
	"softnet.dev/internal/vswitch"
	"softnet.dev/internal/vswitch/portkind"
)

// metric describes one of softnet's metrics.
func metric(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("softnet_"+name, help, labels, nil)
}

var (
	mRxPackets = metric("port_rx_packets_total", "Packets received on the port and handed to the programs.", "port")
	mRxBytes   = metric("port_rx_bytes_total", "Bytes of the packets received on the port.", "port")
	mTxPackets = metric("port_tx_packets_total", "Packets the port transmitted.", "port")
	mTxBytes   = metric("port_tx_bytes_total", "Bytes of the packets the port transmitted.", "port")
	mTxDropped = metric("port_tx_dropped_total", "Packets offered to the port's transmit queues and not sent (their reasons are in softnet_drops_total).", "port")
	mUp        = metric("port_up", "1 while the port forwards, 0 once it went down.", "port")
	mInfo      = metric("port_info", "1 for each port, with its kind, its device's namespace and name (tun, tap, afxdp) and the Kubernetes pod whose network it is (softnet-cni's ports): join other port series to it on port.", "port", "kind", "netns", "dev", "pod_namespace", "pod")
	mDrops     = metric("drops_total", "Packets dropped, by the port they arrived on (verdicts and receive errors) or were sent to (transmit errors, POLICE_EGRESS), and reason.", "port", "reason")
	mOffload   = metric("port_offload_total", "Offload work on the port: GSO packets received whole (gso_in) or written whole (gso_out), GSO packets segmented in software (segmented) and the segments written (segments), checksums finished in software (csum_finished), GSO packets built by GRO (coalesced) and the packets they carried (coalesced_segs).", "port", "kind")
	mKernel    = metric("port_kernel_total", "The port's device as the kernel counts it since the switch opened it, guest side: packets the guest sent (tx_packets) and those its full queue dropped before softnet saw them (tx_dropped), packets delivered to the guest (rx_packets) and dropped there (rx_dropped), errors.", "port", "counter")
	mPool      = metric("pool_buffers", "Packet buffers of the pool by state: in use, waiting on a remote-free list, or free.", "state")
	mCache     = metric("cache_events_total", "Per-worker buffer cache events, summed: hits and misses of gets, refills from and flushes to the shared depot, gets that found the pool exhausted, remote frees.", "kind")
	mRounds    = metric("worker_rounds_total", "Poll rounds of the worker that found packets (busy) or none (idle).", "worker", "kind")
	mSleeps    = metric("worker_sleeps_total", "Times the worker went to sleep waiting for packets.", "worker")
	mYields    = metric("worker_yields_total", "Busy polling's empty rounds in which the worker offered its CPU to other threads (sched_yield).", "worker")
	mContended = metric("worker_contended_total", "Busy polls the worker ended early because a yield gave its CPU to another thread; it slept instead.", "worker")
	mStarved   = metric("worker_starved_total", "Rounds in which the worker found the pool empty and waited for buffers.", "worker")
	mPanics    = metric("worker_program_panics_total", "Program panics on the worker; each cost a batch.", "worker")
	mLearned   = metric("learned_entries", "Entries of the learned table: hosts of the L3 forwarder (TUN ports) or stations of the bridge (TAP ports).", "table")
	mBuild     = metric("build_info", "Which softnet the switch is, always 1: the module version, the VCS revision it was built from (empty without VCS stamping), whether the tree was modified, and the Go toolchain (as GET /v1/version says).", "version", "revision", "modified", "goversion")
	mLearning  = metric("learning_total", "Learning events: new entries (learned), entries that moved to another port (moved), moves refused within the hold time or by policy (moves_refused), sources not learned because the table or the port's share was full (table_full) or the port may not send from them (not_allowed), entries aged out (aged).", "table", "kind")
)

// kindMetrics are the kinds' own metrics, as their units name them.
var kindMetrics = func() map[*portkind.Metric]*prometheus.Desc {
	out := map[*portkind.Metric]*prometheus.Desc{}
	for _, m := range vswitch.KindMetrics() {
		out[m] = metric(m.Name, m.Help, append([]string{"port"}, m.Labels...)...)
	}
	return out
}()

// collector turns a switch's statistics into metrics when scraped. It
// reads the counters the workers publish for every view (stats, the
// report), so a scrape costs the datapath nothing.
type collector struct{ sw *vswitch.Switch }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mRxPackets, mRxBytes, mTxPackets, mTxBytes, mTxDropped, mUp, mInfo, mDrops, mOffload, mKernel, mPool, mCache, mRounds, mSleeps, mYields, mContended, mStarved, mPanics, mLearned, mLearning, mBuild} {
		ch <- d
	}
	for _, d := range kindMetrics {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.sw.Stats()
	bi := buildinfo.Get()
	ch <- prometheus.MustNewConstMetric(mBuild, prometheus.GaugeValue, 1, bi.Version, bi.Revision, strconv.FormatBool(bi.Modified), bi.Go)
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, pv := range c.sw.Ports() {
		s := pv.Spec
		gauge(mInfo, 1, s.Name, s.Kind, s.NetNS, s.Device(), s.Pod.Namespace, s.Pod.Name)
	}
	devices := map[string]vswitch.DeviceStats{}
	for _, d := range st.Devices {
		devices[d.Port] = d
	}
	for _, p := range st.Ports {
		counter(mRxPackets, p.RxPackets, p.Name)
		counter(mRxBytes, p.RxBytes, p.Name)
		counter(mTxPackets, p.TxPackets, p.Name)
		counter(mTxBytes, p.TxBytes, p.Name)
		counter(mTxDropped, p.TxDropped, p.Name)
		up := 1.0
		if p.Down {
			up = 0
		}
		gauge(mUp, up, p.Name)
		drops := p.Drops
		// Ports come and go: a device is its port's by name, not by
		// position.
		if d, ok := devices[p.Name]; ok {
			for r := range drops {
				drops[r] += d.RxDrops[r] + d.TxDrops[r]
			}
			for _, k := range []struct {
				kind string
				v    uint64
			}{{"gso_in", d.GSOIn}, {"gso_out", d.GSOOut}, {"segmented", d.Segmented}, {"segments", d.Segments},
				{"csum_finished", d.CsumFinished}, {"coalesced", d.Coalesced}, {"coalesced_segs", d.CoalescedSegs}} {
				counter(mOffload, k.v, p.Name, k.kind)
			}
			if d.Own != nil {
				d.Own.Collect(func(m *portkind.Metric, v uint64, labels ...string) {
					if m.Gauge {
						gauge(kindMetrics[m], float64(v), append([]string{p.Name}, labels...)...)
					} else {
						counter(kindMetrics[m], v, append([]string{p.Name}, labels...)...)
					}
				})
			}
			if k := d.Kernel; k != nil {
				counter(mKernel, k.TxPackets, p.Name, "tx_packets")
				counter(mKernel, k.TxDropped, p.Name, "tx_dropped")
				counter(mKernel, k.RxPackets, p.Name, "rx_packets")
				counter(mKernel, k.RxDropped, p.Name, "rx_dropped")
				counter(mKernel, k.RxErrors+k.TxErrors, p.Name, "errors")
			}
		}
		for r, n := range drops {
			if n > 0 {
				counter(mDrops, n, p.Name, drop.Reason(r).String())
			}
		}
	}
	b := st.Buffers
	gauge(mPool, float64(b.InUse), "in_use")
	gauge(mPool, float64(b.Pending), "pending_remote")
	gauge(mPool, float64(b.Capacity-b.InUse-b.Pending), "free")
	for _, k := range []struct {
		kind string
		v    uint64
	}{{"hit", b.Hits}, {"miss", b.Misses}, {"refill", b.Refills}, {"flush", b.Flushes}, {"exhausted", b.Exhausted}, {"remote_free", b.RemoteFrees}} {
		counter(mCache, k.v, k.kind)
	}
	if l := st.Learning; l != nil {
		gauge(mLearned, float64(l.Hosts), "hosts")
		for _, k := range []struct {
			kind string
			v    uint64
		}{{"learned", l.Learned}, {"moved", l.Moved}, {"moves_refused", l.MovesRefused}, {"table_full", l.Full}, {"not_allowed", l.NotAllowed}, {"aged", l.Aged}} {
			counter(mLearning, k.v, "hosts", k.kind)
		}
	}
	if b := st.Bridge; b != nil {
		gauge(mLearned, float64(b.Stations), "stations")
		for _, k := range []struct {
			kind string
			v    uint64
		}{{"learned", b.Learned}, {"moved", b.Moved}, {"moves_refused", b.MovesRefused}, {"table_full", b.Full}, {"aged", b.Aged}} {
			counter(mLearning, k.v, "stations", k.kind)
		}
	}
	for i, w := range st.Workers {
		id := strconv.Itoa(i)
		counter(mRounds, w.BusyRounds, id, "busy")
		counter(mRounds, w.IdleRounds, id, "idle")
		counter(mSleeps, w.Sleeps, id)
		counter(mYields, w.Yields, id)
		counter(mContended, w.Contended, id)
		counter(mStarved, w.Starved, id)
		counter(mPanics, w.Panics, id)
	}
}

// MetricsHandler serves sw's metrics, with the process's (CPU time,
// resident memory, open file descriptors, from /proc), the Go runtime's
// and the build's, in the Prometheus exposition format.
func MetricsHandler(sw *vswitch.Switch) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{sw}, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector(), collectors.NewBuildInfoCollector())
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
