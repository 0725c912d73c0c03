// Package kubetest runs a real Kubernetes API server for tests: Debian's
// etcd and kube-apiserver built from the Go module proxy (the nested
// module internal/kubetest/apiserver), both on 127.0.0.1, with a static
// token file, RBAC and nothing else of a cluster (no controller manager,
// scheduler or kubelet: a test creates the objects those would).
//
// Start(t) starts both and returns a Server with client configurations
// and kubeconfig files for an administrator and for service-account
// identities, and fault controls: stop and restart the API server or
// etcd, on the same ports and data directory. Everything is stopped in
// t.Cleanup, by PID, also when the test fails.
//
// Where kube-apiserver comes from: $SOFTNET_KUBE_APISERVER, or else the
// cache that `go run ./internal/kubetest/cmd/build-apiserver` fills
// (~/.cache/softnet/kube-apiserver-VERSION-HASH). etcd is the `etcd`
// on PATH (Debian package etcd-server). Without either, Start skips the
// test saying what is missing and how to get it, or fails it under
// SOFTNET_REQUIRE_ROOT_TESTS=1, as netnstest's requirements do.
package kubetest
