package kubetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// KubernetesVersion is the release of kube-apiserver that the tests run,
// the one internal/kubetest/apiserver/go.mod requires.
const KubernetesVersion = "v1.37.2"

// APIServerEnv names the environment variable holding the path of the
// kube-apiserver binary. Without it, the tests look in the cache that
// BuildAPIServer fills.
const APIServerEnv = "SOFTNET_KUBE_APISERVER"

// buildHint says how to get the binary, for skip messages.
const buildHint = "build it with `go run ./internal/kubetest/cmd/build-apiserver` " +
	"(about 6 minutes on 2 cores; it is cached) or set " + APIServerEnv + " to one"

// apiserverModule is the nested module's directory, relative to the main
// module's root.
const apiserverModule = "internal/kubetest/apiserver"

// moduleDir returns the directory of the module that builds
// kube-apiserver, found through the main module's go.mod, so that it
// works from any package's test directory and from `go run`.
func moduleDir() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("kubetest: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("kubetest: not inside the softnet module (go env GOMOD is empty)")
	}
	return filepath.Join(filepath.Dir(gomod), apiserverModule), nil
}

// CachedAPIServer returns where BuildAPIServer puts the binary built from
// the nested module as it is now: a directory named by the Kubernetes
// version and a hash of the module's go.mod and go.sum, so that a changed
// module builds anew instead of running an old binary. The cache is
// $XDG_CACHE_HOME/softnet (~/.cache/softnet).
func CachedAPIServer() (string, error) {
	dir, err := moduleDir()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, name := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("kubetest: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kubetest: cache directory: %w", err)
	}
	key := "kube-apiserver-" + KubernetesVersion + "-" + hex.EncodeToString(h.Sum(nil))[:12]
	return filepath.Join(cache, "softnet", key, "kube-apiserver"), nil
}

// findAPIServer returns the kube-apiserver to run: $SOFTNET_KUBE_APISERVER,
// or else the cached build. When there is none it returns why, naming
// what is missing and how to get it.
func findAPIServer() (path, missing string) {
	if p := os.Getenv(APIServerEnv); p != "" {
		if err := isExecutable(p); err != nil {
			return "", fmt.Sprintf("needs kube-apiserver %s: %s=%s: %v", KubernetesVersion, APIServerEnv, p, err)
		}
		return p, ""
	}
	p, err := CachedAPIServer()
	if err != nil {
		return "", fmt.Sprintf("needs kube-apiserver %s: %v; %s", KubernetesVersion, err, buildHint)
	}
	if err := isExecutable(p); err != nil {
		return "", fmt.Sprintf("needs kube-apiserver %s, not built in %s: %s", KubernetesVersion, filepath.Dir(p), buildHint)
	}
	return p, ""
}

func isExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// BuildAPIServer builds kube-apiserver from the nested module into out,
// or, when out is "", into the cache (CachedAPIServer) unless it is there
// already; it returns the binary's path and says what it does on w. The
// build downloads the module's dependencies through the Go module proxy
// on first use.
func BuildAPIServer(ctx context.Context, w io.Writer, out string) (string, error) {
	bin := out
	if bin == "" {
		var err error
		if bin, err = CachedAPIServer(); err != nil {
			return "", err
		}
		if isExecutable(bin) == nil {
			fmt.Fprintf(w, "kube-apiserver %s: cached in %s\n", KubernetesVersion, bin)
			return bin, nil
		}
	} else if !filepath.IsAbs(bin) {
		abs, err := filepath.Abs(bin)
		if err != nil {
			return "", fmt.Errorf("kubetest: %w", err)
		}
		bin = abs
	}
	dir, err := moduleDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	// Built beside its final name and renamed, so that an interrupted
	// build never leaves a binary that looks complete.
	tmp := bin + ".partial"
	fmt.Fprintf(w, "kube-apiserver %s: building into %s\n", KubernetesVersion, bin)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, "k8s.io/kubernetes/cmd/kube-apiserver")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("kubetest: build kube-apiserver in %s: %w", dir, err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	fmt.Fprintf(w, "kube-apiserver %s: built in %s\n", KubernetesVersion, time.Since(start).Round(time.Second))
	return bin, nil
}
