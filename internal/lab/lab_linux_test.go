package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"softnet.dev/internal/dpdk"
	"softnet.dev/internal/netnstest"
	"softnet.dev/tun"
)

// requireLab skips (or, with SOFTNET_REQUIRE_ROOT_TESTS=1, fails) unless
// the lab can run here with iperf3: CI installs it, so the iperf3 path is
// the one tested.
func requireLab(t *testing.T) {
	t.Helper()
	netnstest.RequireRoot(t)
	netnstest.RequireTools(t, "iperf3")
}

// TestLabLadder is a short `softnet lab --ladder` with the peers: every
// variant must produce a figure for both modes, the output must be well
// formed, every softnet pool must balance, and nothing may be left behind.
func TestLabLadder(t *testing.T) {
	requireLab(t)
	start := time.Now()
	rep, err := Run(context.Background(), Options{
		Duration: 2 * time.Second, Peers: true, Ladder: true, Traffic: TrafficIperf3, Modes: []Mode{UDP, TCP},
		Progress: func(msg string) { t.Log(msg) },
	})
	t.Logf("run took %v", time.Since(start))
	checkNothingLeft(t, rep)
	if err != nil {
		t.Fatal(err)
	}
	want := Variants(rep.Options)
	if len(rep.Variants) != len(want) || len(want) != 13 {
		t.Fatalf("%d variants measured, want %d", len(rep.Variants), len(want))
	}
	for i, vr := range rep.Variants {
		if vr.Variant.Name != want[i].Name {
			t.Errorf("variant %d is %s, want %s", i, vr.Variant.Name, want[i].Name)
		}
		for _, m := range rep.Options.Modes {
			res := vr.result(m)
			if res == nil || !(res.Gbps > 0) || !(res.PPS > 0) || res.Ratio <= 0 {
				t.Errorf("%s %s: no figure: %+v", vr.Variant.Name, m, res)
				continue
			}
			if vr.Variant.InProcess() && (res.CPUPerGbit == nil || res.AllocsPerPacket == nil || res.PeakRSS == nil) {
				t.Errorf("%s %s: in-process figures missing: %+v", vr.Variant.Name, m, res)
			}
			if vr.Variant.Softnet() && (res.Drops == nil || res.HitRate == nil || res.WorkerCPUPerGbit == nil) {
				t.Errorf("%s %s: softnet figures missing: %+v", vr.Variant.Name, m, res)
			}
		}
		if vr.Variant.Softnet() && vr.Leak != "ok" {
			t.Errorf("%s: leak check: %q", vr.Variant.Name, vr.Leak)
		}
	}

	var js bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	lines := checkJSONLines(t, &js)
	if len(lines) != 2*len(want) {
		t.Errorf("%d JSON result lines, want %d", len(lines), 2*len(want))
	}
	for key, obj := range lines {
		if v, _ := obj["value"].(float64); !(v > 0) {
			t.Errorf("%s: value %v", key, obj["value"])
		}
	}

	plot := filepath.Join(t.TempDir(), "ladder.svg")
	f, err := os.Create(plot)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteSVG(f, rep); err != nil {
		t.Fatal(err)
	}
	f.Close()
	svg, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	if rects, _ := parseSVG(t, svg); rects != 2*len(want)+3 {
		t.Errorf("%d rects in the chart, want %d", rects, 2*len(want)+3)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
}

// TestLabInterrupted cancels a run in the middle of a transfer, as Ctrl-C
// does: it must stop promptly, say so, and remove everything.
func TestLabInterrupted(t *testing.T) {
	requireLab(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		time.Sleep(2500 * time.Millisecond)
		cancel()
	}()
	rep, err := Run(ctx, Options{Duration: 30 * time.Second, Modes: []Mode{UDP}, Traffic: TrafficIperf3})
	stopped := time.Now()
	checkNothingLeft(t, rep)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	if took := time.Since(stopped); took > time.Second {
		t.Errorf("checking took %v", took)
	}
	if len(rep.Variants) != 1 || rep.Variants[0].Leak != "ok" {
		t.Fatalf("variants %+v, want softnet's with a balanced leak check", rep.Variants)
	}
}

// checkNothingLeft fails the test if anything the run created is still
// there: its namespaces, devices in this namespace, iperf3 processes this
// process started.
func checkNothingLeft(t *testing.T, rep *Report) {
	t.Helper()
	if rep == nil {
		t.Fatal("no report")
	}
	list, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("softnet-lab-%d-", os.Getpid())
	for _, line := range strings.Split(string(list), "\n") {
		if strings.HasPrefix(line, prefix) {
			t.Errorf("namespace left behind: %s", line)
		}
	}
	if len(rep.Namespaces) == 0 {
		t.Error("the report names no namespaces")
	}
	links, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{"lab-a", "lab-b"} {
		if bytes.Contains(links, []byte(": "+dev+":")) || bytes.Contains(links, []byte(": "+dev+"@")) {
			t.Errorf("device %s left in the test's namespace", dev)
		}
	}
	for _, p := range children(t) {
		t.Errorf("process left running: %s", p)
	}
}

// childNames are the names (comm, at most 15 bytes) of the programs the
// lab runs.
var childNames = []string{"iperf3", "ip", "sockperf", "taskset", "softnet", "dpdk-testpmd", "stdbuf",
	"ovsdb-server", "ovsdb-tool", "ovs-vsctl", "ovs-appctl", "ovs-vswitchd", "ovs-vswitchd-dp"}

// children lists this process's child processes that run iperf3, ip,
// sockperf, testpmd, Open vSwitch or a softnet switch.
func children(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, c := range childProcs() {
		if slices.Contains(childNames, c.comm) {
			out = append(out, fmt.Sprintf("%d (%s, state %s)", c.pid, c.comm, c.state))
		}
	}
	return out
}

// childPIDs returns the PIDs of this process's children named one of
// names.
func childPIDs(names ...string) []int {
	var pids []int
	for _, c := range childProcs() {
		if slices.Contains(names, c.comm) {
			pids = append(pids, c.pid)
		}
	}
	return pids
}

type childProc struct {
	pid         int
	comm, state string
}

// childProcs lists this process's child processes.
func childProcs() []childProc {
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []childProc
	me := os.Getpid()
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue // exited meanwhile
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 2 {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(s[:open]))
		if ppid, _ := strconv.Atoi(f[1]); ppid == me {
			out = append(out, childProc{pid: pid, comm: s[open+1 : end], state: f[0]})
		}
	}
	return out
}

