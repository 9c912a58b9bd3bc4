package extres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/extres"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

const ns = "team"

// TestExtendedResources: with gpu.gpufabric.dev naming nvidia.com/gpu, on
// four kwok nodes of 8 GPUs (two NVLink domains):
//   - a Deployment's pods asking nvidia.com/gpu: 4 get 4 GPUs of their
//     node each, through claims with kube-scheduler's shape;
//   - an Indexed Job gang of 2 pods asking 8 each is placed whole, each
//     pod on a node of its own, and its PodGroup says so;
//   - a pod asking nvidia.com/gpu and a claim of its own gets both on one
//     node; a pod asking the class's implicit name gets it too;
//   - a pod asking 16 (more than any node) and one asking 40 (more than a
//     claim holds) are refused with the reason, and nothing is allocated
//     for them;
//   - deleting a pod releases its GPUs: kube-controller-manager deletes
//     its claim;
//   - a claim that takes the name of a pod's special claim refuses the pod
//     (event), is left as it is, and once it is deleted the pod is placed.
func TestExtendedResources(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true})
	admin := cp.AdminClient(t)
	ctx := t.Context()
	itest.KwokFabric(t, admin, []string{"a", "b"}, 2, 8)
	class, err := admin.ResourceV1().DeviceClasses().Get(ctx, topology.GPUDeviceClass, metav1.GetOptions{})
	itest.Must(t, "get GPU class", err)
	class.Spec.ExtendedResourceName = ptr.To(string(gpuResource))
	_, err = admin.ResourceV1().DeviceClasses().Update(ctx, class, metav1.UpdateOptions{})
	itest.Must(t, "name nvidia.com/gpu in the GPU class", err)
	itest.GangNamespace(t, admin, ns, 1)
	// A refused pod is tried again after at most 5 s, cluster change or not.
	startScheduler(t, schedulerClient(t, cp), scheduler.Config{MaxUnschedulableWait: 5 * time.Second})

	t.Run("Deployment asking nvidia.com/gpu: 4", func(t *testing.T) {
		_, err := admin.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "serve", 2, 4), metav1.CreateOptions{})
		itest.Must(t, "create Deployment", err)
		itest.Poll(t, "both replicas hold 4 GPUs of their node", 90*time.Second, func(ctx context.Context) error {
			return specialClaims(ctx, admin, "app", "serve", 2, 4)
		})
	})
	t.Run("Indexed Job gang asking nvidia.com/gpu: 8 each", func(t *testing.T) {
		_, err := admin.BatchV1().Jobs(ns).Create(ctx, gangJob(ns, "train", 2, 8), metav1.CreateOptions{})
		itest.Must(t, "create Job", err)
		itest.Poll(t, "the gang holds 8 GPUs on each of two nodes", 90*time.Second, func(ctx context.Context) error {
			if err := specialClaims(ctx, admin, "job-name", "train", 2, 8); err != nil {
				return err
			}
			pods, err := podsWith(ctx, admin, ns, "job-name", "train")
			if err != nil {
				return err
			}
			if pods[0].Spec.NodeName == pods[1].Spec.NodeName || pods[0].Spec.SchedulingGroup == nil {
				return fmt.Errorf("gang pods on %s and %s, group %+v", pods[0].Spec.NodeName, pods[1].Spec.NodeName, pods[0].Spec.SchedulingGroup)
			}
			pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, ptr.Deref(pods[0].Spec.SchedulingGroup.PodGroupName, ""), metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range pg.Status.Conditions {
				if c.Type == vocab.ConditionInitiallyScheduled && c.Status == metav1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("PodGroup %s conditions %+v", pg.Name, pg.Status.Conditions)
		})
	})
	t.Run("nvidia.com/gpu beside a claim of the pod's, and the implicit name", func(t *testing.T) {
		mixed := podSpec(gpuResource, 2)
		mixed.ResourceClaims = []corev1.PodResourceClaim{{Name: "own", ResourceClaimTemplateName: ptr.To(itest.GPUTemplate)}}
		mixed.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "own"}}
		_, err := admin.CoreV1().Pods(ns).Create(ctx, bare(ns, "mixed", mixed), metav1.CreateOptions{})
		itest.Must(t, "create mixed pod", err)
		implicit := corev1.ResourceName(resourceapi.ResourceDeviceClassPrefix + topology.GPUDeviceClass)
		_, err = admin.CoreV1().Pods(ns).Create(ctx, bare(ns, "implicit", podSpec(implicit, 1)), metav1.CreateOptions{})
		itest.Must(t, "create implicit pod", err)
		itest.Poll(t, "both placed with their claims on one node", 90*time.Second, func(ctx context.Context) error {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, "mixed", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if _, err := checkSpecialClaim(ctx, admin, p, gpuResource, topology.GPUDeviceClass, 2); err != nil {
				return err
			}
			if err := ownClaimOn(ctx, admin, p); err != nil {
				return err
			}
			q, err := admin.CoreV1().Pods(ns).Get(ctx, "implicit", metav1.GetOptions{})
			if err != nil {
				return err
			}
			_, err = checkSpecialClaim(ctx, admin, q, implicit, topology.GPUDeviceClass, 1)
			return err
		})
	})
	t.Run("more than any node, more than a claim", func(t *testing.T) {
		testRefused(t, admin)
	})
	t.Run("deleting a pod releases its GPUs", func(t *testing.T) {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "implicit", metav1.GetOptions{})
		itest.Must(t, "get pod", err)
		name := extres.ClaimName(p)
		itest.Must(t, "delete pod", admin.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}))
		itest.Poll(t, "its claim deleted by kube-controller-manager", 90*time.Second, func(ctx context.Context) error {
			c, err := admin.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("claim %s still there: reserved for %+v, allocated %v", name, c.Status.ReservedFor, c.Status.Allocation != nil)
		})
	})
	t.Run("a claim that takes the special claim's name", func(t *testing.T) {
		testSquatter(t, admin)
	})
	dup, err := itest.DevicesAllocatedTwice(ctx, admin)
	if err != nil || len(dup) > 0 {
		t.Errorf("devices allocated twice: %v (%v)", dup, err)
	}
}

