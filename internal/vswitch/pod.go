package vswitch

import (
	"fmt"
	"strings"
)

// Pod is the Kubernetes pod whose network a port is, as a container
// runtime tells the CNI plugin (CNI_ARGS' K8S_POD_NAMESPACE,
// K8S_POD_NAME and K8S_POD_INFRA_CONTAINER_ID). The switch keeps it with
// the port and shows it in the API, ctl and the softnet_port_info
// metric, by which every per-port series joins to its pod. It is not an
// option of the port's spec: it says whose the port is, not what it does.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// InfraContainerID is the sandbox's ("pause") container.
	InfraContainerID string `json:"infra_container_id,omitempty"`
}

// IsZero reports whether p names no pod.
func (p Pod) IsZero() bool { return p == Pod{} }

// String is "namespace/name", as kubectl writes a pod.
func (p Pod) String() string {
	if p.IsZero() {
		return ""
	}
	return p.Namespace + "/" + p.Name
}

// Validate checks p as Kubernetes checks a pod's names: the namespace a
// DNS label, the name a DNS subdomain, the container ID letters, digits
// and ._- (containerd's and CRI-O's are 64 hex digits). Anything else is
// not the runtime's doing, and is refused rather than kept: these are
// labels of metrics and columns of tables.
func (p Pod) Validate() error {
	switch {
	case p.IsZero():
		return nil
	case p.Namespace == "" || p.Name == "":
		return fmt.Errorf("pod %q: a namespace and a name, or neither", p.String())
	case !dnsName(p.Namespace, 63, false):
		return fmt.Errorf("pod namespace %q: want a DNS label (at most 63 of a-z, 0-9 and -, a letter or digit at each end)", p.Namespace)
	case !dnsName(p.Name, 253, true):
		return fmt.Errorf("pod name %q: want a DNS subdomain (at most 253 of a-z, 0-9, - and ., a letter or digit at each end)", p.Name)
	case len(p.InfraContainerID) > 128 || strings.IndexFunc(p.InfraContainerID, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) >= 0:
		return fmt.Errorf("pod infra container ID %q: want at most 128 of letters, digits and ._-", p.InfraContainerID)
	}
	return nil
}

// dnsName reports whether s is a DNS label (or, with dots, a subdomain)
// as Kubernetes' names are: lower case letters, digits and -, at most
// max bytes, a letter or digit at each end.
func dnsName(s string, max int, dots bool) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || dots && c == '.') && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}
