package docblock

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestRead(t *testing.T) {
	page := filepath.Join(t.TempDir(), "page.md")
	text := "# Page\n\n<!-- test: a -->\n```sh\necho one \\\n  two\n\necho three\n```\n\n<!-- test: b -->\ntext\n```\nx\n```\n<!-- test: c -->\n```\nunterminated\n"
	if err := os.WriteFile(page, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Read(page, "test: a")
	if want := []string{"echo one \\", "  two", "", "echo three"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("block a: %q, %v; want %q", got, err, want)
	}
	for _, name := range []string{"test: b", "test: c", "test: d"} {
		if got, err := Read(page, name); err == nil {
			t.Errorf("block %s: %q, want an error", name, got)
		}
	}
}
