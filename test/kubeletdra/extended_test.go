package kubeletdra

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/extres"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// TestKubeletPreparesExtendedResourceClaim runs the real kubelet DRA manager
// against the plugin process for a pod that asks nvidia.com/gpu: 2 and no
// claim: the special claim gpufabric-scheduler made for it (kube-scheduler's
// shape, pkg/gang/extres), allocated two GPUs of the node and reserved for
// the pod, named by the pod's status.extendedResourceClaimStatus as the
// commit writes it. The manager prepares the claim it finds only there, and
// gives the container the CDI devices of the request its mapping names; a
// container that asks for nothing gets none.
func TestKubeletPreparesExtendedResourceClaim(t *testing.T) {
	if !utilfeature.DefaultFeatureGate.Enabled(features.DRAExtendedResource) {
		t.Fatal("DRAExtendedResource is off in the kubelet's gates: it is GA and locked on in 1.37")
	}
	logger, ctx := ktesting.NewTestContext(t)
	cp := framework.StartT(t, framework.Options{})
	admin := cp.AdminClient(t)
	n, err := admin.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{})
	must(t, "create node", err)
	rules, err := framework.LoadRules(framework.PluginRulesFile)
	must(t, "load rules", err)
	plugin := framework.NewPlugin(t, cp.KubeconfigWithRules(t, "gpufabric-plugin", rules), "pkg/devices/mock/fabrics/gb200-nvl72x2.yaml", nodeName)
	plugin.Start()
	pod, claim := extendedPod(t, admin)

	mgr, err := dra.NewManager(logger, admin, t.TempDir())
	must(t, "new DRA manager", err)
	sources := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	must(t, "start DRA manager", mgr.Start(ctx, func() []*v1.Pod { return []*v1.Pod{pod} },
		func(context.Context) (*v1.Node, error) { return n, nil }, sources))
	t.Cleanup(mgr.Stop)
	register(t, ctx, mgr, plugin)

	must(t, "prepare the pod", mgr.PrepareResources(ctx, pod))
	info, err := mgr.GetResources(pod, &pod.Spec.Containers[0])
	must(t, "get resources of train", err)
	want := sets.New("gpufabric.dev/claim="+string(claim.UID)+"-gpu-0", "gpufabric.dev/claim="+string(claim.UID)+"-gpu-1")
	got := sets.New[string]()
	for _, d := range info.CDIDevices {
		got.Insert(d.Name)
	}
	if !got.Equal(want) {
		t.Errorf("train's CDI devices %v, want %v", sets.List(got), sets.List(want))
	}
	info, err = mgr.GetResources(pod, &pod.Spec.Containers[1])
	must(t, "get resources of sidecar", err)
	if len(info.CDIDevices) != 0 {
		t.Errorf("the container asking nothing got CDI devices %+v", info.CDIDevices)
	}
	spec := filepath.Join(plugin.CDIRoot(), topology.DriverName+"-claim_"+string(claim.UID)+".json")
	if _, err := os.Stat(spec); err != nil {
		t.Errorf("CDI spec of the special claim: %v", err)
	}
	must(t, "unprepare the pod", mgr.UnprepareResources(ctx, pod))
	if _, err := os.Stat(spec); !os.IsNotExist(err) {
		t.Errorf("CDI spec still there after unprepare (err %v)", err)
	}
}

// extendedPod creates, once the plugin published the node's pool, a pod
// bound to the node asking nvidia.com/gpu: 2 (and a second container
// asking nothing), its special claim allocated gpu-0 and gpu-1 and reserved
// for it, and the pod's status naming the claim.
func extendedPod(t *testing.T, c kubernetes.Interface) (*v1.Pod, *resourceapi.ResourceClaim) {
	t.Helper()
	ctx := t.Context()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
		return err == nil && len(l.Items) > 0, nil
	})
	must(t, "wait for the node's slices", err)
	gpus := v1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
	pod, err := c.CoreV1().Pods("default").Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "serve-0", Namespace: "default"},
		Spec: v1.PodSpec{
			NodeName: nodeName, SchedulerName: topology.SchedulerName,
			Containers: []v1.Container{
				{Name: "train", Image: "registry.example/train:1", Resources: v1.ResourceRequirements{Limits: gpus}},
				{Name: "sidecar", Image: "registry.example/log:1"},
			},
		},
	}, metav1.CreateOptions{})
	must(t, "create pod", err)
	classes := extres.NewClasses([]*resourceapi.DeviceClass{{
		ObjectMeta: metav1.ObjectMeta{Name: topology.GPUDeviceClass},
		Spec:       resourceapi.DeviceClassSpec{ExtendedResourceName: ptr.To("nvidia.com/gpu")},
	}})
	r, err := extres.RequestOf(pod, classes)
	must(t, "requests", err)
	claim, err := c.ResourceV1().ResourceClaims("default").Create(ctx, extres.NewClaim(pod, r), metav1.CreateOptions{})
	must(t, "create special claim", err)
	var results []resourceapi.DeviceRequestAllocationResult
	for i := range 2 {
		results = append(results, resourceapi.DeviceRequestAllocationResult{Request: r.Requests[0].Name, Driver: topology.DriverName, Pool: nodeName, Device: topology.GPUDeviceName(i)})
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	claim, err = c.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	must(t, "allocate special claim", err)
	st := extres.Status(claim.Name, r)
	pod.Status.ExtendedResourceClaimStatus = &st
	pod, err = c.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	must(t, "write extendedResourceClaimStatus", err)
	return pod, claim
}