// TestLabNewModes runs the modes beyond udp and tcp through softnet's
// default configuration, twice (interleaved runs, medians): 64-byte
// datagrams with the CPU per datagram, UDP_SEGMENT sends that the
// guest's device hands the switch as GSO packets, four TCP streams,
// TCP latency when sockperf is there, and a short PDR search.
func TestLabNewModes(t *testing.T) {
	requireLab(t)
	// latency-tcp after tcp4: its server must bind while tcp4's
	// connections are in TIME_WAIT.
	modes := []Mode{UDP64, UDPGSO, TCP4, LatencyTCP, PDR}
	missing, err := netnstest.MissingTools("sockperf", "taskset")
	if err != nil {
		t.Fatal(err)
	}
	if missing != "" {
		if os.Getenv(netnstest.RequireEnv) == "1" {
			t.Fatalf("latency mode %s, and %s=1", missing, netnstest.RequireEnv)
		}
		t.Logf("no latency mode: it %s", missing)
		modes = slices.DeleteFunc(modes, func(m Mode) bool { return m == LatencyTCP })
	}
	start := time.Now()
	rep, err := Run(context.Background(), Options{
		Duration: time.Second, Modes: modes, Runs: 2, PDRSteps: 3, PDRTrial: time.Second, Traffic: TrafficIperf3,
		Progress: func(msg string) { t.Log(msg) },
	})
	t.Logf("run took %v", time.Since(start))
	checkNothingLeft(t, rep)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Variants) != 1 || rep.Variants[0].Leak != "ok" {
		t.Fatalf("variants %+v, want softnet's with a balanced leak check", rep.Variants)
	}
	vr := rep.Variants[0]
	for _, m := range modes {
		res := vr.result(m)
		if res == nil {
			t.Errorf("%s: no result (skipped: %q)", m, vr.Skipped[m])
			continue
		}
		// A short search on a loaded machine (the race detector) may find
		// no rate without loss: a PDR of 0 is an answer, checked below.
		if res.Runs != 2 || len(res.Samples) != 2 || res.main() < 0 || res.main() == 0 && m != PDR {
			t.Errorf("%s: runs %d, samples %v, main figure %v", m, res.Runs, res.Samples, res.main())
		}
	}
	if res := vr.result(UDP64); res != nil && (res.PPS <= 0 || res.CPUPerPacketUS == nil || res.ForwardedPPS == nil || *res.ForwardedPPS < res.PPS) {
		t.Errorf("udp64: %+v", res)
	}
	// The guest's device hands the switch whole UDP_SEGMENT sends (USO):
	// tens of KiB a packet, where a datagram is 1500 bytes.
	if res := vr.result(UDPGSO); res != nil && (res.RxBytesPerPacket == nil || *res.RxBytesPerPacket < 16<<10 || res.PPS <= 0) {
		t.Errorf("udp-gso: %v bytes per packet received by the switch, want GSO packets: %+v", res.RxBytesPerPacket, res)
	}
	if res := vr.result(LatencyTCP); res != nil && (res.LatencyP50US == nil || res.LatencyP99US == nil || *res.LatencyP99US < *res.LatencyP50US) {
		t.Errorf("latency-tcp: %+v", res)
	}
	if res := vr.result(PDR); res != nil && (res.PDR == nil || res.PDR.Trials < 1 || res.PDR.Trials > 3 || res.PDR.Limit == "") {
		t.Errorf("pdr: %+v", res)
	}
	var table, js bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"udp-gso: 1472-byte datagrams sent 44 per send", "tcp4: 4 parallel streams", "PDR Gbit/s", "2 runs, interleaved"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
	t.Logf("\n%s", table.String())
}

