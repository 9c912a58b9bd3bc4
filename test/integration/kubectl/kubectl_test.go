package kubectl

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/claims"
	claimsconfig "github.com/gpufabric/gpufabric/pkg/claims/config"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/pkg/workloads/grouping"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

const (
	rackKey = "topology.gpufabric.dev/rack"
	leafKey = "topology.gpufabric.dev/ib-leaf"
)

var levels = []string{rackKey, leafKey}

// TestKubectlGpufabric runs `kubectl gpufabric` in-process with the admin
// kubeconfig against a real apiserver where gpufabric-scheduler placed and
// refused gangs, and compares its tables with testdata/*.golden (ages and
// event counts masked; -update rewrites them).
//
// The fabric: NVLink domains dom-a (nodes a-0, a-1, rack-1) and dom-b
// (b-0, b-1, rack-2), one IB leaf, 4 GPUs and 4 NICs per node, gpu-3 of
// b-1 tainted nvlink-degraded, node b-1 tainted PreferNoSchedule; 4
// fabric-domain channels per domain (published by the scheduler). Then:
// team-a/train, the 2 × 4-GPU gang of an Indexed Job, placed in dom-a; a
// pod team-b/notebook with one GPU; team-b/big (3 × 4 GPUs, minCount 3,
// a fourth member gated) which fits nowhere; team-b/ghost-0 naming a
// PodGroup that does not exist. The scheduler publishes the free-room
// view, which a tenant of team-b reads (status falls back to it). No kube-controller-manager: claims are
// made by hand, and nothing taints the kubelet-less nodes meanwhile.
func TestKubectlGpufabric(t *testing.T) {
	cp := framework.StartT(t, framework.Options{})
	admin := cp.AdminClient(t)
	createFabric(t, admin)
	sched := startScheduler(t, cp, scheduler.Config{DomainChannels: 4, Tree: topology.TreeConfig{LabelLevels: levels}, FreeRoomInterval: 200 * time.Millisecond})
	poll(t, "fabric-domain pools published", 30*time.Second, func(ctx context.Context) error {
		return countPools(ctx, admin, 2)
	})
	createWorkloads(t, admin)
	waitFreeRoom(t, admin, 16, 7)
	sched() // stop: nothing changes while the commands run

	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"status", []string{"status"}},
		{"nodes", []string{"nodes"}},
		{"explain-placed", []string{"explain", "train", "-n", "team-a"}},
		{"explain-waiting", []string{"explain", "big", "-n", "team-b"}},
		{"explain-not-found", []string{"explain", "ghost", "-n", "team-b"}},
		{"explain-job", []string{"explain", "job/llm-train", "-n", "team-a"}},
		{"explain-all", []string{"explain", "-A"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			compareGolden(t, filepath.Join("testdata", tc.golden+".golden"), mask(runPlugin(t, cp, tc.args...)))
		})
	}
	t.Run("json", func(t *testing.T) { checkStatusJSON(t, runPlugin(t, cp, "status", "-o", "json")) })
	t.Run("workload references", func(t *testing.T) { checkWorkloadRefs(t, cp) })
	t.Run("snapshot", func(t *testing.T) { checkSnapshot(t, runPlugin(t, cp, "snapshot")) })
	t.Run("fit", func(t *testing.T) { checkFit(t, cp) })
	t.Run("yaml", func(t *testing.T) { checkNodesYAML(t, runPlugin(t, cp, "nodes", "-o", "yaml")) })
	t.Run("tenant", func(t *testing.T) { checkTenant(t, cp) })
}

// createFabric creates the device classes, the nodes (without the
// not-ready taint admission gives new nodes) and their slices.
func createFabric(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	for name, typ := range map[string]string{topology.GPUDeviceClass: topology.DeviceTypeGPU, topology.FabricDomainDeviceClass: topology.DeviceTypeFabricDomain} {
		expr := fmt.Sprintf(`device.driver == %q && device.attributes[%q].type == %q`, topology.DriverName, topology.DriverName, typ)
		dc := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}}}
		_, err := c.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{})
		must(t, "create device class", err)
	}
	for _, n := range []struct{ name, domain, rack string }{
		{"a-0", "dom-a", "rack-1"}, {"a-1", "dom-a", "rack-1"}, {"b-0", "dom-b", "rack-2"}, {"b-1", "dom-b", "rack-2"},
	} {
		created, err := c.CoreV1().Nodes().Create(ctx, newNode(n.name, n.rack), metav1.CreateOptions{})
		must(t, "create node", err)
		created.Spec.Taints = nil
		if n.name == "b-1" {
			created.Spec.Taints = []corev1.Taint{{Key: "example.com/maintenance", Value: "planned", Effect: corev1.TaintEffectPreferNoSchedule}}
		}
		_, err = c.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{})
		must(t, "set node taints", err)
		_, err = c.ResourceV1().ResourceSlices().Create(ctx, newSlice(n.name, n.domain), metav1.CreateOptions{})
		must(t, "create slice", err)
	}
}

