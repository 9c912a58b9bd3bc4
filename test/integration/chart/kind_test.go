package chart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/pkg/devices/mock"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// kindConfig is the part of kind's v1alpha4 Cluster the quickstart uses.
type kindConfig struct {
	Kind          string            `json:"kind"`
	APIVersion    string            `json:"apiVersion"`
	Name          string            `json:"name"`
	FeatureGates  map[string]bool   `json:"featureGates"`
	RuntimeConfig map[string]string `json:"runtimeConfig"`
	Nodes         []struct {
		Role   string            `json:"role"`
		Labels map[string]string `json:"labels"`
	} `json:"nodes"`
}

// TestKindQuickstart checks what of the kind quickstart can run without a
// container engine: the cluster config has the gates the framework runs
// with and nodes that match the mock fabric, the script parses, the
// Dockerfiles build the binaries the chart runs from the sources they need.
func TestKindQuickstart(t *testing.T) {
	root, err := framework.RepoRoot()
	itest.Must(t, "find repository root", err)
	var cfg kindConfig
	itest.Must(t, "parse kind config", yaml.UnmarshalStrict([]byte(readFile(t, filepath.Join(root, kindConfigFile))), &cfg))
	if cfg.Kind != "Cluster" || cfg.APIVersion != "kind.x-k8s.io/v1alpha4" {
		t.Errorf("kind config is a %s %s", cfg.APIVersion, cfg.Kind)
	}
	wantGates := map[string]bool{}
	for _, g := range strings.Split(framework.FeatureGates, ",") {
		name, value, _ := strings.Cut(g, "=")
		wantGates[name] = value == "true"
	}
	if diff := cmp.Diff(wantGates, cfg.FeatureGates); diff != "" {
		t.Errorf("kind featureGates differ from the framework's (-want +got):\n%s", diff)
	}
	group, enabled, _ := strings.Cut(framework.RuntimeConfig, "=")
	if diff := cmp.Diff(map[string]string{group: enabled}, cfg.RuntimeConfig); diff != "" {
		t.Errorf("kind runtimeConfig (-want +got):\n%s", diff)
	}

	// kind names workers <name>-worker, <name>-worker2, ...; each must be a
	// node of the mock fabric with the same labels, plus the GPU node label.
	gotNodes := map[string]map[string]string{}
	workers := 0
	for _, n := range cfg.Nodes {
		if n.Role != "worker" {
			continue
		}
		workers++
		name := cfg.Name + "-worker"
		if workers > 1 {
			name += fmt.Sprint(workers)
		}
		gotNodes[name] = n.Labels
	}
	wantNodes := map[string]map[string]string{}
	for _, n := range mockFabric(t, root).Nodes() {
		labels := map[string]string{"gpufabric.dev/gpu-node": "true"}
		for k, v := range n.Labels {
			if k != corev1.LabelHostname {
				labels[k] = v
			}
		}
		wantNodes[n.Name] = labels
	}
	if diff := cmp.Diff(wantNodes, gotNodes); diff != "" {
		t.Errorf("kind workers differ from the nodes of the mock fabric (-want +got):\n%s", diff)
	}

	script := filepath.Join(root, kindUpScript)
	if out, err := exec.CommandContext(t.Context(), "bash", "-n", script).CombinedOutput(); err != nil {
		t.Errorf("bash -n %s: %v\n%s", kindUpScript, err, out)
	}
	for _, want := range []string{kindConfigFile, "values-mock.yaml", "kubelet-plugin.Dockerfile", "scheduler.Dockerfile", "kind load docker-image", kindExampleDir} {
		if !strings.Contains(readFile(t, script), want) {
			t.Errorf("%s does not mention %s", kindUpScript, want)
		}
	}
	for _, d := range []struct{ file, cmd, binary string }{
		{"deployments/images/kubelet-plugin.Dockerfile", "./cmd/kubelet-plugin", "/usr/bin/gpufabric-kubelet-plugin"},
		{"deployments/images/scheduler.Dockerfile", "./cmd/scheduler", "/usr/bin/gpufabric-scheduler"},
		{"deployments/images/scheduler.Dockerfile", "./cmd/grouper", "/usr/bin/gpufabric-grouper"},
	} {
		if err := checkDockerfile(t.Context(), root, d.file, d.cmd, d.binary); err != nil {
			t.Error(err)
		}
	}
}

