package netnstest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// RerunWithout runs one test of the running test binary again in a child
// process whose PATH lacks the given tools, as on a fresh machine that
// has not installed them, and returns the child's verbose output and
// whether it passed (a skip passes). RequireEnv is unset in the child
// unless env sets it; env holds further NAME=value pairs.
func RerunWithout(t testing.TB, test string, env []string, tools ...string) (out string, passed bool) {
	t.Helper()
	path := pathWithout(t, tools)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, RequireEnv+"=")
	})
	cmd.Env = append(append(cmd.Env, "PATH="+path), env...)
	b, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("netnstest: rerun of %s timed out:\n%s", test, b)
	}
	if _, failed := err.(*exec.ExitError); err != nil && !failed {
		t.Fatalf("netnstest: rerun of %s: %v", test, err)
	}
	return string(b), err == nil
}

// pathWithout returns a PATH of one directory that holds a link to every
// command this process's PATH finds, except the tools.
func pathWithout(t testing.TB, tools []string) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(d)
		if err != nil || !filepath.IsAbs(d) {
			continue // PATH may name directories that do not exist, or "."
		}
		for _, e := range entries {
			if slices.Contains(tools, e.Name()) {
				continue
			}
			// The first directory on PATH wins, as in a lookup.
			err := os.Symlink(filepath.Join(d, e.Name()), filepath.Join(dir, e.Name()))
			if err != nil && !os.IsExist(err) {
				t.Fatalf("netnstest: %v", err)
			}
		}
	}
	return dir
}
