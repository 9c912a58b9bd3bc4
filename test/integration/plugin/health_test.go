package plugin

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestPluginGPUEvents injects GPU events into a running plugin (the mock's
// NVML event set delivers the fabric file's xid and ecc faults as they
// appear) with kube-controller-manager running:
//   - a fatal Xid taints the GPU NoExecute in its ResourceSlice, and the
//     device taint eviction controller evicts the pod using it;
//   - the kubelet's health stream reports the GPU unhealthy;
//   - an application Xid taints nothing, another Xid taints NoSchedule, a
//     double-bit ECC error taints NoExecute;
//   - the taints survive a plugin restart in the same boot, and a reboot
//     (new boot id) clears them.
func TestPluginGPUEvents(t *testing.T) {
	const nodeName = "gb200-r1-n01"
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	ctx := t.Context()
	_, err := admin.CoreV1().Nodes().Create(ctx, itest.Node(nodeName, nil), metav1.CreateOptions{})
	itest.Must(t, "create node", err)
	rules, err := framework.LoadRules(framework.PluginRulesFile)
	itest.Must(t, "load plugin rules", err)
	p := framework.NewPlugin(t, cp.KubeconfigWithRules(t, "gpufabric-plugin", rules), itest.GB200Fabric, nodeName)
	base, err := os.ReadFile(p.Fabric)
	itest.Must(t, "read fabric", err)
	p.Start()
	waitSlices(t, admin, nodeName, func(s []resourceapi.ResourceSlice) bool { return len(devicesOf(s)) == 8 })
	stream, err := healthClient(t, p).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	itest.Must(t, "watch health", err)

	pod := gpuPod(t, admin, nodeName, "train-0", "train-0-gpu")
	allocated(t, admin, "train-0-gpu", map[string][]string{"gpus": {nodeName + "/gpu-2"}},
		resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})

	faults := "faults:\n- node: " + nodeName + "\n  xid: {gpu: 2, xid: 79}\n"
	start := time.Now()
	framework.WriteFile(t, p.Fabric, string(base)+faults)
	waitTaint(t, admin, nodeName, "gpu-2", topology.TaintXID, "79", resourceapi.DeviceTaintEffectNoExecute)
	t.Logf("xid 79 -> NoExecute taint in the apiserver: %v", time.Since(start))
	waitHealth(t, stream, "gpu-2", drahealthv1.HealthStatus_UNHEALTHY)
	// Without a kubelet the evicted pod stays terminating: its deletion
	// and DisruptionTarget condition are the controller's verdict.
	var evicted *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		evicted, err = admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && evicted.DeletionTimestamp != nil, nil
	})
	itest.Must(t, "wait for the device taint eviction controller to evict the pod on gpu-2", err)
	t.Logf("xid 79 -> pod deleted by the device taint eviction controller: %v", time.Since(start))
	if evicted != nil && !podConditionTrue(evicted, corev1.DisruptionTarget) {
		t.Errorf("evicted pod has no DisruptionTarget condition: %+v", evicted.Status.Conditions)
	}
	if !eventWithReason(t, admin, nodeName, "GPUHealthEvent") {
		t.Errorf("no GPUHealthEvent on node %s", nodeName)
	}

	faults += "- node: " + nodeName + "\n  xid: {gpu: 0, xid: 13}\n- node: " + nodeName + "\n  xid: {gpu: 1, xid: 63}\n- node: " + nodeName + "\n  ecc: {gpu: 3}\n"
	framework.WriteFile(t, p.Fabric, string(base)+faults)
	waitTaint(t, admin, nodeName, "gpu-1", topology.TaintXID, "63", resourceapi.DeviceTaintEffectNoSchedule)
	waitTaint(t, admin, nodeName, "gpu-3", topology.TaintECC, "double-bit", resourceapi.DeviceTaintEffectNoExecute)
	if d := devicesOf(mustSlices(t, admin, nodeName))["gpu-0"]; len(d.Taints) != 0 {
		t.Errorf("application xid 13 tainted gpu-0: %v", d.Taints)
	}

	// A restart in the same boot, with the faults gone from the file (the
	// events happened once): the taints stay.
	p.Stop()
	framework.WriteFile(t, p.Fabric, string(base))
	p.Start()
	kubeletClients(t, p)
	time.Sleep(2 * time.Second) // two health intervals: a wrong publish would have happened
	waitTaint(t, admin, nodeName, "gpu-2", topology.TaintXID, "79", resourceapi.DeviceTaintEffectNoExecute)

	// A reboot resets the GPUs.
	p.Stop()
	framework.WriteFile(t, p.BootIDFile(), "33333333-3333-3333-3333-333333333333\n")
	p.Start()
	waitSlices(t, admin, nodeName, func(s []resourceapi.ResourceSlice) bool {
		for _, d := range devicesOf(s) {
			if len(d.Taints) > 0 {
				return false
			}
		}
		return len(devicesOf(s)) == 8
	})
}

// waitTaint waits until device carries exactly the taint key=value:effect.
func waitTaint(t *testing.T, c kubernetes.Interface, nodeName, device, key, value string, effect resourceapi.DeviceTaintEffect) {
	t.Helper()
	waitSlices(t, c, nodeName, func(s []resourceapi.ResourceSlice) bool {
		for _, tt := range devicesOf(s)[device].Taints {
			if tt.Key == key && tt.Value == value && tt.Effect == effect {
				return true
			}
		}
		return false
	})
}

func mustSlices(t *testing.T, c kubernetes.Interface, nodeName string) []resourceapi.ResourceSlice {
	t.Helper()
	s, err := nodeSlices(t.Context(), c, nodeName)
	itest.Must(t, "list slices", err)
	return s
}

// gpuPod creates a pod bound to nodeName that uses claim. It tolerates the
// node's own not-ready taints (no kubelet runs), so only a device taint
// can evict it.
func gpuPod(t *testing.T, c kubernetes.Interface, nodeName, name, claim string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec: corev1.PodSpec{
			NodeName:       nodeName,
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}},
			Containers: []corev1.Container{{
				Name: "train", Image: "registry.example/train:1",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, Key: "node.kubernetes.io/not-ready"},
				{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, Key: "node.kubernetes.io/unreachable"}},
		},
	}
	pod, err := c.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
	itest.Must(t, "create pod "+name, err)
	return pod
}

func podConditionTrue(pod *corev1.Pod, c corev1.PodConditionType) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == c && cond.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
