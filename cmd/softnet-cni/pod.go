package main

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"softnet.dev/internal/vswitch"
)

// podOf reads the pod from CNI_ARGS (KEY=VALUE;...): the keys a
// Kubernetes runtime (containerd, CRI-O) sets, K8S_POD_NAMESPACE,
// K8S_POD_NAME and K8S_POD_INFRA_CONTAINER_ID. Other keys are the other
// plugins' and are ignored, as is a runtime that gives none of these
// (cnitool, podman). A value Kubernetes could not have made is refused
// with code 4 (invalid environment variables): it would be a label of
// the switch's metrics and a column of its tables.
func podOf(cniArgs string) (vswitch.Pod, error) {
	var pod vswitch.Pod
	seen := map[string]bool{}
	for pair := range strings.SplitSeq(cniArgs, ";") {
		k, v, _ := strings.Cut(pair, "=")
		var to *string
		switch k {
		case "K8S_POD_NAMESPACE":
			to = &pod.Namespace
		case "K8S_POD_NAME":
			to = &pod.Name
		case "K8S_POD_INFRA_CONTAINER_ID":
			to = &pod.InfraContainerID
		default:
			continue
		}
		if seen[k] {
			return vswitch.Pod{}, types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_ARGS: "+k+" is given twice", "")
		}
		seen[k] = true
		*to = v
	}
	if err := pod.Validate(); err != nil {
		return vswitch.Pod{}, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS: %v", err), "")
	}
	return pod, nil
}
