package lab

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// cmdTimeout bounds every ip(8) command the lab runs.
const cmdTimeout = 10 * time.Second

// ip runs ip(8) with args; the error carries the command line and its
// output. The lab's own context is not used: a cancelled run must still be
// able to configure and remove what it created, so every command is
// bounded by cmdTimeout instead.
func ip(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// addNamespace creates a named network namespace with its loopback up.
func addNamespace(name string) error {
	if err := ip("netns", "add", name); err != nil {
		return err
	}
	if err := ip("-n", name, "link", "set", "lo", "up"); err != nil {
		return errors.Join(err, deleteNamespace(name))
	}
	return nil
}

// deleteNamespace removes a named namespace and, with it, every device
// still in it.
func deleteNamespace(name string) error { return ip("netns", "del", name) }

// ipBatch runs ip(8) commands, one a line, inside namespace ns in one
// process (ip -n NS -batch -): configuring hundreds of guests one command
// each would take most of a run's setup.
func ipBatch(ns string, cmds []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, "ip", "-n", ns, "-batch", "-")
	c.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("ip -n %s -batch (%s): %w: %s", ns, strings.Join(cmds, "; "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
