package buildinfo

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFrom(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-02T12:00:00Z"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want Info
		str  string
	}{
		{"release", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: Module, Version: "v1.2.0"}}, true,
			Info{Module: Module, Version: "v1.2.0", Go: "go1.26.8"}, "softnet.dev v1.2.0 (go1.26.8)"},
		{"checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: Module, Version: Devel}, Settings: vcs}, true,
			Info{Module: Module, Version: Devel, Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2026-12-02T12:00:00Z", Modified: true, Go: "go1.26.8"},
			"softnet.dev (devel) revision 0123456789abcdef0123456789abcdef01234567 2026-12-02T12:00:00Z modified (go1.26.8)"},
		{"no vcs", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: Module, Version: Devel}}, true,
			Info{Module: Module, Version: Devel, Go: "go1.26.8"}, "softnet.dev (devel) without a VCS revision"},
		{"empty version", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: Module}}, true,
			Info{Module: Module, Version: Devel, Go: "go1.26.8"}, "softnet.dev (devel) without"},
		// softnet's packages in another program: its settings are that
		// program's, not softnet's.
		{"dependency", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/vpn", Version: "v3.0.0"}, Settings: vcs,
			Deps: []*debug.Module{{Path: "golang.org/x/sys", Version: "v0.30.0"}, {Path: Module, Version: "v1.1.0"}}}, true,
			Info{Module: Module, Version: "v1.1.0", Go: "go1.26.8"}, "softnet.dev v1.1.0 (go1.26.8)"},
		{"replaced dependency", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/vpn"},
			Deps: []*debug.Module{{Path: Module, Version: "v1.1.0", Replace: &debug.Module{Path: "../softnet", Version: ""}}}}, true,
			Info{Module: Module, Version: "v1.1.0", Go: "go1.26.8"}, "softnet.dev v1.1.0"},
		{"no build info", nil, false, Info{Module: Module, Version: "unknown", Go: "unknown"}, "softnet.dev unknown (unknown)"},
	} {
		got := From(c.bi, c.ok)
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
		if s := got.String(); !strings.HasPrefix(s, c.str) {
			t.Errorf("%s: %q, want it to begin %q", c.name, s, c.str)
		}
	}
}

// The test binary is softnet's main module, built without VCS stamping.
func TestGet(t *testing.T) {
	in := Get()
	if in.Module != Module || in.Version == "" || !strings.HasPrefix(in.Go, "go") {
		t.Fatalf("%+v", in)
	}
}

// A binary built from a git checkout says which commit, and whether the
// tree was modified: the toolchain stamps them and Get reads them back.
// The binary is a module softnet.dev of this package alone, so that the
// test builds in seconds; a git worktree (whose .git is a file) is not
// stamped by Go, hence a checkout of its own.
func TestGetReadsWhatTheToolchainStamps(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git to make a checkout with")
	}
	repo := t.TempDir()
	src, err := os.ReadFile("buildinfo.go")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := strings.TrimPrefix(runtime.Version(), "go")
	for name, text := range map[string]string{
		"go.mod":                      "module " + Module + "\n\ngo " + goVersion + "\n",
		"internal/buildinfo/bi.go":    string(src),
		"cmd/v/main.go":               "package main\n\nimport (\n\t\"encoding/json\"\n\t\"os\"\n\n\t\"softnet.dev/internal/buildinfo\"\n)\n\nfunc main() { json.NewEncoder(os.Stdout).Encode(buildinfo.Get()) }\n",
		"internal/buildinfo/.gitkeep": "",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(repo, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "--quiet")
	git("add", ".")
	git("commit", "--quiet", "-m", "a commit")
	head := git("rev-parse", "HEAD")
	version := func() Info {
		bin := filepath.Join(t.TempDir(), "v")
		build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/v")
		build.Dir = repo
		build.Env = append(os.Environ(), "GOFLAGS=", "GOTOOLCHAIN=local")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
		out, err := exec.Command(bin).Output()
		var in Info
		if err != nil || json.Unmarshal(out, &in) != nil {
			t.Fatalf("%s: %v, %q", bin, err, out)
		}
		return in
	}
	in := version()
	if in.Module != Module || in.Revision != head || in.Time == "" || in.Modified || in.Go != runtime.Version() ||
		!strings.Contains(in.String(), " revision "+head+" ") {
		t.Errorf("a build of %s says %+v: %s", head, in, in)
	}
	if err := os.WriteFile(filepath.Join(repo, "internal/buildinfo/.gitkeep"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if in := version(); in.Revision != head || !in.Modified || !strings.HasSuffix(in.String(), " modified ("+runtime.Version()+")") {
		t.Errorf("a build of a modified %s says %+v: %s", head, in, in)
	}
}
