package netnstest

import (
	"os"
	"os/exec"
	"testing"
)

// RequireEnv is the environment variable that turns RequireRoot's skip
// into a failure.
const RequireEnv = "SOFTNET_REQUIRE_ROOT_TESTS"

// RequireRoot skips the test unless it runs as root with /dev/net/tun and
// the `ip` tool available. With SOFTNET_REQUIRE_ROOT_TESTS=1 it fails the
// test instead: CI must not pass by skipping what it is meant to run.
func RequireRoot(t testing.TB) {
	t.Helper()
	if reason := missing(); reason != "" {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s, and %s=1", reason, RequireEnv)
		}
		t.Skip(reason)
	}
}

// missing returns why root tests cannot run here, or "".
func missing() string {
	if os.Geteuid() != 0 {
		return "needs root"
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return "needs /dev/net/tun: " + err.Error()
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "needs the ip tool (iproute2): " + err.Error()
	}
	return ""
}
