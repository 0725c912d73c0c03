package lab

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"softnet.dev/drop"
)

// sampleReport is a report as a --ladder run with peers produces it, with
// made-up figures.
func sampleReport() *Report {
	o := Options{Duration: 10 * time.Second, Modes: []Mode{UDP, TCP}, Peers: true, Ladder: true}
	r := &Report{Options: o, Traffic: "iperf3 3.12"}
	for i, v := range Variants(o) {
		vr := VariantResult{Variant: v}
		for _, m := range o.Modes {
			res := Result{Mode: m, Variant: v.Name, Gbps: float64(i+1) * 0.5, PPS: 400e3, Duration: 10}
			if m == UDP {
				res.LossPct = ptr(1.5)
			} else {
				res.Retransmits = ptr(int64(12))
			}
			res.SenderDevDrops, res.ReceiverSocketDrops = ptr(uint64(1000)), ptr(uint64(2000))
			if m == UDP {
				lostWhere(&res)
			}
			if v.InProcess() {
				res.CPUPerGbit, res.AllocsPerPacket, res.PeakRSS = ptr(0.2), ptr(0.0), ptr(int64(40<<20))
				res.Forwarded = ptr(uint64(4e6))
			}
			if v.Softnet() {
				var d drop.Counts
				d[drop.NoMem], d[drop.FullRing] = 3, 7
				res.Drops, res.HitRate, res.RemoteFrees = &d, ptr(0.995), ptr(uint64(42))
				res.NoMemStalls = ptr(uint64(5))
				res.WorkerCPUPerGbit, res.PoolBytes = ptr(0.15), ptr(int64(44<<20))
				vr.Leak = "ok"
			}
			vr.Results = append(vr.Results, res)
		}
		r.Variants = append(r.Variants, vr)
	}
	r.setRatios()
	return r
}

func TestRatiosAndGoals(t *testing.T) {
	r := sampleReport()
	if got := r.result("napi-cache", UDP); got.RatioTo != KernelVeth || got.Ratio != 5 {
		t.Fatalf("napi-cache ratio %v to %q, want 5 to kernel-veth", got.Ratio, got.RatioTo)
	}
	goals := r.Goals()
	byName := map[string]Goal{}
	for _, g := range goals {
		byName[string(g.Mode)+" "+g.Goal] = g
	}
	// offload-on is variant 10 of 10: 5 Gbit/s against kernel-veth's 0.5 and
	// wireguard-go's 1.
	for name, want := range map[string]bool{
		"udp offload-on >= 0.60x kernel-veth":      true,
		"udp offload-on loss < 5%":                 true,
		"tcp offload-on >= 0.80x kernel-veth":      true,
		"udp offload-on >= 3.00x wireguard-go":     true,
		"tcp offload-on allocs/packet < 0.001":     true,
		"tcp offload-on peak RSS <= pool + 32 MiB": true,
		"udp offload-on peak RSS <= pool + 32 MiB": true,
		"udp offload-on allocs/packet < 0.001":     true,
		"tcp offload-on >= 1.50x wireguard-go":     true,
		"tcp offload-on CPU per Gbit <= 0.035 s":   false, // 0.2
	} {
		g, ok := byName[name]
		if !ok || g.Met != want {
			t.Errorf("goal %q: %+v (present %v)", name, g, ok)
		}
	}
	if len(goals) != 10 || len(Missed(goals)) != 1 {
		t.Errorf("%d goals, missed %v", len(goals), Missed(goals))
	}
	r.result(OffloadOn, TCP).CPUPerGbit = ptr(0.03)
	r.result(OffloadOn, UDP).LossPct = ptr(12.0)
	if m := Missed(r.Goals()); len(m) != 1 || !strings.Contains(m[0], "loss") {
		t.Errorf("missed %v, want the loss goal", m)
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"udp: 1472-byte datagrams", "tcp: one stream", "kernel-veth", "no-cache/batch-1", "+defer", "offload-off",
		"4.00x", "1.5%", "FULL_RING=7 NOMEM=3 (5 nomem stalls)", "99.5%", "40/44", "ratio to kernel-veth",
		"leak check: ok for every softnet variant (10)", "+gro", "9 of 10 goals met", "CPU s/Gbit:",
		"variants\n  kernel-veth       veth pair",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// The kernel's path has no in-process figures.
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "kernel-veth ") && strings.Contains(line, "1.00x") && !strings.Contains(line, "-  ") {
			t.Errorf("kernel-veth row shows process figures: %q", line)
		}
	}
}

// jsonFields are the fields every result line carries.
var jsonFields = []string{
	"experiment", "variant", "metric", "value", "unit", "ratio",
	"pps", "loss_pct", "retransmits", "cpu_s_per_gbit", "allocs_per_packet", "peak_rss_bytes",
	"drops", "hit_rate", "remote_frees", "duration_s",
}