// TestLabPorts is a short `softnet lab --ports 8`, on TUN ports with the
// default I/O path and one worker and on TAP ports with io=syscall and two
// workers: every figure filled, every port reachable over IPv4 and IPv6,
// both switches' pools balanced, the report well formed, nothing left.
func TestLabPorts(t *testing.T) {
	requireLab(t)
	for _, c := range []struct {
		tap     bool
		io      tun.IO
		workers int
	}{{false, tun.IOAuto, 1}, {true, tun.IOSyscall, 2}} {
		t.Run(fmt.Sprintf("tap=%v/io=%v/workers=%d", c.tap, c.io, c.workers), func(t *testing.T) {
			const ports, churn = 8, 5
			rep, err := Run(context.Background(), Options{
				Ports: ports, TAP: c.tap, IO: c.io, Workers: c.workers, PortsIdle: time.Second, PortsChurn: churn,
				Duration: 2 * time.Second, Traffic: TrafficIperf3, Progress: func(msg string) { t.Log(msg) },
			})
			checkNothingLeft(t, rep)
			if err != nil {
				t.Fatal(err)
			}
			p := rep.Ports
			if p == nil {
				t.Fatal("no ports result")
			}
			if len(rep.Namespaces) != ports+1 {
				t.Errorf("%d namespaces, want %d", len(rep.Namespaces), ports+1)
			}
			if p.Reach4 != ports || p.Reach6 != ports || len(p.Unreachable) > 0 {
				t.Errorf("reachable %d (v4) and %d (v6) of %d; unreachable %v", p.Reach4, p.Reach6, ports, p.Unreachable)
			}
			if p.AtStart+p.Live != ports || p.Live == 0 {
				t.Errorf("%d ports at start and %d live, want %d in all, some live", p.AtStart, p.Live, ports)
			}
			if c.io == tun.IOSyscall && p.IO != "syscall" || p.IO != "syscall" && p.IO != "uring" {
				t.Errorf("io %q, asked for %v", p.IO, c.io)
			}
			if p.RSS <= 0 || p.PeakRSS < p.RSS || p.PoolBytes <= 0 {
				t.Errorf("memory: RSS %d, peak %d, pool %d", p.RSS, p.PeakRSS, p.PoolBytes)
			}
			if p.IdleSeconds < 1 || p.IdleCPUPct < 0 {
				t.Errorf("idle: %.2f%% over %.2f s", p.IdleCPUPct, p.IdleSeconds)
			}
			if p.Churn != churn || !(p.AddP50MS > 0) || p.AddP99MS < p.AddP50MS || p.AddMax < p.AddP99MS {
				t.Errorf("port add: %d adds, p50 %v, p99 %v, max %v", p.Churn, p.AddP50MS, p.AddP99MS, p.AddMax)
			}
			if p.PingSent == 0 || p.PingReceived > p.PingSent {
				t.Errorf("ping during the adds: %d of %d answered", p.PingReceived, p.PingSent)
			}
			if len(p.Throughput) != len(portsModes) {
				t.Fatalf("throughput %+v", p.Throughput)
			}
			for _, tp := range p.Throughput {
				if len(tp.Alone) != 1 || len(tp.Crowded) != 1 || !(tp.Alone[0] > 0) || !(tp.Crowded[0] > 0) || !(tp.Ratio > 0) {
					t.Errorf("%s: alone %v, crowded %v, ratio %v", tp.Mode, tp.Alone, tp.Crowded, tp.Ratio)
				}
			}
			if p.Leak != "ok" || len(p.AloneLeaks) > 0 {
				t.Errorf("leak checks: %q, alone %v", p.Leak, p.AloneLeaks)
			}
			if g := rep.Goals(); len(g) != 5+len(portsModes) {
				t.Errorf("%d goals, want %d: %+v", len(g), 5+len(portsModes), g)
			}

			var table bytes.Buffer
			if err := WriteTable(&table, rep); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("%d of %d reachable (v4), %d of %d (v6)", ports, ports, ports, ports)
			if !strings.Contains(table.String(), want) {
				t.Errorf("table lacks %q", want)
			}
			t.Logf("\n%s", table.String())
			var js bytes.Buffer
			if err := WriteJSON(&js, rep); err != nil {
				t.Fatal(err)
			}
			experiments := map[string]bool{}
			goals := 0
			for _, line := range strings.Split(strings.TrimSpace(js.String()), "\n") {
				var obj map[string]any
				if err := json.Unmarshal([]byte(line), &obj); err != nil {
					t.Fatalf("JSON line %q: %v", line, err)
				}
				if _, ok := obj["goal"]; ok {
					goals++
					continue
				}
				experiments[obj["experiment"].(string)] = true
				if obj["ports"] != float64(ports) || obj["leak_check"] != "ok" {
					t.Errorf("JSON line %q: ports or leak check", line)
				}
			}
			for _, e := range []string{"reach", "rss", "idle-cpu", "add", "udp", "tcp"} {
				if !experiments["lab-ports-"+e] {
					t.Errorf("no lab-ports-%s line in %s", e, js.String())
				}
			}
			if goals != 5+len(portsModes) {
				t.Errorf("%d goal lines, want %d", goals, 5+len(portsModes))
			}
		})
	}
}

