package netnstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
)

// DefaultTimeout bounds each command Exec runs.
const DefaultTimeout = 10 * time.Second

// NS is a named network namespace that lives as long as one test, or
// until Delete.
type NS struct {
	Name    string
	deleted atomic.Bool
}

// New creates a network namespace with a unique name, brings its loopback
// up and registers a cleanup that deletes it. It calls RequireRoot first.
func New(t testing.TB) *NS {
	t.Helper()
	RequireRoot(t)
	name := uniqueName(t.Name())
	if out, err := run(DefaultTimeout, "ip", "netns", "add", name); err != nil {
		t.Fatalf("netnstest: add %s: %v: %s", name, err, out)
	}
	ns := &NS{Name: name}
	// Registered before anything else can fail, so the namespace goes even
	// if the rest of the setup or the test fails.
	t.Cleanup(func() {
		if ns.deleted.Load() {
			return
		}
		if out, err := run(DefaultTimeout, "ip", "netns", "del", name); err != nil {
			t.Errorf("netnstest: delete %s: %v: %s", name, err, out)
		}
	})
	if out, err := ns.Exec("ip", "link", "set", "lo", "up"); err != nil {
		t.Fatalf("netnstest: %s: lo up: %v: %s", name, err, out)
	}
	return ns
}

// Delete deletes the namespace now, as a container runtime does when a
// pod goes: the kernel destroys the devices that cannot move back to the
// initial namespace (TUN, veth) once nothing else holds it.
func (n *NS) Delete(t testing.TB) {
	t.Helper()
	if n.deleted.Swap(true) {
		return
	}
	if out, err := run(DefaultTimeout, "ip", "netns", "del", n.Name); err != nil {
		t.Fatalf("netnstest: delete %s: %v: %s", n.Name, err, out)
	}
}

// uniqueName builds softnet-<test>-<pid>-<random>: the test part says
// whose a leftover namespace was, the pid and random parts keep parallel
// tests and concurrent test binaries apart.
func uniqueName(test string) string {
	test = strings.TrimPrefix(test, "Test")
	var b strings.Builder
	for _, r := range test {
		if b.Len() == 10 {
			break
		}
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	var rnd [3]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails on Linux
	return fmt.Sprintf("softnet-%s-%d-%s", b.String(), os.Getpid(), hex.EncodeToString(rnd[:]))
}

// Exec runs a command inside the namespace (`ip netns exec NAME args...`)
// with DefaultTimeout and returns its combined output.
func (n *NS) Exec(args ...string) (string, error) {
	return n.ExecTimeout(DefaultTimeout, args...)
}

// ExecTimeout is Exec with a timeout of its own.
func (n *NS) ExecTimeout(d time.Duration, args ...string) (string, error) {
	return run(d, append([]string{"ip", "netns", "exec", n.Name}, args...)...)
}

// run runs a command with a timeout; the error includes the command line.
func run(d time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (timeout %v)", err, d)
		}
		return string(out), fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// AddAddr gives dev inside the namespace the address prefix (IPv6 without
// duplicate address detection) and waits until the kernel delivers to
// it. For IPv6 that is later than the address: even with nodad, the
// kernel inserts the local route from a workqueue, and until that runs,
// which on a loaded machine can take a while, packets to the address are
// dropped (Ip6InAddrErrors) although sockets can already bind it.
func (n *NS) AddAddr(t testing.TB, dev string, prefix netip.Prefix) {
	t.Helper()
	family, nodad := "-4", []string(nil)
	if prefix.Addr().Is6() {
		family, nodad = "-6", []string{"nodad"}
	}
	if out, err := n.Exec(append([]string{"ip", family, "addr", "add", prefix.String(), "dev", dev}, nodad...)...); err != nil {
		t.Fatalf("netnstest: %s: %v: %s", n.Name, err, out)
	}
	for deadline := time.Now().Add(DefaultTimeout); ; {
		out, err := n.Exec("ip", family, "route", "show", "table", "local", prefix.Addr().String())
		if err != nil {
			t.Fatalf("netnstest: %s: %v: %s", n.Name, err, out)
		}
		if strings.TrimSpace(out) != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("netnstest: %s: no local route for %v after %v", n.Name, prefix.Addr(), DefaultTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