// checkJSONLines parses r's JSON lines and returns the result lines by
// experiment and variant.
func checkJSONLines(t *testing.T, r io.Reader) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var obj map[string]any
		if err := json.Unmarshal(sc.Bytes(), &obj); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if _, isGoal := obj["goal"]; isGoal {
			if _, ok := obj["met"].(bool); !ok {
				t.Fatalf("goal line without met: %q", sc.Text())
			}
			continue
		}
		for _, k := range jsonFields {
			if _, ok := obj[k]; !ok {
				t.Fatalf("line %q lacks %q", sc.Text(), k)
			}
		}
		if obj["metric"] != "gbit_per_s" || obj["unit"] != "Gbit/s" {
			t.Fatalf("line %q: metric/unit", sc.Text())
		}
		out[obj["experiment"].(string)+" "+obj["variant"].(string)] = obj
	}
	return out
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	lines := checkJSONLines(t, &b)
	if want := 2 * len(sampleReport().Variants); len(lines) != want {
		t.Fatalf("%d result lines, want %d", len(lines), want)
	}
	veth, sn := lines["lab-udp kernel-veth"], lines["lab-tcp +bulk"]
	if veth == nil || sn == nil {
		t.Fatalf("missing lines: %v", lines)
	}
	if veth["allocs_per_packet"] != nil || veth["drops"] != nil || veth["leak_check"] != nil || veth["loss_pct"] != 1.5 {
		t.Errorf("kernel-veth line: %v", veth)
	}
	drops, _ := sn["drops"].(map[string]any)
	if drops["NOMEM"] != 3.0 || sn["nomem_stalls"] != 5.0 || sn["leak_check"] != "ok" || sn["retransmits"] != 12.0 || sn["loss_pct"] != nil || sn["ratio"] != 6.0 {
		t.Errorf("+bulk tcp line: %v", sn)
	}
}

func TestWriteSVG(t *testing.T) {
	var b bytes.Buffer
	if err := WriteSVG(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	rects, texts := parseSVG(t, b.Bytes())
	// One bar per variant and mode, plus the background and the legend.
	if want := 2*len(sampleReport().Variants) + 1 + 2; rects != want {
		t.Errorf("%d rects, want %d", rects, want)
	}
	for _, want := range []string{"Gbit/s received", "kernel-veth", "no-cache/batch-1", "4.00", "UDP", "TCP", "2.00x / 2.00x"} {
		if !strings.Contains(texts, want) {
			t.Errorf("no text %q in the chart", want)
		}
	}
}

// parseSVG checks that b is well-formed XML with an <svg> root and returns
// the number of <rect> elements and all text content.
func parseSVG(t *testing.T, b []byte) (rects int, text string) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var sb strings.Builder
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not parse: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = e.Name.Local
			}
			if e.Name.Local == "rect" {
				rects++
			}
		case xml.CharData:
			sb.Write(e)
			sb.WriteByte('\n')
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q", root)
	}
	return rects, sb.String()
}

func TestSVGEscapesAndEmpty(t *testing.T) {
	r := &Report{Options: Options{Duration: time.Second, Modes: []Mode{UDP}}, Traffic: `<iperf3 & "x">`}
	var b bytes.Buffer
	if err := WriteSVG(&b, r); err != nil {
		t.Fatal(err)
	}
	if _, text := parseSVG(t, b.Bytes()); !strings.Contains(text, `<iperf3 & "x">`) {
		t.Errorf("escaped text lost: %s", text)
	}
}

func TestNiceAxis(t *testing.T) {
	for _, c := range []struct{ top, step, max float64 }{
		{16.7, 5, 20}, {4.66, 1, 5}, {0.96, 0.2, 1.2}, {0, 1, 1}, {100, 20, 120},
	} {
		step, m := niceAxis(c.top)
		if diff := step - c.step; diff > 1e-9 || diff < -1e-9 || m < c.top || m-c.max > 1e-9 || c.max-m > 1e-9 {
			t.Errorf("niceAxis(%v) = %v, %v; want %v, %v", c.top, step, m, c.step, c.max)
		}
	}
}

func TestCheckPlotName(t *testing.T) {
	if err := CheckPlotName("out/Ladder.SVG"); err != nil {
		t.Error(err)
	}
	if err := CheckPlotName("ladder.png"); err == nil || !strings.Contains(err.Error(), "PNG is not supported") {
		t.Errorf("png: %v", err)
	}
	if err := CheckPlotName("ladder"); err == nil {
		t.Error("no extension: no error")
	}
}
