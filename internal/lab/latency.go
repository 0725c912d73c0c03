package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"softnet.dev/internal/netns"
)

// Bounds on the sockperf processes beyond the transfer itself.
const (
	sockperfListenTimeout = 5 * time.Second
	sockperfGrace         = 15 * time.Second
)

// sockperfGen runs sockperf ping-pong: a server in guest b pinned to one
// CPU, the client in guest a pinned to another, 64-byte messages. Pinned,
// because unpinned runs are bimodal on a small machine: the two ends
// sometimes share a CPU and sometimes wake each other across CPUs.
type sockperfGen struct {
	path, version string
	cpus          [2]int // client's, server's
}

// findSockperf returns the installed sockperf, or an error if there is
// none or taskset (util-linux), which pins it, is missing.
func findSockperf() (*sockperfGen, error) {
	path, err := exec.LookPath("sockperf")
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return nil, fmt.Errorf("taskset (util-linux) pins sockperf: %w", err)
	}
	g := &sockperfGen{path: path, version: "sockperf", cpus: latencyCPUs()}
	if out, err := exec.Command(path, "--version").CombinedOutput(); err == nil {
		if m := sockperfVersion.FindSubmatch(out); m != nil {
			g.version = "sockperf " + string(m[1])
		}
	}
	return g, nil
}

var sockperfVersion = regexp.MustCompile(`version #?([0-9][0-9.]*)`)

// latencyCPUs returns two CPUs this process may run on, for the client
// and the server; the same one twice on a one-CPU machine.
func latencyCPUs() [2]int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return [2]int{0, 1}
	}
	var cpus []int
	for c := 0; c < 1024 && len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	switch len(cpus) {
	case 0:
		return [2]int{0, 0}
	case 1:
		return [2]int{cpus[0], cpus[0]}
	}
	return [2]int{cpus[0], cpus[1]}
}

func (g *sockperfGen) name() string { return g.version }

type sockperfFlow struct {
	dir            string
	server, client *process
	t              transfer
}

func (g *sockperfGen) start(ctx context.Context, p *guestPair, t transfer) (_ flow, err error) {
	dir, err := os.MkdirTemp("", "softnet-lab-sockperf-")
	if err != nil {
		return nil, err
	}
	f := &sockperfFlow{dir: dir, t: t}
	defer func() {
		if err != nil {
			f.stop()
		}
	}()
	dst, port := p.b.addr(t.ipv6).String(), strconv.Itoa(latencyPort)
	var tcp []string
	if t.tcp() {
		tcp = []string{"--tcp"}
	}
	log := filepath.Join(dir, "server.log")
	f.server, err = startPinned(ctx, g.cpus[1], p.b.ns, log, log, g.path, append([]string{"server", "-i", dst, "-p", port}, tcp...)...)
	if err != nil {
		return nil, fmt.Errorf("sockperf server: %w", err)
	}
	if err := waitListening(ctx, f.server, p.b.ns, t.tcp(), latencyPort, sockperfListenTimeout); err != nil {
		return nil, fmt.Errorf("sockperf server in %s: %w", p.b.ns, err)
	}
	args := append([]string{"ping-pong", "-i", dst, "-p", port, "-m", strconv.Itoa(t.payload), "-t", strconv.Itoa(int(t.d / time.Second))}, tcp...)
	f.client, err = startPinned(ctx, g.cpus[0], p.a.ns, filepath.Join(dir, "client.log"), filepath.Join(dir, "client.err"), g.path, args...)
	if err != nil {
		return nil, fmt.Errorf("sockperf client: %w", err)
	}
	return f, nil
}

func (f *sockperfFlow) threads() []int { return nil }

func (f *sockperfFlow) wait(ctx context.Context) (flowResult, error) {
	defer f.stop()
	cerr := f.client.wait(ctx, f.t.d+sockperfGrace)
	if err := ctx.Err(); err != nil {
		return flowResult{}, err
	}
	if cerr != nil {
		return flowResult{}, fmt.Errorf("sockperf client: %w%s", cerr, f.client.tail())
	}
	out, err := os.ReadFile(f.client.stdout)
	if err != nil {
		return flowResult{}, err
	}
	st, err := parseSockperf(out)
	if err != nil {
		return flowResult{}, fmt.Errorf("%w%s", err, f.client.tail())
	}
	return flowResult{latency: &st, seconds: f.t.d.Seconds()}, nil
}

// stop kills the server (it runs until killed) and whatever else still
// runs, and removes the output files.
func (f *sockperfFlow) stop() {
	for _, p := range []*process{f.client, f.server} {
		if p != nil {
			p.kill()
		}
	}
	os.RemoveAll(f.dir)
}

var (
	ansiEscape     = regexp.MustCompile("\x1b\\[[0-9;]*m")
	sockperfAvg    = regexp.MustCompile(`avg-latency=([0-9.]+)`)
	sockperfPct    = regexp.MustCompile(`percentile ([0-9.]+) =\s*([0-9.]+)`)
	sockperfTotal  = regexp.MustCompile(`Total ([0-9]+) observations`)
	sockperfMsgErr = regexp.MustCompile(`(?m)^sockperf: (ERROR|error).*$`)
)

// parseSockperf reads a sockperf ping-pong client's output (3.7): the
// average, the 50th and 99th percentiles of the one-way latency in µs
// (sockperf reports half the round trip unless told --full-rtt), and the
// number of observations.
func parseSockperf(out []byte) (latencyStats, error) {
	s := ansiEscape.ReplaceAllString(string(out), "")
	var st latencyStats
	if m := sockperfMsgErr.FindString(s); m != "" {
		return st, fmt.Errorf("sockperf: %s", strings.TrimPrefix(m, "sockperf: "))
	}
	found := 0
	for _, m := range sockperfPct.FindAllStringSubmatch(s, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return st, fmt.Errorf("sockperf output: percentile %s: %w", m[1], err)
		}
		switch m[1] {
		case "50.000":
			st.p50 = v
			found++
		case "99.000":
			st.p99 = v
			found++
		}
	}
	if found != 2 {
		return st, fmt.Errorf("sockperf output: no 50th and 99th percentiles")
	}
	if m := sockperfAvg.FindStringSubmatch(s); m != nil {
		st.avg, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := sockperfTotal.FindStringSubmatch(s); m != nil {
		st.observations, _ = strconv.Atoi(m[1])
	}
	if st.observations == 0 {
		return st, fmt.Errorf("sockperf output: no observations")
	}
	return st, nil
}

// waitListening polls namespace ns until a socket is bound to port (a
// listening TCP socket, or any UDP one), or p exits, or timeout passes.
func waitListening(ctx context.Context, p *process, ns string, tcp bool, port int, timeout time.Duration) error {
	file := "/proc/thread-self/net/udp"
	if tcp {
		file = "/proc/thread-self/net/tcp"
	}
	deadline := time.Now().Add(timeout)
	for {
		var table []byte
		if err := netns.Do(ns, func() (err error) {
			table, err = os.ReadFile(file)
			return err
		}); err != nil {
			return err
		}
		if socketBound(table, tcp, port) {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("exited (%v) before listening%s", p.err, p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on port %d within %v%s", port, timeout, p.tail())
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// socketBound reports whether a /proc/net/tcp or udp table has a socket
// bound to port: a listening one (state 0A) for TCP.
func socketBound(table []byte, tcp bool, port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(table), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasSuffix(f[1], want) {
			continue
		}
		if !tcp || f[3] == "0A" {
			return true
		}
	}
	return false
}
