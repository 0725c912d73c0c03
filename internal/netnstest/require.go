package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequireEnv is the environment variable that turns RequireRoot's and
// RequireTools' skip into a failure.
const RequireEnv = "SOFTNET_REQUIRE_ROOT_TESTS"

// RequireRoot skips the test unless it runs as root with /dev/net/tun and
// the `ip` tool available. With SOFTNET_REQUIRE_ROOT_TESTS=1 it fails the
// test instead: CI must not pass by skipping what it is meant to run.
func RequireRoot(t testing.TB) {
	t.Helper()
	if reason := missingRoot(); reason != "" {
		skipOrFail(t, reason)
	}
	RequireTools(t, "ip")
}

// RequireTools skips the test unless every tool is on PATH, naming each
// missing tool and the Debian package that installs it, so that a fresh
// machine says what to install instead of failing on "exec: not found".
// With SOFTNET_REQUIRE_ROOT_TESTS=1 it fails the test instead, as
// RequireRoot does. A tool must be listed in toolPackages.
func RequireTools(t testing.TB, tools ...string) {
	t.Helper()
	reason, err := MissingTools(tools...)
	if err != nil {
		t.Fatal(err)
	}
	if reason != "" {
		skipOrFail(t, reason)
	}
}

// toolPackages names the Debian package of every external tool the tests
// and the lab run (.ci/run installs them).
var toolPackages = map[string]string{
	"busybox":            "busybox-static",
	"dpdk-testpmd":       "dpdk-dev",
	"etcd":               "etcd-server",
	"ethtool":            "ethtool",
	"ip":                 "iproute2",
	"iperf3":             "iperf3",
	"ip6tables":          "iptables",
	"iptables":           "iptables",
	"ping":               "iputils-ping",
	"qemu-system-x86_64": "qemu-system-x86",
	"sockperf":           "sockperf",
	"sysctl":             "procps",
	"taskset":            "util-linux",
	"tcpdump":            "tcpdump",
}

// MissingTools returns why the tools cannot be run here, e.g. "needs ping
// (Debian package iputils-ping)", or "" when all are on PATH. It is for
// tests that leave out a part instead of skipping; the error is for a
// tool without a known package.
func MissingTools(tools ...string) (string, error) {
	var missing []string
	for _, tool := range tools {
		pkg, ok := toolPackages[tool]
		if !ok {
			return "", fmt.Errorf("netnstest: no Debian package known for %q: add it to toolPackages", tool)
		}
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", tool, pkg))
		}
	}
	if len(missing) == 0 {
		return "", nil
	}
	return "needs " + strings.Join(missing, ", ") + ", not found on PATH", nil
}

// SkipOrFail skips the test for reason, or fails it when RequireEnv is
// 1: for what a test needs that is not a tool on PATH (a guest kernel,
// say), with the reason naming the Debian package to install.
func SkipOrFail(t testing.TB, reason string) {
	t.Helper()
	skipOrFail(t, reason)
}

// skipOrFail skips the test for reason, or fails it when RequireEnv is 1.
func skipOrFail(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s, and %s=1", reason, RequireEnv)
	}
	t.Skip(reason)
}

// missingRoot returns why root tests cannot run here, or "".
func missingRoot() string {
	if os.Geteuid() != 0 {
		return "needs root"
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return "needs /dev/net/tun: " + err.Error()
	}
	return ""
}
