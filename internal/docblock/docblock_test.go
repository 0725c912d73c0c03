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

func TestAll(t *testing.T) {
	page := filepath.Join(t.TempDir(), "page.md")
	text := "# Page\n```yaml\na: 1\n```\n```sh\necho\n```\n<!-- x -->\n```yaml\nb: 2\n\nc: 3\n```\n"
	if err := os.WriteFile(page, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := All(page, "yaml")
	if err != nil || len(got) != 2 || got[0].Line != 2 || !slices.Equal(got[0].Lines, []string{"a: 1"}) ||
		got[1].Line != 9 || !slices.Equal(got[1].Lines, []string{"b: 2", "", "c: 3"}) {
		t.Errorf("All: %+v, %v; want the blocks at lines 2 and 9", got, err)
	}
	if err := os.WriteFile(page, []byte(text+"```yaml\nd: 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := All(page, "yaml"); err == nil {
		t.Errorf("All of a page with an unclosed block: %+v, want an error", got)
	}
}
