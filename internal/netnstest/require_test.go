package netnstest

import (
	"os"
	"os/exec"
	"slices"
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

// CI runs the tests once more with every tool of toolPackages hidden but
// ip, which RequireRoot needs (.ci/run): a tool added to toolPackages
// must be hidden there too, so that a test that runs it without
// RequireTools fails in CI, not on a user's fresh machine.
func TestCIHidesEveryTool(t *testing.T) {
	b, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	var hidden []string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, `hide_tools "$notools" `); ok {
			hidden = strings.Fields(rest)
		}
	}
	var want []string
	for tool := range toolPackages {
		if tool != "ip" {
			want = append(want, tool)
		}
	}
	slices.Sort(hidden)
	slices.Sort(want)
	if !slices.Equal(hidden, want) {
		t.Errorf(".ci/run hides %v, want every tool of toolPackages but ip: %v", hidden, want)
	}
}
