package lab

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseModes(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want []Mode
		err  string
	}{
		{in: []string{"udp", " TCP4 "}, want: []Mode{UDP, TCP4}},
		{in: []string{"latency"}, want: []Mode{LatencyUDP, LatencyTCP}},
		{in: []string{"udp-gso", "pdr64"}, want: []Mode{UDPGSO, PDR64}},
		{in: []string{"all"}, want: Modes},
		{in: []string{"latency", "latency-tcp"}, err: "given twice"},
		{in: []string{"udp", "udp"}, err: "given twice"},
		{in: []string{"sctp"}, err: `mode "sctp"`},
		{in: []string{""}, err: `mode ""`},
	} {
		got, err := ParseModes(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want %q", c.in, err, c.err)
		case c.err == "" && (err != nil || !slices.Equal(got, c.want)):
			t.Errorf("%q: %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestValidateNewOptions(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.Runs != 1 || o.PDRSteps != DefaultPDRSteps || o.PDRTrial != DefaultPDRTrial || !slices.Equal(o.Modes, DefaultModes) {
		t.Fatalf("defaults %+v, %v", o, err)
	}
	for _, o := range []Options{
		{Runs: -1}, {Runs: maxRuns + 1}, {PDRSteps: 1}, {PDRSteps: 21},
		{PDRTrial: 1500 * time.Millisecond}, {Modes: []Mode{"latency"}},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	if err := (Options{Runs: 3, Modes: Modes, PDRSteps: 2, PDRTrial: time.Second}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestMedianSpreadRotation(t *testing.T) {
	for _, c := range []struct {
		in             []float64
		median, spread float64
	}{
		{nil, 0, 0},
		{[]float64{5}, 5, 0},
		{[]float64{3, 1, 2}, 2, 0.5},
		{[]float64{4, 1, 3, 2}, 2.5, 0.6},
		{[]float64{0, 0}, 0, 0},
	} {
		if m, s := median(c.in), spread(c.in); math.Abs(m-c.median) > 1e-12 || math.Abs(s-c.spread) > 1e-12 {
			t.Errorf("%v: median %v spread %v, want %v %v", c.in, m, s, c.median, c.spread)
		}
	}
	// Every round measures every variant once, each round starting one later.
	seenFirst := map[int]bool{}
	for r := range 3 {
		order := rotation(3, r)
		sorted := slices.Sorted(slices.Values(order))
		if !slices.Equal(sorted, []int{0, 1, 2}) {
			t.Errorf("round %d: %v", r, order)
		}
		seenFirst[order[0]] = true
	}
	if len(seenFirst) != 3 {
		t.Errorf("first variants over 3 rounds: %v", seenFirst)
	}
}

func TestAggregate(t *testing.T) {
	mk := func(gbps, cpu float64, drops uint64) Result {
		return Result{Mode: UDP, Variant: "x", Gbps: gbps, PPS: gbps * 1e5, CPUPerGbit: ptr(cpu), Forwarded: ptr(drops), PeakRSS: ptr(int64(gbps)), RSSReset: true}
	}
	// Medians field by field; counts from the median run.
	got := aggregate([]Result{mk(3, 0.1, 30), mk(1, 0.3, 10), mk(2, 0.2, 20)})
	if got.Gbps != 2 || *got.CPUPerGbit != 0.2 || *got.Forwarded != 20 || got.Runs != 3 || math.Abs(got.Spread-0.5) > 1e-12 ||
		!slices.Equal(got.Samples, []float64{3, 1, 2}) || *got.PeakRSS != 3 || !got.RSSReset {
		t.Errorf("aggregate: %+v", got)
	}
	// Field-wise: the run with the median rate need not have the median cost.
	got = aggregate([]Result{mk(1, 0.9, 1), mk(2, 0.1, 2), mk(3, 0.5, 3)})
	if got.Gbps != 2 || *got.CPUPerGbit != 0.5 {
		t.Errorf("field-wise median: %+v", got)
	}
	// Latency: the main figure is the p50 (lower is better).
	lat := func(p50 float64) Result {
		return Result{Mode: LatencyUDP, LatencyP50US: ptr(p50), LatencyP99US: ptr(2 * p50)}
	}
	got = aggregate([]Result{lat(30), lat(50), lat(40)})
	if *got.LatencyP50US != 40 || *got.LatencyP99US != 80 || got.main() != 40 {
		t.Errorf("latency aggregate: %+v", got)
	}
	// The loss split is worked out per run, then its median taken: it
	// stays beside the median loss.
	split := func(lossPct float64, dev, sock uint64) Result {
		r := Result{Mode: UDP, Gbps: 1, PPS: 1000, Duration: 10, LossPct: ptr(lossPct), SenderDevDrops: ptr(dev), ReceiverSocketDrops: ptr(sock)}
		lostWhere(&r)
		return r
	}
	got = aggregate([]Result{split(50, 10000, 0), split(0, 0, 0), split(20, 0, 2500)})
	if *got.LossPct != 20 || *got.SenderDevPct != 0 || *got.ReceiverSocketPct != 0 {
		t.Errorf("split medians: loss %v, dev %v, sock %v", *got.LossPct, *got.SenderDevPct, *got.ReceiverSocketPct)
	}
	if one := split(20, 0, 2500); math.Abs(*one.ReceiverSocketPct-20) > 1e-9 || *one.SenderDevPct != 0 {
		t.Errorf("split of one run: %v/%v, want 0/20", *one.SenderDevPct, *one.ReceiverSocketPct)
	}
	runs := []VariantResult{
		{Variant: Variant{Name: "s"}, Results: []Result{mk(1, 1, 1)}, Leak: "ok"},
		{Variant: Variant{Name: "s"}, Results: []Result{mk(2, 1, 1)}, Leak: "3 buffers in use", Skipped: map[Mode]string{UDPGSO: "no offload"}},
	}
	vr := aggregateVariant(runs, []Mode{UDP, UDPGSO})
	if len(vr.Results) != 1 || vr.Results[0].Gbps != 1.5 || vr.Leak != "run 2: 3 buffers in use" || vr.Skipped[UDPGSO] != "no offload" {
		t.Errorf("aggregateVariant: %+v", vr)
	}
	if vr := aggregateVariant(runs[:1], []Mode{UDP}); vr.Leak != "ok" {
		t.Errorf("one run: leak %q", vr.Leak)
	}
}

// lossModel is a datapath that loses nothing up to capacity bit/s and
// everything above it at the receiving socket; its sender tops out at top.
type lossModel struct {
	capacity, top float64
	rates         []float64
}

func (m *lossModel) trial(_ context.Context, rate float64) (pdrTrial, error) {
	m.rates = append(m.rates, rate)
	offered := rate
	if rate == 0 || rate > m.top {
		offered = m.top
	}
	const payload = 1472 * 8
	sent := uint64(offered / payload)
	got := uint64(min(offered, m.capacity) / payload)
	t := pdrTrial{Offered: rate, Sent: offered, Received: float64(got) * payload, Lost: sent - got, SockDrops: sent - got}
	t.LossPct = 100 * float64(t.Lost) / float64(max(sent, 1))
	return t, nil
}

func TestPDRSearch(t *testing.T) {
	for _, c := range []struct {
		name            string
		capacity, top   float64
		steps           int
		wantTrials      int
		wantMin, wantMx float64 // bounds on the rate found
		senderLimited   bool
	}{
		{"receiver-limited", 3e9, 8e9, 7, 7, 3e9 - 8e9/64, 3e9 / (1 - PDRLossPct/100), false},
		{"sender-limited", 9e9, 4e9, 7, 1, 4e9, 4e9, true},
		{"two steps", 3e9, 8e9, 2, 2, 0, 0, false},                                        // 4e9 fails: nothing passed
		{"tight", 7.9e9, 8e9, 8, 8, 7.9e9 - 8e9/128, 7.9e9 / (1 - PDRLossPct/100), false}, // 0.5% loss passes
	} {
		m := &lossModel{capacity: c.capacity, top: c.top}
		out, err := pdrSearch(context.Background(), c.steps, m.trial)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(out.trials) != c.wantTrials || len(m.rates) != c.wantTrials || m.rates[0] != 0 {
			t.Errorf("%s: %d trials at %v, want %d starting at no limit", c.name, len(out.trials), m.rates, c.wantTrials)
		}
		got := 0.0
		if out.best != nil {
			got = out.best.offered()
			if !out.best.pass() {
				t.Errorf("%s: best trial failed: %+v", c.name, out.best)
			}
		}
		if got < c.wantMin || got > c.wantMx {
			t.Errorf("%s: rate %g, want in [%g, %g]", c.name, got, c.wantMin, c.wantMx)
		}
		limit := pdrLimit(out)
		if c.senderLimited != strings.HasPrefix(limit, "the sender") || (!c.senderLimited && !strings.Contains(limit, "receiving socket")) {
			t.Errorf("%s: limit %q", c.name, limit)
		}
		if out.fail != nil && out.best != nil && out.fail.offered() <= out.best.offered() {
			t.Errorf("%s: failing rate %g not above the passing %g", c.name, out.fail.offered(), out.best.offered())
		}
	}
	// A failing trial stops the search with its error.
	boom := errors.New("iperf3 died")
	n := 0
	_, err := pdrSearch(context.Background(), 7, func(context.Context, float64) (pdrTrial, error) {
		if n++; n == 3 {
			return pdrTrial{}, boom
		}
		return pdrTrial{Sent: 1e9, LossPct: 50}, nil
	})
	if !errors.Is(err, boom) || n != 3 {
		t.Errorf("error %v after %d trials", err, n)
	}
}

func TestPDRLimit(t *testing.T) {
	f := pdrTrial{Offered: 2e9, LossPct: 4, Lost: 100, DevDrops: 70, SockDrops: 20, PathDrops: 10}
	if l := pdrLimit(pdrOutcome{fail: &f}); !strings.Contains(l, "sending guest's device") || !strings.Contains(l, "70%") || !strings.Contains(l, "2.00 Gbit/s") {
		t.Errorf("limit %q", l)
	}
	f = pdrTrial{Offered: 2e9, LossPct: 4, Lost: 100, PathDrops: 90}
	if l := pdrLimit(pdrOutcome{fail: &f}); !strings.Contains(l, "datapath's own drops") {
		t.Errorf("limit %q", l)
	}
	f = pdrTrial{Offered: 2e9, LossPct: 4, Lost: 100}
	if l := pdrLimit(pdrOutcome{fail: &f}); !strings.Contains(l, "not counted") {
		t.Errorf("limit %q", l)
	}
}

const sockperfSample = "sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m\n" +
	"sockperf: [Total Run] RunTime=1.000 sec; Warm up time=400 msec; SentMessages=8459; ReceivedMessages=8458\n" +
	"sockperf: \x1b[2;35m====> avg-latency=90.954 (std-dev=95.889)\x1b[0m\n" +
	"sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0\n" +
	"sockperf: Summary: Latency is 90.954 usec\n" +
	"sockperf: \x1b[2;35mTotal 3023 observations\x1b[0m; each percentile contains 30.23 observations\n" +
	"sockperf: ---> <MAX> observation = 3037.388\n" +
	"sockperf: ---> percentile 99.999 = 3037.388\n" +
	"sockperf: ---> percentile 99.000 =  391.783\n" +
	"sockperf: ---> percentile 90.000 =  216.231\n" +
	"sockperf: ---> percentile 50.000 =   57.972\n" +
	"sockperf: ---> <MIN> observation =   11.526\n"

func TestParseSockperf(t *testing.T) {
	st, err := parseSockperf([]byte(sockperfSample))
	if err != nil || st.p50 != 57.972 || st.p99 != 391.783 || st.avg != 90.954 || st.observations != 3023 {
		t.Fatalf("%+v, %v", st, err)
	}
	for _, bad := range []string{
		"", "sockperf: ERROR: Message received was larger than expected\n",
		strings.ReplaceAll(sockperfSample, "percentile 50.000", "percentile 51.000"),
		strings.ReplaceAll(sockperfSample, "Total 3023", "Total 0"),
	} {
		if _, err := parseSockperf([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestSocketBound(t *testing.T) {
	udp := "  sl  local_address rem_address   st tx_queue rx_queue\n" +
		"  12: 010212C6:1451 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0\n"
	tcp := "  sl  local_address rem_address   st\n" +
		"   0: 010212C6:1451 00000000:0000 0A 00000000:00000000\n" +
		"   1: 010212C6:1452 010112C6:9C40 01 00000000:00000000\n"
	if !socketBound([]byte(udp), false, transferPort) || socketBound([]byte(udp), false, latencyPort) {
		t.Error("udp table")
	}
	if !socketBound([]byte(tcp), true, transferPort) || socketBound([]byte(tcp), true, latencyPort) {
		t.Error("tcp table: only a listening socket counts")
	}
}

func TestIperf3Args(t *testing.T) {
	d := 5 * time.Second
	join := func(tr transfer) string { return strings.Join(iperf3Args(tr, "198.18.2.1", "5201"), " ") }
	for _, c := range []struct {
		tr   transfer
		want string
	}{
		{newTransfer(UDP, d, false), "-c 198.18.2.1 -p 5201 -t 5 --json -u -b 0 -l 1472"},
		{newTransfer(UDP64, d, false), "-c 198.18.2.1 -p 5201 -t 5 --json -u -b 0 -l 64"},
		{newTransfer(TCP, d, false), "-c 198.18.2.1 -p 5201 -t 5 --json"},
		{newTransfer(TCP4, d, false), "-c 198.18.2.1 -p 5201 -t 5 --json -P 4"},
		{transfer{mode: PDR, d: 2 * time.Second, payload: 1452, rate: 1.5e9, rcvbuf: pdrRcvBuf}, "-c 198.18.2.1 -p 5201 -t 2 --json -u -b 1500000000 -l 1452 -w 4194304"},
	} {
		if got := join(c.tr); got != c.want {
			t.Errorf("%s: %q, want %q", c.tr.mode, got, c.want)
		}
	}
	if tr := newTransfer(UDPGSO, d, true); !tr.gso || tr.payload != UDPPayload6 || gsoSegments(tr.payload) != 44 || gsoSegments(UDPPayload) != 44 || gsoSegments(64) != 64 {
		t.Errorf("udp-gso transfer %+v, %d segments", tr, gsoSegments(tr.payload))
	}
}
