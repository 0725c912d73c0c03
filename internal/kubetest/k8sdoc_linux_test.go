package kubetest

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// k8sPage is the page whose manifests TestManifestsFromDocs applies.
const k8sPage = "../../docs/kubernetes.md"

// TestManifestsFromDocs applies every YAML block of docs/kubernetes.md,
// as written there, to a real API server (strict field validation: an
// unknown or misspelt field fails), so that no manifest on the page is
// untested text. Then it checks what the RBAC manifests grant the
// agent's ServiceAccount: get, list, watch and patch on nodes, as
// SubjectAccessReviews and as requests made with its identity, and
// nothing more (no delete, create or update of nodes, no secrets); and
// that the DaemonSets run as that ServiceAccount.
func TestManifestsFromDocs(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	admin := s.Client(t, Admin)

	objs := s.ApplyPage(t, k8sPage)

	// The agent's own node and another, as the controller manager and
	// kubelet would have made them.
	for _, name := range []string{"node-a", "node-b"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDRs: []string{"198.18.70.0/24"}}}
		if name == "node-b" {
			n.Spec.PodCIDRs = []string{"198.18.71.0/24"}
		}
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	allowed := []authorizationv1.ResourceAttributes{
		{Verb: "get", Resource: "nodes", Name: "node-a"},
		{Verb: "list", Resource: "nodes"},
		{Verb: "watch", Resource: "nodes"},
		{Verb: "patch", Resource: "nodes", Name: "node-a"},
	}
	denied := []authorizationv1.ResourceAttributes{
		{Verb: "delete", Resource: "nodes", Name: "node-b"},
		{Verb: "create", Resource: "nodes"},
		{Verb: "update", Resource: "nodes", Name: "node-a"},
		{Verb: "patch", Resource: "nodes", Subresource: "status", Name: "node-a"},
		{Verb: "get", Resource: "secrets", Namespace: "kube-system"},
		{Verb: "list", Resource: "secrets"},
		{Verb: "list", Resource: "pods"},
		{Verb: "patch", Group: "apps", Resource: "daemonsets", Namespace: "kube-system", Name: "softnet"},
	}
	for _, want := range []struct {
		attrs   []authorizationv1.ResourceAttributes
		allowed bool
	}{{allowed, true}, {denied, false}} {
		for _, a := range want.attrs {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: Agent.Name, Groups: Agent.Groups, ResourceAttributes: &a,
			}}
			got, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("SubjectAccessReview %+v: %v", a, err)
			}
			if got.Status.Allowed != want.allowed {
				t.Errorf("%s may %s %s/%s %s in %q: %v, want %v (%s)", Agent.Name, a.Verb, a.Resource, a.Subresource, a.Name, a.Namespace,
					got.Status.Allowed, want.allowed, got.Status.Reason)
			}
		}
	}

	// The same, as requests made with the agent's identity: what it does
	// is allowed, and a delete is refused.
	agent := s.Client(t, Agent)
	list, err := agent.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("the agent lists nodes: %v (%d nodes, want 2)", err, len(list.Items))
	}
	w, err := agent.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("the agent watches nodes: %v", err)
	}
	w.Stop()
	patch := `{"metadata":{"annotations":{"softnet.dev/vtep":"198.18.72.1"}}}`
	if _, err := agent.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Errorf("the agent annotates its node: %v", err)
	}
	if err := agent.CoreV1().Nodes().Delete(ctx, "node-b", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the agent deletes a node: %v, want forbidden", err)
	}
	if _, err := agent.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the agent lists secrets: %v, want forbidden", err)
	}

	// Every DaemonSet on the page runs as the ServiceAccount that the
	// role is bound to, with the node's network.
	var daemonSets int
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		daemonSets++
		ds, err := admin.AppsV1().DaemonSets(o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("DaemonSet %s: %v", o.GetName(), err)
		}
		checkDaemonSet(t, ds)
	}
	if daemonSets == 0 {
		t.Errorf("%s has no DaemonSet", k8sPage)
	}
}

// checkDaemonSet fails unless ds runs as the agent's ServiceAccount on
// the host's network.
func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if sa := "system:serviceaccount:" + ds.Namespace + ":" + spec.ServiceAccountName; sa != Agent.Name {
		t.Errorf("DaemonSet %s runs as %s, want %s (the role's subject)", ds.Name, sa, Agent.Name)
	}
	if !spec.HostNetwork {
		t.Errorf("DaemonSet %s: not hostNetwork", ds.Name)
	}
}
