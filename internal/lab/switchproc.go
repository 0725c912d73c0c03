package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"softnet.dev/afxdp"
	"softnet.dev/internal/netns"
	"softnet.dev/vxlan"
)

// switchProc is a `softnet switch` process the lab started in a host's
// namespace, with its control socket, its metrics on the namespace's
// loopback and its statistics file, all in a directory of its own.
type switchProc struct {
	p      *process
	ns     string
	dir    string
	socket string
	stats  string
	leak   string // after stop: "ok" or the leak check's failure
}

// apiTimeout bounds every request the lab makes to a switch.
const apiTimeout = 5 * time.Second

// startSwitchProc runs bin switch with args in namespace ns (ip netns
// exec: the PID is the switch's) and waits until its API answers.
func startSwitchProc(ctx context.Context, bin, ns string, args []string) (_ *switchProc, err error) {
	dir, err := overlayDir()
	if err != nil {
		return nil, err
	}
	socket, stats, out := switchFiles(dir)
	sw := &switchProc{ns: ns, dir: dir, socket: socket, stats: stats}
	argv := append([]string{"switch", "--workers", "1", "--control", socket, "--stats-json", stats,
		"--metrics", switchMetrics, "--log-level", "warn"}, args...)
	if sw.p, err = startProcess(ctx, ns, out, out, bin, argv...); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("softnet switch: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, sw.stop())
		}
	}()
	deadline := time.Now().Add(switchReady)
	for {
		_, err := httpGet(func() (net.Conn, error) { return net.DialTimeout("unix", sw.socket, apiTimeout) }, "/v1/stats")
		if err == nil {
			return sw, nil
		}
		if !sw.p.running() {
			return sw, fmt.Errorf("softnet switch in %s exited (%v)%s", ns, sw.p.err, sw.p.tail())
		}
		if time.Now().After(deadline) {
			return sw, fmt.Errorf("softnet switch in %s: no answer within %v: %w%s", ns, switchReady, err, sw.p.tail())
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return sw, ctx.Err()
		}
	}
}

// stop ends the switch as an operator would (SIGTERM: it closes its
// ports and writes its statistics), kills it if it does not exit in
// time, records its leak check and removes its directory. It may be
// called again.
func (s *switchProc) stop() error {
	if s.dir == "" {
		return nil
	}
	defer func() {
		os.RemoveAll(s.dir)
		s.dir = ""
	}()
	if s.p.running() {
		if err := s.p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("softnet switch pid %d: %w", s.p.cmd.Process.Pid, err)
		}
	}
	exitErr := s.p.wait(context.Background(), switchStopWait)
	s.leak = "not checked"
	if b, err := os.ReadFile(s.stats); err == nil {
		var rep struct {
			Leak string `json:"leak_check"`
		}
		if json.Unmarshal(b, &rep) == nil && rep.Leak != "" {
			s.leak = rep.Leak
		}
	}
	if exitErr != nil {
		return fmt.Errorf("softnet switch in %s: %w%s", s.ns, exitErr, s.p.tail())
	}
	return nil
}

// cpu returns the CPU time the switch process has used.
func (s *switchProc) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// vxlanStats returns the counters of the switch's vxlan port, from its
// API's statistics.
func (s *switchProc) vxlanStats() (vxlan.Stats, error) {
	body, err := httpGet(func() (net.Conn, error) { return net.DialTimeout("unix", s.socket, apiTimeout) }, "/v1/stats")
	if err != nil {
		return vxlan.Stats{}, err
	}
	var st struct {
		Devices []struct {
			VXLAN *vxlan.Stats `json:"vxlan"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return vxlan.Stats{}, fmt.Errorf("%s: /v1/stats: %w", s.socket, err)
	}
	for _, d := range st.Devices {
		if d.VXLAN != nil {
			return *d.VXLAN, nil
		}
	}
	return vxlan.Stats{}, fmt.Errorf("%s: no vxlan port in /v1/stats", s.socket)
}

// afxdpCounts are the packets (both ways) and system calls of the
// switch's afxdp ports, summed, from its API's statistics.
func afxdpCounts(s *switchProc) (packets, calls uint64, err error) {
	body, err := httpGet(func() (net.Conn, error) { return net.DialTimeout("unix", s.socket, apiTimeout) }, "/v1/stats")
	if err != nil {
		return 0, 0, err
	}
	var st struct {
		Devices []struct {
			AFXDP *afxdp.Stats `json:"afxdp"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return 0, 0, fmt.Errorf("%s: /v1/stats: %w", s.socket, err)
	}
	n := 0
	for _, d := range st.Devices {
		if d.AFXDP != nil {
			n++
			packets += d.AFXDP.RxPackets + d.AFXDP.TxPackets
			calls += d.AFXDP.RxCalls + d.AFXDP.TxCalls
		}
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("%s: no afxdp port in /v1/stats", s.socket)
	}
	return packets, calls, nil
}

// mallocs returns the switch's heap allocations so far, as its metrics
// say (go_memstats_mallocs_total). With twice, it reads them twice in a
// row and returns the second reading and how much the first allocated:
// a scrape's own cost, to be subtracted from a window it opens.
func (s *switchProc) mallocs(twice bool) (n, cost uint64, err error) {
	if n, err = s.scrapeMallocs(); err != nil || !twice {
		return n, 0, err
	}
	m, err := s.scrapeMallocs()
	if err != nil {
		return 0, 0, err
	}
	return m, m - n, nil
}

func (s *switchProc) scrapeMallocs() (uint64, error) {
	// The metrics listen on the host namespace's loopback: the socket
	// is made there, then used from any thread.
	dial := func() (c net.Conn, err error) {
		err = netns.Do(s.ns, func() error {
			c, err = net.DialTimeout("tcp", switchMetrics, apiTimeout)
			return err
		})
		return c, err
	}
	body, err := httpGet(dial, "/metrics")
	if err != nil {
		return 0, err
	}
	return parseMetric(body, "go_memstats_mallocs_total")
}

// parseMetric returns the value of an unlabelled metric in Prometheus's
// text format.
func parseMetric(body []byte, name string) (uint64, error) {
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return 0, fmt.Errorf("metric %s: %w", name, err)
			}
			return uint64(v), nil
		}
	}
	return 0, fmt.Errorf("no metric %s", name)
}

// httpGet makes one HTTP/1.0 GET on a connection of its own, which it
// closes: no client, idle connection or goroutine outlives the request.
func httpGet(dial func() (net.Conn, error), path string) ([]byte, error) {
	c, err := dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(apiTimeout)); err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: softnet\r\n\r\n", path); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return body, nil
}
