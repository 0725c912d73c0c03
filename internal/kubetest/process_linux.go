package kubetest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// process is etcd or kube-apiserver, run by the test: its output goes to
// a log file in the test's directory, appended across restarts.
type process struct {
	name string
	bin  string
	args []string
	log  string

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
	err  error         // cmd.Wait's, once done is closed
}

// start runs the process. It must not be running.
func (p *process) start() error {
	if p.running() {
		return fmt.Errorf("kubetest: %s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("kubetest: %s log: %w", p.name, err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A test binary killed by its timeout takes its servers with it
	// instead of leaving them holding ports for the next run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kubetest: start %s: %w", p.name, err)
	}
	p.cmd, p.done, p.err = cmd, make(chan struct{}), nil
	go func(done chan struct{}) {
		p.err = cmd.Wait()
		close(done)
	}(p.done)
	return nil
}

// running reports whether the process was started and has not exited.
func (p *process) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// exited returns a channel closed when the process exits (nil, which
// blocks, when it was never started).
func (p *process) exited() <-chan struct{} {
	if p.cmd == nil {
		return nil
	}
	return p.done
}

// kill stops the process with SIGKILL, as a crash would, by its PID, and
// waits for it. A process that is not running is left alone.
func (p *process) kill() error {
	if !p.running() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kubetest: kill %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	<-p.done
	return nil
}

// exitError says how the process ended, with the end of its log.
func (p *process) exitError() error {
	return fmt.Errorf("kubetest: %s exited: %v\n%s", p.name, p.err, p.logTail(40))
}

// logTail returns the last n lines of the process's log.
func (p *process) logTail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
// The servers keep theirs across restarts.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("kubetest: free port: %w", err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}