// TestLabPortsInterrupted cancels a --ports run while it measures idle
// CPU, as Ctrl-C does: it stops promptly, reports what it measured and
// removes every namespace.
func TestLabPortsInterrupted(t *testing.T) {
	requireLab(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	idle := make(chan struct{})
	var once sync.Once
	rep, err := Run(ctx, Options{
		Ports: MinPorts, PortsIdle: time.Minute, Traffic: TrafficIperf3,
		Progress: func(msg string) {
			t.Log(msg)
			if strings.HasPrefix(msg, "idle for") {
				once.Do(func() { close(idle); cancel() })
			}
		},
	})
	checkNothingLeft(t, rep)
	select {
	case <-idle:
	default:
		t.Fatalf("the run never got to idle: %v", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	if p := rep.Ports; p == nil || p.Reach4 != MinPorts || p.Leak != "ok" {
		t.Fatalf("ports result %+v, want the pings' figures and a balanced leak check", p)
	}
}

// buildSoftnet builds the softnet binary, which the overlay's hosts run
// as their switch processes, into the test's directory.
func buildSoftnet(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "softnet")
	if out, err := exec.Command("go", "build", "-o", bin, "softnet.dev/cmd/softnet").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// TestLabOverlay is a short `softnet lab --overlay --overlay-mode both`
// over an IPv4 underlay, and the routed kind over an IPv6 one: every
// configuration moved traffic in every mode, the softnet hosts' costs
// are there and the kernel's are not, the switch processes' pools
// balanced, the report is well formed, and nothing is left.
func TestLabOverlay(t *testing.T) {
	requireLab(t)
	netnstest.RequireTools(t, "sysctl") // the kernel's hosts forward, as Flannel's nodes
	bin := buildSoftnet(t)
	for _, c := range []struct {
		kinds        []OverlayKind
		underlayIPv6 bool
		mtu          int
	}{{[]OverlayKind{OverlayL2, OverlayL3}, false, 1450}, {[]OverlayKind{OverlayL3}, true, 1430}} {
		t.Run(fmt.Sprintf("%v/underlay-ipv6=%v", c.kinds, c.underlayIPv6), func(t *testing.T) {
			modes := []Mode{UDP, TCP}
			rep, err := Run(context.Background(), Options{
				Overlay: c.kinds, UnderlayIPv6: c.underlayIPv6, SoftnetBinary: bin, Duration: time.Second, Modes: modes,
				Traffic: TrafficIperf3, Progress: func(msg string) { t.Log(msg) },
			})
			checkNothingLeft(t, rep)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Overlay) != len(c.kinds) || len(rep.Namespaces) != 4*3*len(c.kinds) {
				t.Fatalf("%d kinds measured, %d namespaces: want %d and %d", len(rep.Overlay), len(rep.Namespaces), len(c.kinds), 4*3*len(c.kinds))
			}
			for i, or := range rep.Overlay {
				if or.Kind != c.kinds[i] || or.InnerMTU != c.mtu || len(or.Configs) != len(overlayConfigs) {
					t.Fatalf("overlay %+v", or)
				}
				for j, cfg := range or.Configs {
					name := cfg.Variant.Name
					if name != overlayConfigs[j].name {
						t.Errorf("configuration %d is %s, want %s", j, name, overlayConfigs[j].name)
					}
					softnet := name != OverlayKernel
					if leak := cfg.Leak; softnet && leak != "ok" || !softnet && leak != "" {
						t.Errorf("%s %s: leak check %q", or.Kind, name, leak)
					}
					for _, m := range modes {
						res := cfg.result(m)
						if res == nil || !(res.Gbps > 0) || !(res.PPS > 0) || !(res.Ratio > 0) || res.RatioTo != OverlayKernel {
							t.Errorf("%s %s %s: no figure: %+v", or.Kind, name, m, res)
							continue
						}
						costs := res.SyscallsPerPacket != nil && res.AllocsPerPacket != nil && res.CPUPerGbit != nil && res.Forwarded != nil
						if costs != softnet || softnet && (*res.Forwarded == 0 || !(*res.SyscallsPerPacket > 0)) {
							t.Errorf("%s %s %s: softnet's costs (calls %v, allocs %v, CPU %v, datagrams %v), want them only with softnet",
								or.Kind, name, m, res.SyscallsPerPacket, res.AllocsPerPacket, res.CPUPerGbit, res.Forwarded)
						}
					}
				}
			}
			goals := rep.Goals()
			if want := 3 * len(modes) * len(c.kinds); len(goals) != want {
				t.Errorf("%d goals, want %d: %+v", len(goals), want, goals)
			}

			var table, js bytes.Buffer
			if err := WriteTable(&table, rep); err != nil {
				t.Fatal(err)
			}
			for _, k := range c.kinds {
				if want := fmt.Sprintf("%s overlay", k); !strings.Contains(table.String(), want) {
					t.Errorf("table lacks %q", want)
				}
			}
			for _, want := range []string{fmt.Sprintf("guests' MTU %d", c.mtu), "leak check: ok for every softnet switch process", "calls/dgram"} {
				if !strings.Contains(table.String(), want) {
					t.Errorf("table lacks %q", want)
				}
			}
			t.Logf("\n%s", table.String())
			if err := WriteJSON(&js, rep); err != nil {
				t.Fatal(err)
			}
			results, goalLines := 0, 0
			for _, line := range strings.Split(strings.TrimSpace(js.String()), "\n") {
				var obj map[string]any
				if err := json.Unmarshal([]byte(line), &obj); err != nil {
					t.Fatalf("JSON line %q: %v", line, err)
				}
				if _, ok := obj["goal"]; ok {
					goalLines++
					continue
				}
				results++
				exp, _ := obj["experiment"].(string)
				if !strings.HasPrefix(exp, "lab-overlay-l") || obj["guest_mtu"] != float64(c.mtu) || !(obj["value"].(float64) > 0) {
					t.Errorf("JSON line %q", line)
				}
			}
			if want := len(modes) * len(overlayConfigs) * len(c.kinds); results != want || goalLines != len(goals) {
				t.Errorf("%d result lines and %d goal lines, want %d and %d", results, goalLines, want, len(goals))
			}
		})
	}
}

// TestLabOverlayInterrupted cancels an overlay run in the middle of a
// transfer, as Ctrl-C does: it stops promptly, and the switch processes
// and every namespace are gone.
func TestLabOverlayInterrupted(t *testing.T) {
	requireLab(t)
	bin := buildSoftnet(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	rep, err := Run(ctx, Options{
		Overlay: []OverlayKind{OverlayL2}, SoftnetBinary: bin, Duration: 30 * time.Second, Modes: []Mode{TCP}, Traffic: TrafficIperf3,
		Progress: func(msg string) {
			t.Log(msg)
			if strings.HasSuffix(msg, "tcp for 30s") {
				once.Do(func() { time.AfterFunc(2*time.Second, cancel) })
			}
		},
	})
	checkNothingLeft(t, rep)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	if len(rep.Overlay) != 1 || len(rep.Overlay[0].Configs) != 1 || rep.Overlay[0].Configs[0].Leak != "ok" {
		t.Fatalf("overlay %+v, want softnet-softnet's with the switches' leak checks balanced", rep.Overlay)
	}
}

// TestLabVhost is the shortest `softnet lab --vhost`: each back-end moves
// frames at both sizes, softnet allocates nothing per packet to speak of
// and balances its pools, the TUN path has its figure, the report is well
// formed, and nothing is left behind (testpmd and Open vSwitch processes,
// hugepage mounts, DPDK runtime directories, sockets, run directories).
// Without Open vSwitch with DPDK (and where root tests are not required)
// the run skips that back-end, naming its package.
func TestLabVhost(t *testing.T) {
	requireLab(t)
	netnstest.RequireTools(t, "dpdk-testpmd")
	_, ovsErr := dpdk.FindOVS()
	if ovsErr != nil && os.Getenv(netnstest.RequireEnv) == "1" {
		t.Fatalf("%v, and %s=1", ovsErr, netnstest.RequireEnv)
	}
	rep, err := Run(context.Background(), Options{Vhost: true, Duration: time.Second, Traffic: TrafficIperf3,
		Progress: func(msg string) { t.Log(msg) }})
	checkNothingLeft(t, rep)
	checkNoDPDKLeft(t)
	if err != nil {
		t.Fatal(err)
	}
	v := rep.Vhost
	backends := VhostBackends
	if ovsErr != nil {
		backends = []string{VhostSoftnet, VhostDPDK}
		if len(v.Skipped) != 1 || !strings.Contains(v.Skipped[0], dpdk.OVSPackage) {
			t.Errorf("skipped %q, want %s named", v.Skipped, dpdk.OVSPackage)
		}
	}
	if v == nil || len(v.Runs) != len(backends)*len(vhostFrames) {
		t.Fatalf("vhost result %+v, want a run per back-end and frame size", v)
	}
	const version1 = 1 << 32
	for i, r := range v.Runs {
		if want := backends[i%len(backends)]; r.Backend != want || r.Frame != vhostFrames[i/len(backends)] {
			t.Errorf("run %d: %s at %d B, want %s", i, r.Backend, r.Frame, want)
		}
		if r.Packets == 0 || !(r.PPS > 0) || !(r.Gbps > 0) || r.Bytes < r.Packets*uint64(r.Frame) || !(r.CPUPerPacketNS > 0) ||
			r.WorkerCPUPerPacketNS == nil || !(*r.WorkerCPUPerPacketNS > 0) {
			t.Errorf("%s at %d B: %+v", r.Backend, r.Frame, r)
		}
		// Every back-end's forwarding thread is pinned to the back-end's
		// CPU, the front-end's lcore to its own, and the lab saw them there.
		if p := r.Placement; p == nil || p.Samples == 0 || len(p.Threads) != 2 || p.Threads[0].Allowed != strconv.Itoa(vhostBackendCPU) ||
			p.Threads[1].Allowed != strconv.Itoa(vhostFrontendCPU) || p.SameCPU != 0 {
			t.Errorf("%s at %d B: placement %+v", r.Backend, r.Frame, p)
		}
		switch r.Backend {
		case VhostSoftnet:
			if r.AllocsPerPacket == nil || *r.AllocsPerPacket > 0.01 || r.Drops == nil || r.Worker == nil {
				t.Errorf("softnet at %d B: allocs %v, drops %v, worker %v", r.Frame, r.AllocsPerPacket, r.Drops, r.Worker)
			}
			if r.Leak != "ok" || r.BadChains != 0 || r.Features&version1 == 0 {
				t.Errorf("softnet at %d B: leak %q, bad chains %d, features %#x", r.Frame, r.Leak, r.BadChains, r.Features)
			}
		case VhostOVS:
			checkPMD(t, r)
		}
	}
	if !(v.TUN64PPS > 0) || v.TUNLeak != "ok" {
		t.Errorf("TUN path: %v pps, leak %q", v.TUN64PPS, v.TUNLeak)
	}
	wantGoals := len(backends) + 1 // softnet against each peer, the TUN path, allocations
	if g := rep.Goals(); len(g) != wantGoals {
		t.Errorf("%d goals, want %d: %+v", len(g), wantGoals, g)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	want := []string{"64-byte frames", "1500-byte frames", "softnet's TUN path", "leak check: ok", "thread ns/packet"}
	for _, b := range backends {
		want = append(want, "  "+b+" ")
	}
	if ovsErr == nil {
		want = append(want, "Open vSwitch's PMD at 64 B", "Open vSwitch) ", "DPDK ")
	} else {
		want = append(want, "skipped: ovs-dpdk: ")
	}
	for _, w := range want {
		if !strings.Contains(table.String(), w) {
			t.Errorf("table lacks %q", w)
		}
	}
	t.Logf("\n%s", table.String())
	var js bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	results := map[string]int{}
	goals := 0
	for _, line := range strings.Split(strings.TrimSpace(js.String()), "\n") {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("JSON line %q: %v", line, err)
		}
		if _, ok := obj["goal"]; ok {
			goals++
			continue
		}
		results[obj["experiment"].(string)]++
		if !(obj["value"].(float64) > 0) {
			t.Errorf("JSON line without a figure: %s", line)
		}
		if obj["variant"] == VhostOVS && obj["ovs_pmd"] == nil {
			t.Errorf("JSON line without the PMD's counters: %s", line)
		}
	}
	if results["lab-vhost-64"] != len(backends) || results["lab-vhost-1500"] != len(backends) || goals != wantGoals {
		t.Errorf("JSON results %v and %d goals, want %d per frame size and %d:\n%s", results, goals, len(backends), wantGoals, js.String())
	}
}

// checkPMD checks what Open vSwitch's PMD counted over a window: the
// packets that went round, nearly all through its flow caches (the loop
// is two flows), in cycles it spent. (The PMD updates its counters one
// by one at the end of a loop, so a read may catch a batch's packets
// counted and its hits not yet.)
func checkPMD(t *testing.T, r VhostRun) {
	t.Helper()
	p := r.PMD
	if p == nil || p.Packets == 0 || p.ProcessingCycles == 0 || 2*(p.EMCHits+p.SMCHits+p.MegaflowHits) < p.Packets {
		t.Errorf("ovs-dpdk at %d B: PMD %+v", r.Frame, p)
	}
}

// TestLabVhostInterrupted cancels a --vhost run while frames go round
// through softnet, as Ctrl-C does: it stops promptly, and the front-end,
// the switch, the hugepages and DPDK's files are removed.
func TestLabVhostInterrupted(t *testing.T) {
	requireLab(t)
	netnstest.RequireTools(t, "dpdk-testpmd")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	rep, err := Run(ctx, Options{Vhost: true, VhostBackends: []string{VhostSoftnet, VhostDPDK}, Duration: 30 * time.Second, Traffic: TrafficIperf3,
		Progress: func(msg string) {
			t.Log(msg)
			if strings.HasPrefix(msg, VhostSoftnet+" back-end") {
				once.Do(func() { time.AfterFunc(3*time.Second, cancel) })
			}
		}})
	checkNoDPDKLeft(t)
	for _, p := range children(t) {
		t.Errorf("process left running: %s", p)
	}
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "leak") {
		t.Fatalf("Run returned %v, want context.Canceled and no leak", err)
	}
	if rep == nil || rep.Vhost == nil || len(rep.Vhost.Runs) != 0 {
		t.Fatalf("report %+v, want a vhost result without a run", rep)
	}
}

// requireOVS skips the test without Open vSwitch with DPDK, naming its
// package (or fails it where root tests are required).
func requireOVS(t *testing.T) {
	t.Helper()
	if _, err := dpdk.FindOVS(); err != nil {
		if os.Getenv(netnstest.RequireEnv) == "1" {
			t.Fatalf("%v, and %s=1", err, netnstest.RequireEnv)
		}
		t.Skip(err)
	}
}

// TestLabVhostOVSInterrupted cancels a --vhost run of Open vSwitch alone
// while frames go round through it, as Ctrl-C does: it stops promptly,
// and ovs-vswitchd, ovsdb-server, the front-end, their run directory and
// sockets, the hugepage mounts and DPDK's runtime directories are gone.
func TestLabVhostOVSInterrupted(t *testing.T) {
	requireLab(t)
	netnstest.RequireTools(t, "dpdk-testpmd")
	requireOVS(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	found := make(chan int, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	var once sync.Once
	rep, err := Run(ctx, Options{Vhost: true, VhostBackends: []string{VhostOVS}, Duration: 30 * time.Second,
		Progress: func(msg string) {
			t.Log(msg)
			if strings.HasPrefix(msg, VhostOVS+" back-end") {
				once.Do(func() {
					wg.Add(1)
					go func() {
						defer wg.Done()
						pid := whenOVSPolls(ctx)
						found <- pid
						if pid != 0 && sleepCtx(ctx, 2*time.Second) {
							t.Log("cancelling")
							cancel()
						}
					}()
				})
			}
		}})
	checkNoDPDKLeft(t)
	for _, p := range children(t) {
		t.Errorf("process left running: %s", p)
	}
	if pid := <-found; pid == 0 {
		t.Fatalf("ovs-vswitchd with a PMD thread and the front-end were not seen (Run returned %v)", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	if rep == nil || rep.Vhost == nil || len(rep.Vhost.Runs) != 0 {
		t.Fatalf("report %+v, want a vhost result without a run", rep)
	}
}

// TestLabVhostOVSFails kills ovs-vswitchd (by its PID: the lab started
// it) once it polls and the front-end runs, as a crash would: that
// configuration fails with an error that says so, and is taken down
// completely; the next one (1500-byte frames, a new Open vSwitch) is
// measured.
func TestLabVhostOVSFails(t *testing.T) {
	requireLab(t)
	netnstest.RequireTools(t, "dpdk-testpmd")
	requireOVS(t)
	ctx, cancel := context.WithCancel(context.Background())
	killed := make(chan int, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // the watcher's, if nothing was found
	var once sync.Once
	rep, err := Run(context.Background(), Options{Vhost: true, VhostBackends: []string{VhostOVS}, Duration: time.Second,
		Progress: func(msg string) {
			t.Log(msg)
			if strings.HasPrefix(msg, VhostOVS+" back-end, 64-byte") {
				once.Do(func() {
					wg.Add(1)
					go func() {
						defer wg.Done()
						pid := whenOVSPolls(ctx)
						if pid != 0 && syscall.Kill(pid, syscall.SIGKILL) != nil {
							pid = 0
						}
						killed <- pid
					}()
				})
			}
		}})
	checkNoDPDKLeft(t)
	for _, p := range children(t) {
		t.Errorf("process left running: %s", p)
	}
	cancel()
	if pid := <-killed; pid == 0 {
		t.Fatalf("found no ovs-vswitchd with a PMD thread to kill (Run returned %v)", err)
	}
	if err == nil || !strings.Contains(err.Error(), VhostOVS+", 64 B") {
		t.Fatalf("Run returned %v, want the 64-byte configuration's failure", err)
	}
	if rep == nil || rep.Vhost == nil || len(rep.Vhost.Runs) != 1 || rep.Vhost.Runs[0].Frame != 1500 {
		t.Fatalf("report %+v, want the 1500-byte run alone", rep.Vhost)
	}
	checkPMD(t, rep.Vhost.Runs[0])
}

// whenOVSPolls waits, a bounded time, until this process has a child
// ovs-vswitchd with a PMD thread and a child testpmd (the front-end), and
// returns ovs-vswitchd's PID, or 0.
func whenOVSPolls(ctx context.Context) int {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if len(childPIDs("dpdk-testpmd")) > 0 {
			for _, pid := range childPIDs("ovs-vswitchd-dp", "ovs-vswitchd") {
				if _, err := threadNamed(pid, "pmd"); err == nil {
					return pid
				}
			}
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return 0
		}
	}
	return 0
}

// checkNoDPDKLeft fails the test if a hugetlbfs of this process's is
// still mounted, or a DPDK runtime directory of its (testpmd's or Open
// vSwitch's) or a --vhost directory (sockets, Open vSwitch's run
// directories) is left.
func checkNoDPDKLeft(t *testing.T) {
	t.Helper()
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(mounts, []byte("/"+dpdk.MountPrefix())) {
		t.Errorf("hugetlbfs left mounted:\n%s", mounts)
	}
	left, _ := filepath.Glob(fmt.Sprintf("/var/run/dpdk/softnet-%d-*", os.Getpid()))
	if len(left) > 0 {
		t.Errorf("DPDK runtime directories left: %v", left)
	}
	left, _ = filepath.Glob(filepath.Join(os.TempDir(), vhostDirPrefix()+"*"))
	if len(left) > 0 {
		t.Errorf("--vhost directories left: %v", left)
	}
}

// TestLabAFXDP runs the AF_XDP measurement briefly: every configuration
// has its figures (Open vSwitch's, or a skip naming the package), softnet's
// afxdp ports their system calls and allocations per packet, the idle
// switch of 100 ports its CPU, and nothing is left behind.
func TestLabAFXDP(t *testing.T) {
	requireLab(t)
	netnstest.RequireTools(t, "ethtool")
	bin := buildSoftnet(t)
	rep, err := Run(context.Background(), Options{AFXDP: true, SoftnetBinary: bin, Duration: time.Second,
		Traffic: TrafficIperf3, Progress: func(msg string) { t.Log(msg) }})
	checkNothingLeft(t, rep)
	if err != nil {
		t.Fatal(err)
	}
	ar := rep.AFXDP
	want := len(AFXDPConfigs)
	if len(ar.Skipped) > 0 {
		want--
		if !strings.Contains(ar.Skipped[0], "openvswitch-switch-dpdk") {
			t.Errorf("skipped without naming the package: %v", ar.Skipped)
		}
	}
	if len(ar.Configs) != want {
		t.Fatalf("%d configurations measured, want %d: %+v", len(ar.Configs), want, ar.Configs)
	}
	for _, cfg := range ar.Configs {
		name := cfg.Variant.Name
		softnet := name == AFXDPSoftnet || name == AFXDPTAP
		if leak := cfg.Leak; softnet && leak != "ok" || !softnet && leak != "" {
			t.Errorf("%s: leak check %q", name, leak)
		}
		for _, m := range AFXDPModes {
			res := cfg.result(m)
			if res == nil || !(res.Gbps > 0) || !(res.PPS > 0) || !(res.Ratio > 0) || res.RatioTo != AFXDPBridge {
				t.Errorf("%s %s: no figure: %+v", name, m, res)
				continue
			}
			costs := res.SyscallsPerPacket != nil && res.AllocsPerPacket != nil
			if costs != (name == AFXDPSoftnet) {
				t.Errorf("%s %s: system calls %v, allocations %v per packet: want them for %s only", name, m, res.SyscallsPerPacket, res.AllocsPerPacket, AFXDPSoftnet)
			}
		}
	}
	if ar.IdleCPUPct == nil || ar.IdlePorts != AFXDPIdlePorts || ar.IdleLeak != "ok" {
		t.Errorf("idle: %v%% with %d ports, leak check %q (%s)", ar.IdleCPUPct, ar.IdlePorts, ar.IdleLeak, ar.IdleError)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
}
