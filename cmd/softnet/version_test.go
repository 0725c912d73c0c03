package main

import (
	"encoding/json"
	"testing"

	"softnet.dev/internal/buildinfo"
)

// softnet version and --version say what the build info says.
func TestVersion(t *testing.T) {
	want := buildinfo.Get()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, _, code := run(t, args...)
		if code != exitOK || out != want.String()+"\n" {
			t.Errorf("%v: exit %d, %q; want %q", args, code, out, want.String())
		}
	}
	out, _, code := run(t, "version", "--json")
	var got buildinfo.Info
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || got != want {
		t.Errorf("version --json: exit %d, %q; want %+v", code, out, want)
	}
}
