// Package agentstatus is the status file of softnet agent, the node
// agent: what it knows of its node (the pod CIDRs that softnet-cni's
// IPAM takes its ranges from) and of its last sync, for softnet ctl
// agent status. It depends on nothing of Kubernetes, so that
// softnet-cni and ctl read it without the client's weight.
package agentstatus

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"time"
)

// DefaultPath is where the agent of a node's switch keeps its status.
const DefaultPath = "/run/softnet/agent.json"

// Status is the status file's contents.
type Status struct {
	Node     string   `json:"node"`
	PodCIDRs []string `json:"pod_cidrs"` // the Node's spec.podCIDRs
	VTEP     string   `json:"vtep,omitempty"`
	VTEPMAC  string   `json:"vtep_mac,omitempty"`
	Port     string   `json:"port"`
	Peers    int      `json:"peers"`
	Routes   int      `json:"routes"`
	// Synced is when the switch was last found or made as the cluster
	// says; Error the last attempt's error, empty if it succeeded;
	// Skipped the nodes left out and why.
	Synced  time.Time `json:"synced,omitzero"`
	Error   string    `json:"error,omitempty"`
	Skipped []string  `json:"skipped,omitempty"`
	// APIReachable is false from a failed list or watch of Nodes until
	// the next that succeeds.
	APIReachable bool      `json:"api_reachable"`
	Updated      time.Time `json:"updated"`
	PID          int       `json:"pid"`
}

// Read reads the status file at path.
func Read(path string) (Status, error) {
	var st Status
	b, err := os.ReadFile(path)
	if err != nil {
		return st, fmt.Errorf("agent status %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("agent status %s: %w", path, err)
	}
	return st, nil
}

// PodCIDRs reads the node's pod CIDRs from the status file at path: an
// error if there is none yet.
func PodCIDRs(path string) ([]netip.Prefix, error) {
	st, err := Read(path)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, s := range st.PodCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("agent status %s: pod CIDR %q: %w", path, s, err)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("agent status %s: node %s has no pod CIDRs yet (spec.podCIDRs: the controller manager's --allocate-node-cidrs, or set by hand)", path, st.Node)
	}
	return out, nil
}
