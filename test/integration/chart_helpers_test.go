package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// Paths of what the chart tests check, relative to the repository root.
const (
	chartDir          = "deployments/helm/gpufabric"
	mockValuesFile    = chartDir + "/values-mock.yaml"
	pluginRulesFile   = chartDir + "/files/rbac/kubelet-plugin.yaml"
	kindConfigFile    = "deployments/kind/kind-config.yaml"
	kindExampleDir    = "deployments/kind/example"
	kindUpScript      = "hack/kind-up.sh"
	chartKubeVersion  = "1.37.1"
	chartReleaseName  = "gpufabric"
	chartNamespace    = "gpufabric-system"
	chartHelmDeadline = 20 * time.Minute // a cold helm build included
)

// helmTool returns the helm binary built from the module proxy by
// hack/install-tools.sh. A cold build takes minutes; its progress goes to
// stderr as it happens and to the test log.
func helmTool(t *testing.T) (helm, root string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), chartHelmDeadline)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack/install-tools.sh"), "helm")
	cmd.Dir = root
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(&stderr, prefixWriter{w: os.Stderr, prefix: "[" + t.Name() + "] "})
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/install-tools.sh helm: %v\n%s", err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("helm was built from the module proxy in %s:\n%s", time.Since(start).Round(time.Second), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return filepath.Join(lines[len(lines)-1], "helm"), root
}

// prefixWriter writes every chunk with a prefix (progress of a cold build).
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := fmt.Fprintf(p.w, "%s%s", p.prefix, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// runHelm runs helm in the repository root and returns stdout, or an error
// carrying stderr.
func runHelm(ctx context.Context, helm, root string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// No repository config or cache of the user's is read or written.
	home := filepath.Join(os.TempDir(), "gpufabric-helm-home")
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// templateArgs are the arguments of helm template for release in namespace
// with values files and --set flags.
func templateArgs(release, namespace string, valuesFiles, sets []string) []string {
	args := []string{"template", release, chartDir, "--namespace", namespace, "--kube-version", chartKubeVersion}
	for _, f := range valuesFiles {
		args = append(args, "--values", f)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

// rendered is the output of helm template: the objects in order, each also
// decoded strictly into its Go type.
type rendered struct {
	objects []*unstructured.Unstructured
	typed   map[string]runtime.Object // by "Kind/name"
}

func renderChart(ctx context.Context, helm, root string, valuesFiles, sets []string) (*rendered, error) {
	out, err := runHelm(ctx, helm, root, templateArgs(chartReleaseName, chartNamespace, valuesFiles, sets)...)
	if err != nil {
		return nil, err
	}
	return decodeManifests(out)
}

// decodeManifests decodes a YAML stream of built-in objects. Every object
// must decode strictly (no unknown or duplicate fields) into its Go type.
func decodeManifests(data []byte) (*rendered, error) {
	r := &rendered{typed: map[string]runtime.Object{}}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return r, nil
		} else if err != nil {
			return nil, fmt.Errorf("decode manifest %d: %w", len(r.objects), err)
		}
		if len(raw) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: raw}
		obj, err := scheme.Scheme.New(u.GroupVersionKind())
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", u.GroupVersionKind(), u.GetName(), err)
		}
		js, err := json.Marshal(raw)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
		if err := yaml.UnmarshalStrict(js, obj); err != nil {
			return nil, fmt.Errorf("%s %s does not decode strictly: %w", u.GetKind(), u.GetName(), err)
		}
		key := u.GetKind() + "/" + u.GetName()
		if _, dup := r.typed[key]; dup {
			return nil, fmt.Errorf("%s rendered twice", key)
		}
		r.objects = append(r.objects, u)
		r.typed[key] = obj
	}
}

// get returns the rendered object kind/name as T, failing the test when it
// is missing or of another type.
func get[T runtime.Object](t *testing.T, r *rendered, kind, name string) T {
	t.Helper()
	obj, ok := r.typed[kind+"/"+name]
	if !ok {
		t.Fatalf("%s/%s not rendered; have %v", kind, name, r.keys())
	}
	typed, ok := obj.(T)
	if !ok {
		t.Fatalf("%s/%s is a %T", kind, name, obj)
	}
	return typed
}

func (r *rendered) keys() []string {
	keys := make([]string, 0, len(r.objects))
	for _, u := range r.objects {
		keys = append(keys, u.GetKind()+"/"+u.GetName())
	}
	return keys
}

// applyAll server-side applies objects in order through the dynamic client
// (namespaced objects without a namespace go to namespace).
func applyAll(ctx context.Context, cfg *rest.Config, namespace string, objects []*unstructured.Unstructured) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	for _, u := range objects {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("map %s: %w", gvk, err)
		}
		ri := dynamic.ResourceInterface(dyn.Resource(m.Resource))
		if m.Scope.Name() == "namespace" {
			ns := u.GetNamespace()
			if ns == "" {
				ns = namespace
			}
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		if _, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "chart-test", Force: true}); err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, u.GetName(), err)
		}
	}
	return nil
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
