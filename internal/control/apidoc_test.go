package control

import (
	"os"
	"strings"
	"testing"
)

// docs/api.md's table of resources has every endpoint the server
// answers, as "`METHOD /v1/path" with the path's wildcards in capitals
// ({name} is NAME), and no endpoint the server does not answer.
func TestAPIDocListsEveryEndpoint(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		cell, ok := strings.CutPrefix(line, "| `")
		if !ok {
			continue
		}
		method, path, _ := strings.Cut(strings.SplitN(cell, "`", 2)[0], " ")
		path, _, _ = strings.Cut(path, "?")
		documented[method+" "+path] = true
	}
	answered := map[string]bool{}
	for _, e := range (&Server{}).endpoints() {
		path := e.pattern
		if base, wild, ok := strings.Cut(path, "{"); ok {
			path = base + strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(wild, "}"), "..."))
		}
		answered[e.method+" "+path] = true
		if !documented[e.method+" "+path] {
			t.Errorf("docs/api.md does not describe %s %s", e.method, path)
		}
	}
	for d := range documented {
		if strings.HasPrefix(strings.SplitN(d, " ", 2)[1], "/v1/") && !answered[d] {
			t.Errorf("docs/api.md describes %s, which the server does not answer", d)
		}
	}
}
