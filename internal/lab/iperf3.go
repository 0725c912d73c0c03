package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Bounds on the iperf3 processes beyond the transfer itself.
const (
	iperf3ListenTimeout = 5 * time.Second  // for the server to listen
	iperf3Grace         = 15 * time.Second // for the client to finish after the transfer
	iperf3ServerGrace   = 2 * time.Second  // for the server to exit after the client
)

// iperf3Gen runs iperf3: a one-shot server in guest b (`iperf3 -s -1 -B
// addr -p port`), then the client in guest a with --json. The server's
// output goes to a file, where it would sit in stdio's buffer without
// --forceflush; the lab waits for its "Server listening" line there.
type iperf3Gen struct {
	path    string
	version string
}

// findIperf3 returns the installed iperf3, or an error if there is none.
func findIperf3() (*iperf3Gen, error) {
	path, err := exec.LookPath("iperf3")
	if err != nil {
		return nil, err
	}
	g := &iperf3Gen{path: path, version: "iperf3"}
	if out, err := exec.Command(path, "--version").Output(); err == nil {
		// "iperf 3.12 (cJSON 1.7.15)" and a system line.
		if f := strings.Fields(string(out)); len(f) >= 2 {
			g.version = "iperf3 " + f[1]
		}
	}
	return g, nil
}

func (g *iperf3Gen) name() string { return g.version }

// iperf3Flow is one transfer: its two processes and their output files.
// Output goes to files, not pipes, so that no goroutine of this process
// copies (and allocates) while the datapath is being measured.
type iperf3Flow struct {
	dir            string
	server, client *process
	t              transfer
}

// iperf3Args returns the client's arguments for transfer t to dst:port.
func iperf3Args(t transfer, dst, port string) []string {
	args := []string{"-c", dst, "-p", port, "-t", strconv.Itoa(int(t.d / time.Second)), "--json"}
	if t.reverse {
		args = append(args, "-R")
	}
	if t.omit > 0 {
		args = append(args, "-O", strconv.Itoa(t.omit))
	}
	if t.tcp() {
		if t.streams > 1 {
			args = append(args, "-P", strconv.Itoa(t.streams))
		}
		return args
	}
	args = append(args, "-u", "-b", strconv.FormatFloat(t.rate, 'f', 0, 64), "-l", strconv.Itoa(t.payload))
	if t.rcvbuf > 0 {
		// -w sets the socket buffers of both ends, the receiver's too.
		args = append(args, "-w", strconv.Itoa(t.rcvbuf))
	}
	return args
}

func (g *iperf3Gen) start(ctx context.Context, p *guestPair, t transfer) (_ flow, err error) {
	if t.gso {
		return nil, fmt.Errorf("%s cannot send with UDP_SEGMENT", g.version)
	}
	dir, err := os.MkdirTemp("", "softnet-lab-iperf3-")
	if err != nil {
		return nil, err
	}
	f := &iperf3Flow{dir: dir, t: t}
	defer func() {
		if err != nil {
			f.stop()
		}
	}()
	dst, port := p.b.addr(t.ipv6).String(), strconv.Itoa(transferPort)
	f.server, err = startProcess(ctx, p.b.ns, filepath.Join(dir, "server.log"), filepath.Join(dir, "server.log"),
		g.path, "-s", "-1", "-B", dst, "-p", port, "--forceflush")
	if err != nil {
		return nil, fmt.Errorf("iperf3 server: %w", err)
	}
	if err := f.server.waitOutput(ctx, "Server listening", iperf3ListenTimeout); err != nil {
		return nil, fmt.Errorf("iperf3 server in %s: %w", p.b.ns, err)
	}
	f.client, err = startProcess(ctx, p.a.ns, filepath.Join(dir, "client.json"), filepath.Join(dir, "client.err"), g.path, iperf3Args(t, dst, port)...)
	if err != nil {
		return nil, fmt.Errorf("iperf3 client: %w", err)
	}
	return f, nil
}

func (f *iperf3Flow) threads() []int { return nil }

