package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"softnet.dev/internal/vswitch"
)

// referenceRows returns the first cells of the tables of
// docs/reference.md's section heading, without their backticks, each
// cut at its first blank after skip bytes ("--port SPEC" gives "--port").
func referenceRows(t *testing.T, heading string, words int) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/reference.md has no %q", heading)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var rows []string
	for _, line := range strings.Split(sec, "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			f := strings.Fields(rest[:strings.IndexByte(rest, '`')])
			rows = append(rows, strings.Join(f[:min(words, len(f))], " "))
		}
	}
	slices.Sort(rows)
	return rows
}

// docs/reference.md lists exactly softnet switch's and softnet agent's
// flags and softnet ctl's commands.
func TestReferenceListsEveryFlag(t *testing.T) {
	var flags []string
	newSwitchCmd().Flags().VisitAll(func(f *pflag.Flag) { flags = append(flags, "--"+f.Name) })
	slices.Sort(flags)
	if got := referenceRows(t, "## `softnet switch` flags", 1); !slices.Equal(got, flags) {
		t.Errorf("reference: switch flags %q, the command's %q", got, flags)
	}
	flags = nil
	newAgentCmd().Flags().VisitAll(func(f *pflag.Flag) { flags = append(flags, "--"+f.Name) })
	slices.Sort(flags)
	if got := referenceRows(t, "## `softnet agent` flags", 1); !slices.Equal(got, flags) {
		t.Errorf("reference: agent flags %q, the command's %q", got, flags)
	}
	var cmds []string
	var walk func(c *cobra.Command, path string)
	walk = func(c *cobra.Command, path string) {
		if !c.HasSubCommands() {
			cmds = append(cmds, path)
		}
		for _, sub := range c.Commands() {
			if sub.Name() != "help" && sub.Name() != "completion" {
				walk(sub, path+" "+sub.Name())
			}
		}
	}
	walk(newCtlCmd(), "ctl")
	slices.Sort(cmds)
	if got := referenceRows(t, "## `softnet ctl` commands", 3); !slices.Equal(got, cmds) {
		t.Errorf("reference: ctl commands %q, ctl's %q", got, cmds)
	}
}

// The top-level help names every kind of port the switch has, not only
// TUN and TAP.
func TestTopLevelHelpNamesTheKinds(t *testing.T) {
	out, _, code := run(t, "--help")
	if code != exitOK || strings.Contains(out, "between TUN or TAP") {
		t.Fatalf("exit %d, help:\n%s", code, out)
	}
	line := out[strings.Index(out, "  switch "):]
	line = line[:strings.IndexByte(line, '\n')]
	for _, k := range vswitch.Kinds() {
		if !strings.Contains(line, k) {
			t.Errorf("the switch command's line %q lacks %s", line, k)
		}
	}
}
