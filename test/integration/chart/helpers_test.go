package chart

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// Paths of what the chart tests check, relative to the repository root.
const (
	mockValuesFile  = itest.ChartDir + "/values-mock.yaml"
	pluginRulesFile = itest.ChartDir + "/files/rbac/kubelet-plugin.yaml"
	// The grouper's rules (cluster, release namespace).
	grouperRulesFile          = itest.ChartDir + "/files/rbac/grouper.yaml"
	grouperNamespaceRulesFile = itest.ChartDir + "/files/rbac/grouper-namespace.yaml"
	kindConfigFile            = "deployments/kind/kind-config.yaml"
	kindExampleDir            = "deployments/kind/example"
	kindUpScript              = "hack/kind-up.sh"
)

// get returns the rendered object kind/name as T, failing the test when it
// is missing or of another type.
func get[T runtime.Object](t *testing.T, r *itest.Rendered, kind, name string) T {
	t.Helper()
	obj, ok := r.Typed[kind+"/"+name]
	if !ok {
		t.Fatalf("%s/%s not rendered; have %v", kind, name, r.Keys())
	}
	typed, ok := obj.(T)
	if !ok {
		t.Fatalf("%s/%s is a %T", kind, name, obj)
	}
	return typed
}

// wantDenied checks err against want: "" means the request must succeed,
// otherwise it must be refused with a message containing want.
func wantDenied(err error, want string) error {
	switch {
	case want == "" && err != nil:
		return fmt.Errorf("want allowed, got %w", err)
	case want == "":
		return nil
	case err == nil:
		return fmt.Errorf("want denied with %q, got allowed", want)
	case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
		return fmt.Errorf("want Forbidden with %q, got %w", want, err)
	case !slices.ContainsFunc(strings.Split(want, anyOfSep), func(w string) bool { return strings.Contains(err.Error(), w) }):
		return fmt.Errorf("want a message containing %q, got %w", want, err)
	}
	return nil
}

const anyOfSep = "\n|\n"

// anyOf accepts any of several denials (several policies may refuse one
// request; the apiserver reports whichever it evaluated first).
func anyOf(wants ...string) string { return strings.Join(wants, anyOfSep) }