func newNode(name, rack string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name, rackKey: rack, leafKey: "leaf-1"}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110"),
		}},
	}
}

// newSlice is a node's pool: 4 GB200 GPUs and 4 NICs on rails 0-3; gpu-3
// of b-1 is tainted.
func newSlice(nodeName, domain string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName + "-" + topology.DriverName},
		Spec: resourceapi.ResourceSliceSpec{Driver: topology.DriverName, NodeName: ptr.To(nodeName),
			Pool: resourceapi.ResourcePool{Name: nodeName, ResourceSliceCount: 1}},
	}
	for i := range 4 {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: topology.GPUDeviceName(i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			topology.AttrType:             {StringValue: ptr.To(topology.DeviceTypeGPU)},
			topology.AttrProductName:      {StringValue: ptr.To("NVIDIA GB200")},
			topology.AttrNVLinkDomain:     {StringValue: ptr.To(domain)},
			topology.AttrNVLinkDomainKind: {StringValue: ptr.To(string(topology.DomainKindMNNVL))},
			topology.AttrIBRail:           {IntValue: ptr.To(int64(i))},
		}})
	}
	if nodeName == "b-1" {
		s.Spec.Devices[3].Taints = []resourceapi.DeviceTaint{{Key: topology.TaintNVLinkDegraded, Value: "2-of-18-nvlinks-down", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	for i := range 4 {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("nic-mlx5-%d", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			topology.AttrType:      {StringValue: ptr.To(topology.DeviceTypeNIC)},
			topology.AttrIBRail:    {IntValue: ptr.To(int64(i))},
			topology.AttrPortState: {StringValue: ptr.To("ACTIVE")},
		}})
	}
	return s
}

func countPools(ctx context.Context, c kubernetes.Interface, want int) error {
	slices, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	n := 0
	for _, s := range slices.Items {
		if strings.HasPrefix(s.Spec.Pool.Name, "fabric-domain.") {
			n++
		}
	}
	if n != want {
		return fmt.Errorf("%d fabric-domain pools, want %d", n, want)
	}
	return nil
}

// TestDocExamples: docs/kubectl-gpufabric.md shows every golden file as it
// is (rewrite the examples after -update), and docs/user-guide.md the
// head of explain-waiting.golden.
func TestDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/kubectl-gpufabric.md")
	must(t, "read doc", err)
	goldens, err := filepath.Glob("testdata/*.golden")
	must(t, "list goldens", err)
	if len(goldens) == 0 {
		t.Fatal("no golden files")
	}
	for _, g := range goldens {
		want, err := os.ReadFile(g)
		must(t, "read golden", err)
		if !strings.Contains(string(doc), "\n"+strings.TrimRight(string(want), "\n")+"\n```\n") {
			t.Errorf("docs/kubectl-gpufabric.md does not show %s as it is", g)
		}
	}
	// The user guide quotes the head of explain-waiting.golden.
	guide, err := os.ReadFile("../../../docs/user-guide.md")
	must(t, "read user guide", err)
	waiting, err := os.ReadFile("testdata/explain-waiting.golden")
	must(t, "read golden", err)
	_, quote, ok := strings.Cut(string(guide), "```\nPodGroup:  team-b/big\n")
	quote, _, _ = strings.Cut(quote, "...\n```")
	if !ok || quote == "" || !strings.HasPrefix(string(waiting), "PodGroup:  team-b/big\n"+quote) {
		t.Errorf("docs/user-guide.md does not quote the head of explain-waiting.golden as it is")
	}
	checkGuideNames(t, string(guide))
}

