package grouping

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// crdSources are the CRDs of the controllers, from their module sources
// (the versions the controllers branch builds), and the one written here.
var crdSources = []struct{ module, path string }{
	{"sigs.k8s.io/jobset@v0.12.0", "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"},
	{"sigs.k8s.io/lws@v0.9.0", "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"},
	{"github.com/ray-project/kuberay/ray-operator@v1.6.0", "config/crd/bases/ray.io_rayclusters.yaml"},
	{"github.com/ray-project/kuberay/ray-operator@v1.6.0", "config/crd/bases/ray.io_rayjobs.yaml"},
	{"github.com/kubeflow/trainer/v2@v2.3.0", "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml"},
	{"sigs.k8s.io/scheduler-plugins@v0.33.5", "config/crd/bases/scheduling.x-k8s.io_podgroups.yaml"},
}

// volcanoCRD is a minimal Volcano PodGroup CRD (the fields gpufabric
// reads), written for the test: Volcano's module is not on the proxy.
const volcanoCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: podgroups.scheduling.volcano.sh}
spec:
  group: scheduling.volcano.sh
  names: {kind: PodGroup, listKind: PodGroupList, plural: podgroups, singular: podgroup}
  scope: Namespaced
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

// env is a control plane with the controllers' CRDs, the pod-group
// admission policy, the grouper (with the chart's rules) and, when asked,
// gpufabric-scheduler.
type env struct {
	cp    *framework.ControlPlane
	admin kubernetes.Interface
	dyn   dynamic.Interface
}

func moduleDir(t *testing.T, module string) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", module).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", module, err)
	}
	var info struct{ Dir string }
	itest.Must(t, "decode go mod download", json.Unmarshal(out, &info))
	return info.Dir
}

// installCRDs applies the controllers' CRDs and waits until each is
// established.
func installCRDs(t *testing.T, cp *framework.ControlPlane) {
	t.Helper()
	var docs []string
	for _, s := range crdSources {
		b, err := os.ReadFile(filepath.Join(moduleDir(t, s.module), s.path))
		itest.Must(t, "read CRD", err)
		docs = append(docs, string(b))
	}
	docs = append(docs, volcanoCRD)
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	itest.Must(t, "dynamic client", err)
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	var objects []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(strings.Join(docs, "\n---\n")), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode CRDs: %v", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		_, err := dyn.Resource(crds).Create(t.Context(), u, metav1.CreateOptions{})
		itest.Must(t, "create CRD "+u.GetName(), err)
		objects = append(objects, u)
	}
	for _, o := range objects {
		itest.Poll(t, "CRD "+o.GetName()+" established", 30*time.Second, func(ctx context.Context) error {
			u, err := dyn.Resource(crds).Get(ctx, o.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
			return fmt.Errorf("not established")
		})
	}
}

// newEnv starts the control plane (kube-controller-manager for Jobs and
// garbage collection), the CRDs, the policy of mode for every namespace
// and the grouper.
func newEnv(t *testing.T, mode grouping.Mode, opts framework.Options) *env {
	t.Helper()
	opts.ControllerManager = true
	cp := framework.StartT(t, opts)
	e := &env{cp: cp, admin: cp.AdminClient(t)}
	var err error
	e.dyn, err = dynamic.NewForConfig(cp.AdminConfig())
	itest.Must(t, "dynamic client", err)
	installCRDs(t, cp)
	e.policy(t, mode)
	e.startGrouper(t, mode)
	return e
}

// policy applies the chart's policy of mode to every namespace.
func (e *env) policy(t *testing.T, mode grouping.Mode) {
	t.Helper()
	itest.ApplyPodGroupPolicy(t, e.admin, mode)
}

// startGrouper runs the grouper with the chart's rules.
func (e *env) startGrouper(t *testing.T, mode grouping.Mode) {
	t.Helper()
	itest.StartGrouper(t, e.cp, mode)
}

// startScheduler runs gpufabric-scheduler in the test process with
// exactly the chart's RBAC rules.
func (e *env) startScheduler(t *testing.T, cfg scheduler.Config) {
	t.Helper()
	const user = "gpufabric-scheduler"
	itest.Must(t, "grant scheduler rules", framework.GrantSchedulerRules(t.Context(), e.admin, user, itest.RecordNamespace))
	rc, err := e.cp.UserConfig(user)
	itest.Must(t, "scheduler config", err)
	cfg.Client, err = kubernetes.NewForConfig(rc)
	itest.Must(t, "scheduler client", err)
	cfg.RecordNamespace = itest.RecordNamespace
	cfg.InitialBackoff, cfg.MaxBackoff = 200*time.Millisecond, 2*time.Second
	cfg.Members = itest.MemberGuard(t, rc, cfg.Client) // --member-guard
	s, err := scheduler.New(cfg)
	itest.Must(t, "create scheduler", err)
	itest.RunUntilDone(t, "scheduler", s.Run)
}
