package grouping

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestWorkloadExamples: every manifest of examples/workloads is accepted
// by kube-apiserver with the controllers' real CRDs, and gpufabric-grouper
// makes the groups each example's comment names (the controllers do not
// run here: the TrainJob's comes from its JobSet, see
// test/integration/workloads).
func TestWorkloadExamples(t *testing.T) {
	// Without WorkloadWithJob, as indexed-job.yaml is for.
	e := newEnv(t, grouping.ModeFlat, framework.Options{ExtraFeatureGates: "WorkloadWithJob=false"})
	root, err := framework.RepoRoot()
	itest.Must(t, "repo root", err)
	files, err := filepath.Glob(filepath.Join(root, "examples", "workloads", "*.yaml"))
	if err != nil || len(files) < 6 {
		t.Fatalf("examples/workloads: %v, %v", files, err)
	}
	itest.Must(t, "create namespace demo", framework.EnsureNamespace(t.Context(), e.admin, "demo"))
	var objs []*unstructured.Unstructured
	for _, f := range files {
		objs = append(objs, readManifests(t, f)...)
	}
	itest.Must(t, "apply examples", itest.ApplyAll(t.Context(), e.cp.AdminConfig(), "", objs))
	for _, name := range []string{"jobset.eval.workers", "lws.chat.0", "ray.tune", "job.sweep", "sp.mpi-bench"} {
		itest.Poll(t, "group "+name, 30*time.Second, func(ctx context.Context) error {
			_, err := e.admin.SchedulingV1beta1().PodGroups("demo").Get(ctx, name, metav1.GetOptions{})
			return err
		})
	}
	for _, p := range []string{"mpi-bench-0", "mpi-bench-1"} {
		pod, err := e.admin.CoreV1().Pods("demo").Get(t.Context(), p, metav1.GetOptions{})
		itest.Must(t, "get pod", err)
		if sg := pod.Spec.SchedulingGroup; sg == nil || *sg.PodGroupName != "sp.mpi-bench" {
			t.Errorf("pod %s names %+v, want sp.mpi-bench", p, sg)
		}
	}
	ns, err := e.admin.CoreV1().Namespaces().Get(t.Context(), "training", metav1.GetOptions{})
	itest.Must(t, "get namespace training", err)
	if ns.Labels[grouping.LabelNamespaceDefault] != "true" {
		t.Errorf("namespace training labels %v", ns.Labels)
	}
}

// readManifests decodes a YAML file of objects.
func readManifests(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	itest.Must(t, "open "+path, err)
	defer f.Close()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("decode %s: %v", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}
