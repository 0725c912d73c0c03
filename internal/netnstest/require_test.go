package netnstest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRequireToolsPing is the test that TestRequireToolsOnAFreshMachine
// reruns without ping; here it checks that the ping found runs.
func TestRequireToolsPing(t *testing.T) {
	RequireTools(t, "ping")
	if out, err := exec.Command("ping", "-V").CombinedOutput(); err != nil {
		t.Fatalf("ping -V: %v\n%s", err, out)
	}
}

// On a machine without ping, a test that needs it skips and says which
// package to install; with SOFTNET_REQUIRE_ROOT_TESTS=1 it fails, saying
// the same.
func TestRequireToolsOnAFreshMachine(t *testing.T) {
	const why = "needs ping (Debian package iputils-ping), not found on PATH"
	out, passed := RerunWithout(t, "TestRequireToolsPing", nil, "ping")
	if !passed || !strings.Contains(out, "--- SKIP: TestRequireToolsPing") || !strings.Contains(out, why) {
		t.Errorf("without ping: passed %v, want a skip saying %q:\n%s", passed, why, out)
	}
	out, passed = RerunWithout(t, "TestRequireToolsPing", []string{RequireEnv + "=1"}, "ping")
	if passed || !strings.Contains(out, "--- FAIL: TestRequireToolsPing") || !strings.Contains(out, why+", and "+RequireEnv+"=1") {
		t.Errorf("without ping, %s=1: passed %v, want a failure saying %q:\n%s", RequireEnv, passed, why, out)
	}
}

func TestMissingTools(t *testing.T) {
	t.Setenv("PATH", pathWithout(t, []string{"ping", "tcpdump"}))
	got, err := MissingTools("ping", "tcpdump")
	want := "needs ping (Debian package iputils-ping), tcpdump (Debian package tcpdump), not found on PATH"
	if got != want || err != nil {
		t.Errorf("MissingTools = %q, %v, want %q", got, err, want)
	}
	if _, err := MissingTools("ping", "no-such-tool"); err == nil || !strings.Contains(err.Error(), `"no-such-tool"`) {
		t.Errorf("MissingTools of a tool without a package: %v", err)
	}
}
