package agent

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// docs/kubernetes.md's table of the agent's metrics lists exactly those
// NewMetrics registers.
func TestMetricsDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var registered []string
	for _, mf := range mfs {
		registered = append(registered, mf.GetName())
	}
	b, err := os.ReadFile("../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## The node agent\n")
	if !ok {
		t.Fatal("docs/kubernetes.md has no section on the node agent")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var documented []string
	for _, line := range strings.Split(sec, "\n") {
		if rest, ok := strings.CutPrefix(line, "| `softnet_agent_"); ok {
			documented = append(documented, "softnet_agent_"+rest[:strings.IndexByte(rest, '`')])
		}
	}
	slices.Sort(registered)
	slices.Sort(documented)
	if !slices.Equal(registered, documented) {
		t.Errorf("docs/kubernetes.md lists %q, the agent registers %q", documented, registered)
	}
}
