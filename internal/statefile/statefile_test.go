package statefile

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A state file reads back what was saved last, is refused to a second
// holder while the first has it, and can be moved aside.
func TestStateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "state.json")
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := f.Load(); b != nil || err != nil {
		t.Fatalf("a new state file: %q, %v", b, err)
	}
	for _, s := range []string{"one", "two, longer", "3"} {
		if err := f.Save([]byte(s)); err != nil {
			t.Fatal(err)
		}
		if b, err := f.Load(); string(b) != s || err != nil {
			t.Fatalf("saved %q, loaded %q, %v", s, b, err)
		}
	}
	if _, err := os.Stat(path + ".new"); err == nil {
		t.Error("the new file was left beside the state file")
	}
	_, err = Open(path)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) || !strings.Contains(err.Error(), path) {
		t.Errorf("a second holder: %v", err)
	}
	aside, err := f.MoveAside()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(aside); string(b) != "3" || err != nil || !strings.HasPrefix(aside, path+".bad-") {
		t.Errorf("moved aside to %s: %q, %v", aside, b, err)
	}
	if b, err := f.Load(); b != nil || err != nil {
		t.Errorf("after moving aside: %q, %v", b, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := Open(path)
	if err != nil {
		t.Fatalf("once released: %v", err)
	}
	g.Close()
}

// A file that cannot be read is an error naming it, not an empty state.
func TestStateFileUnreadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	if err := os.Mkdir(path, 0o755); err != nil { // a directory: read fails
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Load(); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("load of a directory: %v", err)
	}
	if err := f.Save([]byte("x")); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("save over a directory: %v", err)
	}
}
