package kubetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"softnet.dev/internal/docblock"
)

// Manifest is an object from a page's yaml block.
type Manifest struct {
	*unstructured.Unstructured
	// Page and Line say where it was written: the block's first line.
	Page string
	Line int
}

func (m Manifest) String() string {
	return fmt.Sprintf("%s:%d: %s %s", m.Page, m.Line, m.GetKind(), m.GetName())
}

// Manifests returns the objects of every yaml block of the Markdown page,
// in order (a block may hold several, between ---).
func Manifests(page string) ([]Manifest, error) {
	blocks, err := docblock.All(page, "yaml")
	if err != nil {
		return nil, err
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%s has no yaml block", page)
	}
	var objs []Manifest
	for _, b := range blocks {
		dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(strings.Join(b.Lines, "\n")), 4096)
		for {
			o := &unstructured.Unstructured{}
			err := dec.Decode(&o.Object)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", page, b.Line, err)
			}
			if len(o.Object) == 0 {
				continue // an empty document, between two ---
			}
			objs = append(objs, Manifest{o, page, b.Line})
		}
	}
	return objs, nil
}

// ApplyPage creates the objects of every yaml block of the Markdown page
// (docs/kubernetes.md: the agent's ServiceAccount, its role and binding,
// the DaemonSet) as the administrator would with kubectl, with strict
// field validation, so that an unknown or misspelt field fails the test.
// It returns them. Nothing runs the DaemonSet's pods: there is no
// controller manager or kubelet.
func (s *Server) ApplyPage(t testing.TB, page string) []Manifest {
	t.Helper()
	objs, err := Manifests(page)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.Config(t, Admin)
	disc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc.Discovery()))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			r = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		_, err = r.Create(context.Background(), o.Unstructured, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
		if err != nil {
			t.Errorf("%s: %v", o, err)
		}
	}
	return objs
}
