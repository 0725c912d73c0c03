package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"softnet.dev/internal/vswitch"
)

func TestPodOf(t *testing.T) {
	id := strings.Repeat("ab12", 16)
	for args, want := range map[string]vswitch.Pod{
		"": {},
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-7db6d8ff4d-x2x9q;K8S_POD_INFRA_CONTAINER_ID=" + id + ";K8S_POD_UID=1234": {
			Namespace: "kube-system", Name: "coredns-7db6d8ff4d-x2x9q", InfraContainerID: id},
		"K8S_POD_NAME=web-0.a;K8S_POD_NAMESPACE=default": {Namespace: "default", Name: "web-0.a"},
		"OTHER=x=y;;garbage":                             {},
	} {
		got, err := podOf(args)
		if err != nil || got != want {
			t.Errorf("podOf(%q) = %+v, %v; want %+v", args, got, err, want)
		}
	}
	// What a runtime could not have made: each refused with code 4,
	// never kept as a label or a column.
	for _, args := range []string{
		"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web\"} softnet_port_up{port=\"x",
		"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web\nsoftnet_port_up 1",
		"K8S_POD_NAMESPACE=Default;K8S_POD_NAME=web",
		"K8S_POD_NAMESPACE=default;K8S_POD_NAME=-web",
		"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-",
		"K8S_POD_NAMESPACE=" + strings.Repeat("a", 64) + ";K8S_POD_NAME=web",
		"K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + strings.Repeat("a", 254),
		"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=ab/../cd",
		"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=" + strings.Repeat("a", 129),
		"K8S_POD_NAMESPACE=default",
		"K8S_POD_NAME=web",
		"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_NAME=other",
		"K8S_POD_NAMESPACE=default;K8S_POD_NAME=wéb",
		"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web\x00",
	} {
		_, err := podOf(args)
		var e *types.Error
		if !errors.As(err, &e) || e.Code != types.ErrInvalidEnvironmentVariables {
			t.Errorf("podOf(%q) = %v; want an error of code 4", args, err)
		}
	}
}
