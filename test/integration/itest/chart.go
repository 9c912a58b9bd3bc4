package itest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// The chart under test and its release, as the chart tests render and apply
// it (paths relative to the repository root).
const (
	ChartDir          = "deployments/helm/gpufabric"
	ChartKubeVersion  = "1.37.1"
	ChartReleaseName  = "gpufabric"
	ChartNamespace    = "gpufabric-system"
	chartHelmDeadline = 20 * time.Minute // a cold helm build included
)

// Names of the chart's objects for release ChartReleaseName.
const (
	ChartPluginName    = "gpufabric-kubelet-plugin"
	ChartSchedulerName = "gpufabric-scheduler"
	ChartGrouperName   = "gpufabric-grouper"
)

// HelmTool returns the helm binary built from the module proxy by
// hack/install-tools.sh. A cold build takes minutes; its progress goes to
// stderr as it happens and to the test log.
func HelmTool(t *testing.T) (helm, root string) {
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

// RunHelm runs helm in the repository root and returns stdout, or an error
// carrying stderr.
func RunHelm(ctx context.Context, helm, root string, args ...string) ([]byte, error) {
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

// TemplateArgs are the arguments of helm template for release in namespace
// with values files and --set flags.
func TemplateArgs(release, namespace string, valuesFiles, sets []string) []string {
	args := []string{"template", release, ChartDir, "--namespace", namespace, "--kube-version", ChartKubeVersion}
	for _, f := range valuesFiles {
		args = append(args, "--values", f)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

// Rendered is the output of helm template: the objects in order, each also
// decoded strictly into its Go type.
type Rendered struct {
	Objects []*unstructured.Unstructured
	Typed   map[string]runtime.Object // by "Kind/name"
}

func RenderChart(ctx context.Context, helm, root string, valuesFiles, sets []string) (*Rendered, error) {
	out, err := RunHelm(ctx, helm, root, TemplateArgs(ChartReleaseName, ChartNamespace, valuesFiles, sets)...)
	if err != nil {
		return nil, err
	}
	return DecodeManifests(out)
}

// DecodeManifests decodes a YAML stream of built-in objects. Every object
// must decode strictly (no unknown or duplicate fields) into its Go type.
func DecodeManifests(data []byte) (*Rendered, error) {
	r := &Rendered{Typed: map[string]runtime.Object{}}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return r, nil
		} else if err != nil {
			return nil, fmt.Errorf("decode manifest %d: %w", len(r.Objects), err)
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
		if _, dup := r.Typed[key]; dup {
			return nil, fmt.Errorf("%s rendered twice", key)
		}
		r.Objects = append(r.Objects, u)
		r.Typed[key] = obj
	}
}

func (r *Rendered) Keys() []string {
	keys := make([]string, 0, len(r.Objects))
	for _, u := range r.Objects {
		keys = append(keys, u.GetKind()+"/"+u.GetName())
	}
	return keys
}

// ApplyAll server-side applies objects in order through the dynamic client
// (namespaced objects without a namespace go to namespace).
func ApplyAll(ctx context.Context, cfg *rest.Config, namespace string, objects []*unstructured.Unstructured) error {
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

// ApplyChartScheduler applies the chart's scheduler identity: its service
// account, RBAC and admission policies (default values).
func ApplyChartScheduler(t *testing.T, cp *framework.ControlPlane, admin kubernetes.Interface) {
	t.Helper()
	helm, root := HelmTool(t)
	r, err := RenderChart(t.Context(), helm, root, nil, nil)
	Must(t, "render chart", err)
	Must(t, "create namespace", framework.EnsureNamespace(t.Context(), admin, ChartNamespace))
	kinds := []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
	var objs []*unstructured.Unstructured
	for _, o := range r.Objects {
		if slices.Contains(kinds, o.GetKind()) {
			objs = append(objs, o)
		}
	}
	Must(t, "apply chart RBAC and policies", ApplyAll(t.Context(), cp.AdminConfig(), ChartNamespace, objs))
}

// SchedulerPod is a pod of the chart's scheduler Deployment (never run: its
// token is what matters).
func SchedulerPod(t *testing.T, admin kubernetes.Interface, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ChartNamespace},
		Spec: corev1.PodSpec{
			ServiceAccountName: ChartSchedulerName,
			Containers:         []corev1.Container{{Name: "scheduler", Image: "registry.example/scheduler:1"}},
		},
	}
	pod, err := admin.CoreV1().Pods(ChartNamespace).Create(t.Context(), pod, metav1.CreateOptions{})
	Must(t, "create scheduler pod", err)
	return pod
}

// ServiceAccountToken requests a token of a chart service account, bound to pod
// when it is set (the token then carries the pod's name and node).
func ServiceAccountToken(t *testing.T, admin kubernetes.Interface, sa string, pod *corev1.Pod) string {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := admin.CoreV1().ServiceAccounts(ChartNamespace).CreateToken(t.Context(), sa, req, metav1.CreateOptions{})
	Must(t, "request token for "+sa, err)
	return tr.Status.Token
}

// IsLease reports whether r is a request on a Lease (a fault proxy rule).
func IsLease(r *http.Request) bool { return strings.Contains(r.URL.Path, "/leases/") }