func (f *iperf3Flow) wait(ctx context.Context) (flowResult, error) {
	defer f.stop()
	cerr := f.client.wait(ctx, f.t.d+iperf3Grace)
	if err := ctx.Err(); err != nil {
		return flowResult{}, err
	}
	// The one-shot server exits once the client is done with it; a
	// server that lingers is killed, its figures are in the client's.
	_ = f.server.wait(ctx, iperf3ServerGrace)
	out, err := os.ReadFile(f.client.stdout)
	if err != nil {
		return flowResult{}, err
	}
	res, perr := parseIperf3(out, f.t.tcp())
	switch {
	case cerr != nil && perr != nil && len(out) > 0:
		// iperf3 --json reports its own failures in the JSON.
		return res, fmt.Errorf("iperf3 client (%v): %w", cerr, perr)
	case cerr != nil:
		return res, fmt.Errorf("iperf3 client: %w%s", cerr, f.client.tail())
	case perr != nil:
		return res, fmt.Errorf("%w%s", perr, f.client.tail())
	}
	return res, nil
}

// stop kills whatever still runs and removes the output files.
func (f *iperf3Flow) stop() {
	for _, p := range []*process{f.client, f.server} {
		if p != nil {
			p.kill()
		}
	}
	os.RemoveAll(f.dir)
}

// process is a command the lab started in a guest, known by its PID.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr string
	done           chan struct{} // closed when it has exited and been reaped
	err            error         // its exit status, once done is closed
}

// startProcess runs name with args in namespace ns (`ip netns exec`,
// which execs the command in place: the PID is the command's), with
// stdout and stderr to files.
func startProcess(ctx context.Context, ns, stdout, stderr, name string, args ...string) (*process, error) {
	return startArgv(ctx, stdout, stderr, append([]string{"ip", "netns", "exec", ns, name}, args...))
}

// startPinned is startProcess with the command pinned to one CPU
// (taskset, which execs ip, which execs the command: the PID is still the
// command's, and so is the CPU affinity it inherits).
func startPinned(ctx context.Context, cpu int, ns, stdout, stderr, name string, args ...string) (*process, error) {
	return startArgv(ctx, stdout, stderr, append([]string{"taskset", "-c", strconv.Itoa(cpu), "ip", "netns", "exec", ns, name}, args...))
}

// startArgv runs argv with stdout and stderr to files.
func startArgv(ctx context.Context, stdout, stderr string, argv []string) (*process, error) {
	outF, err := os.OpenFile(stdout, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer outF.Close()
	errF := outF
	if stderr != stdout {
		if errF, err = os.OpenFile(stderr, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err != nil {
			return nil, err
		}
		defer errF.Close()
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = outF, errF
	// Should the lab itself be killed outright, the kernel kills its
	// children: nothing it started outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, stdout: stdout, stderr: stderr, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// wait waits for the process to exit, for at most timeout or until ctx is
// done, and kills it if it has not.
func (p *process) wait(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	case <-t.C:
		p.kill()
		return fmt.Errorf("pid %d still running after %v: killed", p.cmd.Process.Pid, timeout)
	}
}

// kill stops the process by its PID, if it still runs, and reaps it.
func (p *process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return // not ours to chase further: Kill only fails if it is gone
	}
	<-p.done
}

// running reports whether the process has not exited yet.
func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// waitOutput polls the process's stdout until it contains s.
func (p *process) waitOutput(ctx context.Context, s string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(p.stdout); err == nil && strings.Contains(string(b), s) {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("exited (%v) before %q%s", p.err, s, p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %q within %v%s", s, timeout, p.tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// tail returns the end of the process's stderr (or stdout) for an error
// message, starting with a newline, or "".
func (p *process) tail() string {
	if p == nil {
		return ""
	}
	b, _ := os.ReadFile(p.stderr)
	if len(strings.TrimSpace(string(b))) == 0 && p.stderr != p.stdout {
		b, _ = os.ReadFile(p.stdout)
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = "…" + s[len(s)-600:]
	}
	if s == "" {
		return ""
	}
	return ":\n" + s
}
