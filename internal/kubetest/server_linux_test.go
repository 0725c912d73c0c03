package kubetest

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestServerSurvivesFaults starts the servers, creates a Node, and checks
// what the fault controls promise: the Node outlives a killed and
// restarted API server (it is in etcd), the API server fails requests
// while etcd is down and serves them again once etcd is back, by itself.
// The agent's identity authenticates, and RBAC (with no binding for it
// yet) refuses it.
func TestServerSurvivesFaults(t *testing.T) {
	s := Start(t)
	admin := s.Client(t, Admin)
	ctx := context.Background()

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "kubetest-node1", Annotations: map[string]string{"softnet.dev/test": "1"}},
		Spec:       corev1.NodeSpec{PodCIDRs: []string{"198.18.60.0/24", "2001:db8:60::/64"}},
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node: %v", err)
	}

	// The agent's identity is known (not 401) and has no rights yet (403).
	_, err := s.Client(t, Agent).CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the agent getting a node without a role: %v, want forbidden", err)
	}

	s.StopAPIServer(t)
	if _, err := admin.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err == nil {
		t.Fatal("got the node with the API server killed")
	}
	s.StartAPIServer(t)
	checkNode(t, admin, node)

	s.StopEtcd(t)
	// The API server stays up and fails the request, or holds it waiting
	// for etcd (up to its own 60 s timeout, so the node may yet be made
	// once etcd is back: the node made below has another name).
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = admin.CoreV1().Nodes().Create(short, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kubetest-etcd-down"}}, metav1.CreateOptions{})
	cancel()
	if err == nil {
		t.Fatal("created a node with etcd killed")
	}
	if !s.apiserver.running() {
		t.Fatalf("the API server exited when etcd was killed: %v", s.apiserver.exitError())
	}
	s.StartEtcd(t)
	s.WaitReady(t)
	checkNode(t, admin, node)
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kubetest-node2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create a node once etcd is back: %v", err)
	}

	// A kubeconfig file reaches the same server as the same user.
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig(t, Admin))
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkNode(t, fromFile, node)
}

// checkNode fails unless the server has node as it was created.
func checkNode(t *testing.T, c kubernetes.Interface, want *corev1.Node) {
	t.Helper()
	got, err := c.CoreV1().Nodes().Get(context.Background(), want.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", want.Name, err)
	}
	if got.Annotations["softnet.dev/test"] != "1" || len(got.Spec.PodCIDRs) != 2 || got.Spec.PodCIDRs[1] != want.Spec.PodCIDRs[1] {
		t.Errorf("node %s: annotations %v, pod CIDRs %v, want %v, %v", want.Name, got.Annotations, got.Spec.PodCIDRs, want.Annotations, want.Spec.PodCIDRs)
	}
}

// Without kube-apiserver, Start skips naming it and how to build it.
func TestFindAPIServerMissing(t *testing.T) {
	t.Setenv(APIServerEnv, "/nonexistent/kube-apiserver")
	_, missing := findAPIServer()
	want := "needs kube-apiserver " + KubernetesVersion + ": " + APIServerEnv + "=/nonexistent/kube-apiserver"
	if !strings.HasPrefix(missing, want) {
		t.Errorf("findAPIServer with a missing file: %q, want it to start with %q", missing, want)
	}
	t.Setenv(APIServerEnv, "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	_, missing = findAPIServer()
	if !strings.Contains(missing, "go run ./internal/kubetest/cmd/build-apiserver") {
		t.Errorf("findAPIServer with an empty cache: %q, want it to say how to build it", missing)
	}
}
