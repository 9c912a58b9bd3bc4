package kubeletdra

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

const nodeName = "gb200-r1-n01"

// TestKubeletPreparesGroupClaim runs the real kubelet DRA manager against
// the plugin process: a pod of a PodGroup gets CDI devices from a claim that
// is reserved for the PodGroup (not for the pod), and a pod outside the
// group is refused the same claim, as the kubelet decides it.
func TestKubeletPreparesGroupClaim(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.GenericWorkload, true)
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.DRAWorkloadResourceClaims, true)
	logger, ctx := ktesting.NewTestContext(t)
	cp := framework.StartT(t, framework.Options{})
	admin := cp.AdminClient(t)
	n, err := admin.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{})
	must(t, "create node", err)
	rules, err := framework.LoadRules(framework.PluginRulesFile)
	must(t, "load rules", err)
	plugin := framework.NewPlugin(t, cp.KubeconfigWithRules(t, "gpufabric-plugin", rules), "pkg/devices/mock/fabrics/gb200-nvl72x2.yaml", nodeName)
	plugin.Start()

	pg, err := admin.SchedulingV1beta1().PodGroups("default").Create(ctx, &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "train"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 1},
		}},
	}, metav1.CreateOptions{})
	must(t, "create pod group", err)
	claim := groupClaim(t, admin, pg)
	member := createPod(t, admin, "train-0", ptr.To(pg.Name))
	outsider := createPod(t, admin, "outsider", nil)

	mgr, err := dra.NewManager(logger, admin, t.TempDir())
	must(t, "new DRA manager", err)
	sources := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	must(t, "start DRA manager", mgr.Start(ctx, func() []*v1.Pod { return []*v1.Pod{member} },
		func(context.Context) (*v1.Node, error) { return n, nil }, sources))
	t.Cleanup(mgr.Stop)
	register(t, ctx, mgr, plugin)

	must(t, "prepare member", mgr.PrepareResources(ctx, member))
	info, err := mgr.GetResources(member, &member.Spec.Containers[0])
	must(t, "get resources", err)
	want := "gpufabric.dev/claim=" + string(claim.UID) + "-gpu-0"
	if len(info.CDIDevices) != 1 || info.CDIDevices[0].Name != want {
		t.Fatalf("member container CDI devices = %+v, want [%s]", info.CDIDevices, want)
	}
	spec := filepath.Join(plugin.CDIRoot(), topology.DriverName+"-claim_"+string(claim.UID)+".json")
	data, err := os.ReadFile(spec)
	must(t, "read CDI spec", err)
	for _, want := range []string{"GPUFABRIC_GPU_UUIDS=GPU-", "libcuda.so", "update-ldcache"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("CDI spec %s lacks %s (the GPU's UUID, the driver's files and hooks):\n%s", spec, want, data)
		}
	}

	if err := mgr.PrepareResources(ctx, outsider); err == nil || !strings.Contains(err.Error(), "not allowed to use ResourceClaim") {
		t.Errorf("pod outside the group: PrepareResources err = %v, want 'not allowed to use ResourceClaim'", err)
	}

	must(t, "unprepare member", mgr.UnprepareResources(ctx, member))
	if _, err := os.Stat(spec); !os.IsNotExist(err) {
		t.Errorf("CDI spec still there after unprepare (err %v)", err)
	}
}

// groupClaim creates a one-GPU claim allocated on nodeName's gpu-0 and
// reserved for the PodGroup, once the plugin has published the node's pool.
func groupClaim(t *testing.T, c kubernetes.Interface, pg *schedulingv1beta1.PodGroup) *resourceapi.ResourceClaim {
	t.Helper()
	ctx := t.Context()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
		return err == nil && len(l.Items) > 0, nil
	})
	must(t, "wait for the node's slices", err)
	claim, err := c.ResourceV1().ResourceClaims("default").Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "train-gpu"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: topology.GPUDeviceClass, Count: 1},
		}}}},
	}, metav1.CreateOptions{})
	must(t, "create claim", err)
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: topology.DriverName, Pool: nodeName, Device: "gpu-0"}},
	}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{
		APIGroup: schedulingv1beta1.GroupName, Resource: "podgroups", Name: pg.Name, UID: pg.UID,
	}}
	claim, err = c.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	must(t, "allocate claim", err)
	return claim
}

// createPod creates a pod on nodeName using claim train-gpu, in group if set.
func createPod(t *testing.T, c kubernetes.Interface, name string, group *string) *v1.Pod {
	t.Helper()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{
			NodeName:       nodeName,
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("train-gpu")}},
			Containers: []v1.Container{{
				Name: "train", Image: "registry.example/train:1",
				Resources: v1.ResourceRequirements{
					Claims:   []v1.ResourceClaim{{Name: "gpu"}},
					Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")},
				},
			}},
		},
	}
	if group != nil {
		pod.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: group}
	}
	pod, err := c.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{})
	must(t, "create pod "+name, err)
	return pod
}

// register does what the kubelet's plugin watcher does for a new socket:
// GetInfo on the registration socket, then Validate and Register.
func register(t *testing.T, ctx context.Context, mgr *dra.Manager, p *framework.Plugin) {
	t.Helper()
	info, err := framework.RegistrationInfo(ctx, framework.RegistrationSocket(p.RegistrarDir()))
	must(t, "GetInfo", err)
	h := mgr.GetWatcherHandler()
	must(t, "validate plugin", h.ValidatePlugin(ctx, info.Name, info.Endpoint, info.SupportedVersions))
	must(t, "register plugin", h.RegisterPlugin(ctx, info.Name, info.Endpoint, info.SupportedVersions, nil))
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
