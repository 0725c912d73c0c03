package vswitch

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// referenceSection returns the lines of docs/reference.md under the
// heading, up to the next heading of its level or above.
func referenceSection(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	level := heading[:strings.IndexByte(heading, ' ')+1] // "## "
	var out []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if in && strings.HasPrefix(line, "#") && len(line) > 0 {
			hashes := line[:strings.IndexFunc(line, func(r rune) bool { return r != '#' })]
			if len(hashes) <= len(level)-1 {
				break
			}
		}
		if line == heading {
			in = true
			continue
		}
		if in {
			out = append(out, line)
		}
	}
	if !in {
		t.Fatalf("docs/reference.md has no %q", heading)
	}
	return out
}

// referenceRows returns the first cell of the section's table rows, as
// written between backticks ("| `vni` | ..." gives "vni"), sorted.
func referenceRows(lines []string) []string {
	var rows []string
	for _, line := range lines {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			rows = append(rows, rest[:strings.IndexByte(rest, '`')])
		}
	}
	slices.Sort(rows)
	return rows
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// docs/reference.md lists every kind of the table with exactly its own
// options, exactly the options every port has and exactly the
// configuration file's directives: an option the parser takes cannot be
// missing from it, nor one it does not take be there.
func TestReferenceListsEveryOption(t *testing.T) {
	for _, k := range kinds {
		sec := referenceSection(t, "### `"+k.Name+"`")
		if !strings.Contains(strings.Join(sec, "\n"), "`"+k.Synopsis) {
			t.Errorf("reference: kind %s does not give its spec %s", k.Name, k.Synopsis)
		}
		if got, want := referenceRows(sec), sorted(k.Keys); !slices.Equal(got, want) {
			t.Errorf("reference: kind %s lists the options %q, the kind has %q", k.Name, got, want)
		}
	}
	var headings []string
	for _, line := range referenceSection(t, "## Ports") {
		if name, ok := strings.CutPrefix(line, "### `"); ok {
			headings = append(headings, strings.TrimSuffix(name, "`"))
		}
	}
	if want := sorted(Kinds()); !slices.Equal(sorted(headings), want) {
		t.Errorf("reference: kinds %q, the table has %q", headings, want)
	}
	var common []string
	for _, c := range commonOptions {
		common = append(common, c.name)
	}
	if got, want := referenceRows(referenceSection(t, "## Options every port has")), sorted(common); !slices.Equal(got, want) {
		t.Errorf("reference: the options every port has are %q, the parser's %q", got, want)
	}
	var directives []string
	for _, line := range strings.Split(Directives, "\n") {
		directives = append(directives, strings.Fields(line)[0]+" "+strings.Fields(line)[1])
	}
	if got, want := referenceRows(referenceSection(t, "## The configuration file")), sorted(directives); !slices.Equal(got, want) {
		t.Errorf("reference: directives %q, the parser's %q", got, want)
	}
}