// checkGuideNames: every gpufabric.dev/<name> the user guide mentions, and
// every variable of its table of injected variables, is one the code
// defines.
func checkGuideNames(t *testing.T, guide string) {
	known := map[string]bool{}
	for _, n := range []string{topology.AnnotationPreferredTopologyKey, topology.AnnotationRailAlignment, topology.AnnotationTopologySpread,
		topology.TopologyKeyNVLinkDomain, topology.TaintNVLinkDegraded, claims.EnvVisibleDevices, claims.EnvGPUUUIDs, claims.EnvIBDevices,
		claims.EnvNCCLIBHCA, claims.EnvFabricDomain, claims.EnvFabricKind, claims.EnvFabricChannel, claims.EnvIMEXChannel,
		claims.EnvNCCLMNNVLEnable, claims.EnvNCCLNVLSEnable, "GPUFABRIC_DEVICE", claimsconfig.APIVersion,
		vocab.ConditionMembersLost, vocab.ConditionFailed, vocab.AnnotationOnMemberLoss, vocab.AnnotationReplacementTimeout,
		grouping.AnnotationGang, grouping.AnnotationMinCount, grouping.AnnotationTopologyKey, grouping.AnnotationGroupClaims,
		grouping.AnnotationDisruptionMode, grouping.LabelNamespaceDefault, topology.AnnotationRailCoupling} {
		known[n] = true
	}
	// Not under another prefix: topology.gpufabric.dev/ labels are the
	// admin's (docs/topology-labels.md).
	for _, m := range regexp.MustCompile(`(?:^|[^.A-Za-z0-9])(gpufabric\.dev/[A-Za-z0-9-]+)`).FindAllStringSubmatch(guide, -1) {
		if n := m[1]; !known[n] {
			t.Errorf("docs/user-guide.md names %s, which the code does not define", n)
		}
	}
	for _, line := range strings.Split(guide, "\n") {
		if !strings.HasPrefix(line, "| `") || !strings.Contains(line, "_") {
			continue
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, n := range regexp.MustCompile("`((?:NCCL|GPUFABRIC|NVIDIA)_[A-Z_]+)").FindAllStringSubmatch(cell, -1) {
			if !known[n[1]] {
				t.Errorf("docs/user-guide.md lists variable %s, which pkg/claims does not inject", n[1])
			}
		}
	}
}

// checkWorkloadRefs: a bare Job name that is no PodGroup explains the Job's
// PodGroup as job/NAME does; a Job without PodGroups and an unknown kind
// fail with an error naming what was looked for.
func checkWorkloadRefs(t *testing.T, cp *framework.ControlPlane) {
	if bare, job := runPlugin(t, cp, "explain", "llm-train", "-n", "team-a"), runPlugin(t, cp, "explain", "job/llm-train", "-n", "team-a"); mask(bare) != mask(job) {
		t.Errorf("explain llm-train differs from explain job/llm-train:\n%s\n---\n%s", bare, job)
	}
	for _, tc := range []struct{ ref, wantErr string }{
		{"job/llm-eval", "Job team-a/llm-eval has no PodGroup: none in team-a is owned by a Job named llm-eval or carries batch.kubernetes.io/job-name=llm-eval"},
		{"deployment/web", `unknown kind "deployment"; want podgroup, compositepodgroup or one of job, jobset, lws, raycluster, trainjob, rayjob`},
	} {
		if _, _, err := runPluginErr(t, cp, "explain", tc.ref, "-n", "team-a"); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("explain %s: error %v, want one containing %q", tc.ref, err, tc.wantErr)
		}
	}
}

// checkSnapshot: gpufabric-sim reads the live cluster's snapshot back: 16
// GPUs on the 4 nodes, the 9 allocated ones busy, the NVLink domains and
// the --topology-levels levels.
func checkSnapshot(t *testing.T, out string) {
	path := filepath.Join(t.TempDir(), "fabric.yaml")
	must(t, "write snapshot", os.WriteFile(path, []byte(out), 0o600))
	f, err := fabric.Load(path)
	must(t, "gpufabric-sim reads the snapshot", err)
	busy := 0
	for _, b := range f.Busy {
		busy += b
	}
	if f.TotalGPUs != 16 || busy != 9 || len(f.NodeNames) != 4 {
		t.Errorf("snapshot read back: %d GPUs, %d busy, nodes %v; want 16, 9, 4 nodes", f.TotalGPUs, busy, f.NodeNames)
	}
	if want := append([]string{topology.TopologyKeyNVLinkDomain}, levels...); strings.Join(f.Levels, ",") != strings.Join(want, ",") {
		t.Errorf("levels %v, want %v", f.Levels, want)
	}
	if len(f.Domains[0]) != 2 || f.Domains[0][0].ID != "dom-a" {
		t.Errorf("NVLink domains %+v, want dom-a and dom-b", f.Domains[0])
	}
}

// checkFit: the dry run sees the live load: dom-a is full, and in dom-b
// b-0 has gpu-0 used by the notebook and b-1 gpu-3 tainted, so two 3-GPU
// pods fit there, one per node, and one 4-GPU pod fits in no NVLink
// domain, with the engine's reason.
func checkFit(t *testing.T, cp *framework.ControlPlane) {
	var fits struct {
		Fits   bool
		Domain string
		Nodes  []struct {
			Node string
			Pods int
		}
	}
	out := runPlugin(t, cp, "fit", "--pods", "2", "--gpus-per-pod", "3", "--topology-key", topology.TopologyKeyNVLinkDomain, "-o", "json")
	must(t, "decode fit json", json.Unmarshal([]byte(out), &fits))
	if !fits.Fits || fits.Domain != "dom-b" || fmt.Sprint(fits.Nodes) != "[{b-0 1} {b-1 1}]" {
		t.Errorf("fit 2 × 3: %s, want one pod on each of b-0 and b-1 in dom-b", out)
	}
	out = runPlugin(t, cp, "fit", "--pods", "1", "--gpus-per-pod", "4", "--topology-key", topology.TopologyKeyNVLinkDomain)
	if !strings.HasPrefix(out, "Fits: no: 1 pod × 4 GPUs in one gpufabric.dev/nvlinkDomain\nneeds 1 pod with 4 gpu.gpufabric.dev devices in one gpufabric.dev/nvlinkDomain") {
		t.Errorf("fit 1 × 4:\n%s", out)
	}
}
