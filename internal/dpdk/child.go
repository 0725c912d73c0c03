//go:build linux

package dpdk

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
)

// child is a process this package started (testpmd, ovsdb-server,
// ovs-vswitchd), its output, and the goroutine that reaps it.
type child struct {
	name   string // for errors
	cmd    *exec.Cmd
	out    syncBuffer
	done   chan struct{}
	exited atomic.Bool
	err    error // Wait's, once done is closed
}

// startChild starts cmd with its output collected. The kernel kills it
// should this process die first.
func startChild(name string, cmd *exec.Cmd) (*child, error) {
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &c.out, &c.out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() {
		c.err = cmd.Wait()
		c.exited.Store(true)
		close(c.done)
	}()
	return c, nil
}

// Pid is the process's.
func (c *child) Pid() int { return c.cmd.Process.Pid }

// Output is what it printed so far.
func (c *child) Output() string { return c.out.String() }

// Exited reports whether the process has ended.
func (c *child) Exited() bool { return c.exited.Load() }

// waitOrKill waits up to timeout for the process to exit and kills it,
// by its PID, if it has not; the error says it had to.
func (c *child) waitOrKill(timeout time.Duration) error {
	select {
	case <-c.done:
		return nil
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s (pid %d) did not exit within %v: killed", c.name, c.Pid(), timeout)
	}
}

// terminate asks the process to exit (SIGTERM) and kills it if it has
// not within timeout.
func (c *child) terminate(timeout time.Duration) error {
	if c.Exited() {
		return nil
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	return c.waitOrKill(timeout)
}

// tail is the end of the output, for an error.
func (c *child) tail() string { return tailOf(c.out.String()) }

// tailOf is the end of a process's output or log, for an error.
func tailOf(s string) string {
	const keep = 4000
	if len(s) > keep {
		s = "…" + s[len(s)-keep:]
	}
	return s
}

// newPrefix returns a DPDK --file-prefix of this process's own, unique
// among its processes: what EAL names its runtime directory and hugepage
// files after.
func newPrefix() string {
	return fmt.Sprintf("softnet-%d-%d-%d", os.Getpid(), prefixes.Add(1), time.Now().UnixNano()%1e9)
}

var prefixes atomic.Uint64

// removeEALFiles removes what an exited DPDK process under prefix leaves:
// its hugepage files in hugeDir (they hold their pages until removed) and
// its runtime directory.
func removeEALFiles(hugeDir, prefix string) error {
	var errs []error
	if hugeDir != "" {
		files, _ := filepath.Glob(filepath.Join(hugeDir, prefix+"*"))
		for _, f := range files {
			if err := os.Remove(f); err != nil {
				errs = append(errs, fmt.Errorf("remove DPDK's hugepage file: %w", err))
			}
		}
	}
	if err := os.RemoveAll(filepath.Join(ealRuntimeDir, prefix)); err != nil {
		errs = append(errs, fmt.Errorf("remove DPDK's runtime directory: %w", err))
	}
	return errors.Join(errs...)
}

// ealRuntimeDir is where EAL, run as root, keeps a directory per file
// prefix (its config, the multi-process and telemetry sockets).
const ealRuntimeDir = "/var/run/dpdk"
