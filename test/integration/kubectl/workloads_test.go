package kubectl

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/inspect"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// createWorkloads creates the gangs one after the other, each waiting for
// the scheduler's answer, so that every message and event is the same on
// every run: a gang's pods first (the scheduler marks them PodGroupNotFound,
// which shows it saw them all), then its PodGroup, tried once with every
// member there (no WaitingForMembers event in between).
func createWorkloads(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	for _, ns := range []string{"team-a", "team-b"} {
		_, err := c.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		must(t, "create namespace", err)
		must(t, "create service account", framework.EnsureServiceAccount(t.Context(), c, ns))
	}
	// An Indexed Job's gang: its pods carry the Job's labels.
	train := []string{"llm-train-0-k7x2p", "llm-train-1-q9m4z"}
	createClaim(t, c, "team-a", "train-fabric", topology.FabricDomainDeviceClass, 1)
	for i, name := range train {
		labels := map[string]string{inspect.LabelJobName: "llm-train", inspect.LabelJobCompletionIndex: fmt.Sprint(i)}
		createPod(t, c, "team-a", name, "train", labels, 4)
	}
	createGroup(t, c, "team-a", "train", 2, train)
	waitGroup(t, c, "team-a", "train", metav1.ConditionTrue)

	createPod(t, c, "team-b", "notebook", "", nil, 1)
	waitPod(t, c, "team-b", "notebook", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })

	big := []string{"big-0", "big-1", "big-2", "big-3"} // big-3 is gated
	createClaim(t, c, "team-b", "big-fabric", topology.FabricDomainDeviceClass, 1)
	for _, name := range big {
		createPod(t, c, "team-b", name, "big", nil, 4)
	}
	createGroup(t, c, "team-b", "big", 3, big)
	waitGroup(t, c, "team-b", "big", metav1.ConditionFalse)
	for _, name := range big {
		reason := corev1.PodReasonUnschedulable
		if name == "big-3" {
			reason = corev1.PodReasonSchedulingGated
		}
		waitPod(t, c, "team-b", name, podScheduled(reason))
	}
	poll(t, "FailedScheduling event", 30*time.Second, func(ctx context.Context) error {
		return findEvent(ctx, c, "team-b", "big", vocab.EventFailedScheduling)
	})

	createPod(t, c, "team-b", "ghost-0", "ghost", nil, 1)
	waitPod(t, c, "team-b", "ghost-0", podScheduled(vocab.ReasonPodGroupNotFound))
}

// createGroup creates a PodGroup in one NVLink domain with its shared
// claim <name>-fabric (created before), once the scheduler has seen its
// pods waiting for it.
func createGroup(t *testing.T, c kubernetes.Interface, ns, name string, minCount int32, pods []string) {
	t.Helper()
	for _, p := range pods {
		waitPod(t, c, ns, p, podScheduled(vocab.ReasonPodGroupNotFound))
	}
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: topology.TopologyKeyNVLinkDomain}}},
			ResourceClaims:        []schedulingv1beta1.PodGroupResourceClaim{{Name: "fabric", ResourceClaimName: ptr.To(name + "-fabric")}},
		},
	}
	_, err := c.SchedulingV1beta1().PodGroups(ns).Create(t.Context(), pg, metav1.CreateOptions{})
	must(t, "create podgroup", err)
}

func createClaim(t *testing.T, c kubernetes.Interface, ns, name, class string, count int64) {
	t.Helper()
	cl := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "req", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count},
		}}}},
	}
	_, err := c.ResourceV1().ResourceClaims(ns).Create(t.Context(), cl, metav1.CreateOptions{})
	must(t, "create claim", err)
}

// createPod creates a pod with its own claim <name>-gpus of gpus GPUs and,
// in a group, the group's shared claim; big-3 has a scheduling gate.
func createPod(t *testing.T, c kubernetes.Interface, ns, name, group string, labels map[string]string, gpus int64) {
	t.Helper()
	createClaim(t, c, ns, name+"-gpus", topology.GPUDeviceClass, gpus)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			SchedulerName: topology.SchedulerName,
			Tolerations:   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "train", Image: "registry.example/train:1",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To(name + "-gpus")}},
		},
	}
	if group != "" {
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "fabric", ResourceClaimName: ptr.To(group + "-fabric")})
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: "fabric"})
	}
	if name == "big-3" {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}}
	}
	_, err := c.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	must(t, "create pod", err)
}

// waitGroup waits for PodGroupInitiallyScheduled with status and, for
// True, every member bound and the commit record gone.
func waitGroup(t *testing.T, c kubernetes.Interface, ns, name string, status metav1.ConditionStatus) {
	t.Helper()
	poll(t, "podgroup "+ns+"/"+name+" "+string(status), 60*time.Second, func(ctx context.Context) error {
		pg, err := c.SchedulingV1beta1().PodGroups(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled); cond == nil || cond.Status != status {
			return fmt.Errorf("condition %+v", cond)
		}
		if status != metav1.ConditionTrue {
			return nil
		}
		if _, err := c.CoreV1().ConfigMaps(recordNamespace).Get(ctx, vocab.RecordName(pg.UID), metav1.GetOptions{}); err == nil {
			return fmt.Errorf("commit record still there")
		}
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" {
				return fmt.Errorf("pod %s not bound", p.Name)
			}
		}
		return nil
	})
}

func waitPod(t *testing.T, c kubernetes.Interface, ns, name string, ok func(*corev1.Pod) bool) {
	t.Helper()
	poll(t, "pod "+ns+"/"+name, 60*time.Second, func(ctx context.Context) error {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !ok(p) {
			return fmt.Errorf("node %q, conditions %+v", p.Spec.NodeName, p.Status.Conditions)
		}
		return nil
	})
}

func podScheduled(reason string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == reason {
				return true
			}
		}
		return false
	}
}

// findEvent looks for an events.k8s.io event about a PodGroup.
func findEvent(ctx context.Context, c kubernetes.Interface, ns, name, reason string) error {
	evs, err := c.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var seen []string
	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			return nil
		}
		seen = append(seen, e.Reason)
	}
	return fmt.Errorf("no %s event about %s; seen %s", reason, name, strings.Join(seen, ", "))
}
