package control

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"softnet.dev/internal/netnstest"
	"softnet.dev/internal/unixsock"
)

// logBuffer collects a logger's JSON lines; the switch's workers and the
// server's handlers write to it at once.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the lines logged with message msg.
func (b *logBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// Every change made through the API is logged with the credentials of
// the process that asked: here, the test's own.
func TestChangesLogTheCaller(t *testing.T) {
	ls := startLive(t)
	ns3 := netnstest.New(t)
	ctx := context.Background()
	if err := ls.client.Post(ctx, "/v1/ports", PortRequest{Spec: "tun:ct2,netns=" + ns3.Name}, nil); err != nil {
		t.Fatal(err)
	}
	if err := ls.client.Post(ctx, "/v1/routes", Route{Prefix: "198.18.3.0/24", Port: "ct2"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := ls.client.Delete(ctx, "/v1/routes/198.18.3.0/24"); err != nil {
		t.Fatal(err)
	}
	if err := ls.client.Delete(ctx, "/v1/ports/ct2"); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"uid": float64(os.Getuid()), "gid": float64(os.Getgid()), "pid": float64(os.Getpid())}
	for _, msg := range []string{"port added", "route added", "route removed", "port removed"} {
		recs := ls.logs.records(t, msg)
		if len(recs) != 1 {
			t.Errorf("%q logged %d times, want once: %v", msg, len(recs), recs)
			continue
		}
		by, _ := recs[0]["by"].(map[string]any)
		for k, v := range want {
			if by[k] != v {
				t.Errorf("%q logged by %v, want %v", msg, recs[0]["by"], want)
				break
			}
		}
	}
}

// --control-group: the socket belongs to the group, mode 0660.
func TestListenGroup(t *testing.T) {
	netnstest.RequireRoot(t) // giving a file to a group one is not in needs CAP_CHOWN
	gid := otherGroup(t)
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := Listen(path, gid)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if int(st.Gid) != gid || fi.Mode().Perm() != 0o660 || st.Uid != uint32(os.Geteuid()) {
		t.Errorf("socket %v owned by %d:%d, want mode 0660 and %d:%d", fi.Mode(), st.Uid, st.Gid, os.Geteuid(), gid)
	}
}

// otherGroup returns a group that is not the process's, so that a
// socket of that group cannot be one left with the process's group.
func otherGroup(t *testing.T) int {
	t.Helper()
	for _, name := range []string{"nogroup", "daemon", "bin", "sys"} {
		if g, err := unixsock.LookupGroup(name); err == nil && g != os.Getegid() {
			return g
		}
	}
	// Root may give a file to any ID, named or not.
	if os.Getegid() == 65534 {
		return 65533
	}
	return 65534
}