// specialClaims checks that the n pods with label key=value are bound,
// each with a special claim of gpus GPUs of its node.
func specialClaims(ctx context.Context, c kubernetes.Interface, key, value string, n int, gpus int64) error {
	pods, err := podsWith(ctx, c, ns, key, value)
	if err != nil {
		return err
	}
	if len(pods) != n {
		return fmt.Errorf("%d pods of %s=%s, want %d", len(pods), key, value, n)
	}
	var errs []error
	for i := range pods {
		_, err := checkSpecialClaim(ctx, c, &pods[i], gpuResource, topology.GPUDeviceClass, gpus)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ownClaimOn checks that the pod's template claim is allocated on its node
// and reserved for it.
func ownClaimOn(ctx context.Context, c kubernetes.Interface, p *corev1.Pod) error {
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		return fmt.Errorf("pod %s: claim statuses %+v", p.Name, p.Status.ResourceClaimStatuses)
	}
	own, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if a := own.Status.Allocation; a == nil || len(a.Devices.Results) != 1 || a.Devices.Results[0].Pool != p.Spec.NodeName || len(own.Status.ReservedFor) != 1 {
		return fmt.Errorf("pod %s on %s: its own claim %s allocated %+v, reserved %+v", p.Name, p.Spec.NodeName, own.Name, own.Status.Allocation, own.Status.ReservedFor)
	}
	return nil
}

// testRefused: a pod asking 16 GPUs (nodes have 8) is refused with a
// message that names the class serving nvidia.com/gpu, and its claim stays
// unallocated; a pod asking 40 (a claim holds 32) is refused before any
// claim is made.
func testRefused(t *testing.T, admin kubernetes.Interface) {
	ctx := t.Context()
	for _, p := range []*corev1.Pod{bare(ns, "huge", podSpec(gpuResource, 16)), bare(ns, "too-many", podSpec(gpuResource, 40))} {
		_, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		itest.Must(t, "create "+p.Name, err)
	}
	for pod, want := range map[string]string{
		"huge":     "nvidia.com/gpu is served through DRA by DeviceClass gpu.gpufabric.dev (pod huge asks 16)",
		"too-many": "pod team/too-many: its extended resources backed by DRA (nvidia.com/gpu) ask for 40 devices, more than the 32 one ResourceClaim holds",
	} {
		itest.Poll(t, pod+" refused with the reason", 60*time.Second, func(ctx context.Context) error {
			notes, err := warnings(ctx, admin, ns, pod, vocab.EventFailedScheduling)
			if err != nil {
				return err
			}
			if !anyContains(notes, want) {
				return fmt.Errorf("FailedScheduling events of %s: %q, want %q", pod, notes, want)
			}
			p, err := admin.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Spec.NodeName != "" {
				t.Errorf("pod %s bound to %s", pod, p.Spec.NodeName)
			}
			return nil
		})
	}
	huge, err := admin.CoreV1().Pods(ns).Get(ctx, "huge", metav1.GetOptions{})
	itest.Must(t, "get huge", err)
	if c, err := admin.ResourceV1().ResourceClaims(ns).Get(ctx, extres.ClaimName(huge), metav1.GetOptions{}); err != nil || c.Status.Allocation != nil {
		t.Errorf("huge's claim: err %v, allocated %v; want it unallocated", err, c.Status.Allocation != nil)
	}
	tooMany, err := admin.CoreV1().Pods(ns).Get(ctx, "too-many", metav1.GetOptions{})
	itest.Must(t, "get too-many", err)
	if _, err := admin.ResourceV1().ResourceClaims(ns).Get(ctx, extres.ClaimName(tooMany), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("too-many got a claim (err %v), want none", err)
	}
}

// testSquatter: a gated pod's special-claim name is taken by a claim an
// admin creates (no annotation, no owner); once the gate goes, the pod is
// refused with an event naming the claim, which is left as it was; once
// that claim is deleted, the pod gets its own and is placed.
func testSquatter(t *testing.T, admin kubernetes.Interface) {
	ctx := t.Context()
	spec := podSpec(gpuResource, 1)
	spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/hold"}}
	p, err := admin.CoreV1().Pods(ns).Create(ctx, bare(ns, "squatted", spec), metav1.CreateOptions{})
	itest.Must(t, "create gated pod", err)
	name := extres.ClaimName(p)
	squat := itest.GPUClaim(ns, name, 1)
	squat, err = admin.ResourceV1().ResourceClaims(ns).Create(ctx, squat, metav1.CreateOptions{})
	itest.Must(t, "take the claim's name", err)
	p.Spec.SchedulingGates = nil
	_, err = admin.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
	itest.Must(t, "remove the gate", err)
	want := "the name of its extended-resource claim, " + name + ", is taken by a ResourceClaim that is not the pod's"
	itest.Poll(t, "refused with an event", 60*time.Second, func(ctx context.Context) error {
		notes, err := warnings(ctx, admin, ns, "squatted", vocab.EventFailedScheduling)
		if err != nil {
			return err
		}
		if !anyContains(notes, want) {
			return fmt.Errorf("events %q, want %q", notes, want)
		}
		return nil
	})
	got, err := admin.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
	itest.Must(t, "get the other claim", err)
	if got.UID != squat.UID || got.ResourceVersion != squat.ResourceVersion {
		t.Errorf("the other claim was changed: %+v", got)
	}
	itest.Must(t, "delete the other claim", admin.ResourceV1().ResourceClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}))
	itest.Poll(t, "placed with its own claim", 60*time.Second, func(ctx context.Context) error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "squatted", metav1.GetOptions{})
		if err != nil {
			return err
		}
		_, err = checkSpecialClaim(ctx, admin, p, gpuResource, topology.GPUDeviceClass, 1)
		return err
	})
}
