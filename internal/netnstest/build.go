package netnstest

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildSoftnet builds the softnet command into the test's temporary
// directory, for tests that run it as a process of its own, and returns
// its path. The build cache makes every build after the first quick.
func BuildSoftnet(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "softnet")
	if out, err := exec.Command("go", "build", "-o", bin, "softnet.dev/cmd/softnet").CombinedOutput(); err != nil {
		t.Fatalf("netnstest: build softnet: %v\n%s", err, out)
	}
	return bin
}