// mockFabric parses the fabric file of values-mock.yaml.
func mockFabric(t *testing.T, root string) *mock.Fabric {
	t.Helper()
	var values struct {
		KubeletPlugin struct {
			Mock struct {
				Fabric string `json:"fabric"`
			} `json:"mock"`
		} `json:"kubeletPlugin"`
	}
	itest.Must(t, "parse values-mock.yaml", yaml.Unmarshal([]byte(readFile(t, filepath.Join(root, mockValuesFile))), &values))
	f, err := mock.Parse("values-mock.yaml", []byte(values.KubeletPlugin.Mock.Fabric))
	itest.Must(t, "parse mock fabric", err)
	return f
}

var copyLine = regexp.MustCompile(`(?m)^COPY ([^-\s]\S*/) `)

// checkDockerfile: the Dockerfile builds cmd into binary (the path the
// chart's command runs), and copies the source of every package it needs.
func checkDockerfile(ctx context.Context, root, file, cmd, binary string) error {
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return err
	}
	text := string(data)
	if !strings.Contains(text, cmd) || !strings.Contains(text, binary) {
		return fmt.Errorf("%s does not build %s into %s", file, cmd, binary)
	}
	var copied []string
	for _, m := range copyLine.FindAllStringSubmatch(text, -1) {
		copied = append(copied, m[1])
	}
	var out bytes.Buffer
	list := exec.CommandContext(ctx, "go", "list", "-mod=readonly", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{end}}", cmd)
	list.Dir, list.Stdout = root, &out
	if err := list.Run(); err != nil {
		return fmt.Errorf("go list -deps %s: %w", cmd, err)
	}
	for _, dir := range strings.Fields(out.String()) {
		rel, err := filepath.Rel(root, dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // a module dependency
		}
		if !slices.ContainsFunc(copied, func(c string) bool { return strings.HasPrefix(rel+"/", c) }) {
			return fmt.Errorf("%s: package dir %s is not copied (COPY %v)", file, rel, copied)
		}
	}
	return nil
}

// readExamples decodes the example manifests strictly, in file order.
func readExamples(root string) (*itest.Rendered, error) {
	files, err := filepath.Glob(filepath.Join(root, kindExampleDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no example manifests in %s: %v", kindExampleDir, err)
	}
	var all bytes.Buffer
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&all, "---\n%s\n", data)
	}
	return itest.DecodeManifests(all.Bytes())
}

// TestKindExample: the example is a gang of the gpufabric scheduler whose
// pods share the PodGroup's fabric-domain claim and have their own GPUs.
func TestKindExample(t *testing.T) {
	root, err := framework.RepoRoot()
	itest.Must(t, "find repository root", err)
	r, err := readExamples(root)
	itest.Must(t, "read examples", err)
	wantKinds := []string{"Namespace/fabric-demo", "ResourceClaimTemplate/fabric", "ResourceClaimTemplate/gpus", "PodGroup/train", "Job/train"}
	if diff := cmp.Diff(wantKinds, r.Keys()); diff != "" {
		t.Fatalf("example objects (-want +got):\n%s", diff)
	}
	classes := map[string]string{}
	for _, name := range []string{"fabric", "gpus"} {
		tpl := get[*resourceapi.ResourceClaimTemplate](t, r, "ResourceClaimTemplate", name)
		classes[name] = tpl.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName
	}
	if diff := cmp.Diff(map[string]string{"fabric": topology.FabricDomainDeviceClass, "gpus": topology.GPUDeviceClass}, classes); diff != "" {
		t.Errorf("claim template classes (-want +got):\n%s", diff)
	}
	pg := get[*schedulingv1beta1.PodGroup](t, r, "PodGroup", "train")
	job := get[*batchv1.Job](t, r, "Job", "train")
	pod := job.Spec.Template.Spec
	if pod.SchedulerName != topology.SchedulerName || pod.SchedulingGroup == nil || ptr.Deref(pod.SchedulingGroup.PodGroupName, "") != pg.Name {
		t.Errorf("job pods: scheduler %q, group %+v; want %s in %s", pod.SchedulerName, pod.SchedulingGroup, topology.SchedulerName, pg.Name)
	}
	if got := ptr.Deref(job.Spec.Parallelism, 0); got != pg.Spec.SchedulingPolicy.Gang.MinCount {
		t.Errorf("job parallelism %d, gang minCount %d", got, pg.Spec.SchedulingPolicy.Gang.MinCount)
	}
	// The pod claim resolves to the group's claim: same name and template.
	for _, gc := range pg.Spec.ResourceClaims {
		if !slices.ContainsFunc(pod.ResourceClaims, func(c corev1.PodResourceClaim) bool {
			return c.Name == gc.Name && ptr.Deref(c.ResourceClaimTemplateName, "") == ptr.Deref(gc.ResourceClaimTemplateName, "")
		}) {
			t.Errorf("job pods do not reference the PodGroup claim %s", gc.Name)
		}
	}
}
