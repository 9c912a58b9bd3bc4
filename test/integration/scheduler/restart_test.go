package scheduler

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// TestSchedulerGangRestartOnDeviceTaint on the real control plane (kube-
// controller-manager's device taint eviction, kwok): a GPU of a running
// gang gets a NoExecute taint (what the plugin publishes for a fatal Xid).
// The taint manager deletes the one member that uses it; for a PodGroup
// with disruptionMode All the scheduler evicts the other member, releases
// the group's shared claim, and places the recreated members whole in a
// domain without the broken GPU; the PodGroup's DisruptionTarget says so
// and goes back to False. A PodGroup in the default Pod mode loses only the
// member on the broken GPU.
func TestSchedulerGangRestartOnDeviceTaint(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	const ns = "restart"
	itest.KwokFabric(t, admin, []string{"a", "b", "c"}, 2, 4)
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})

	for _, g := range []struct {
		name  string
		whole bool
	}{{"train", true}, {"elastic", false}} {
		pg := itest.TemplateGroup(ns, g.name, 2)
		if g.whole {
			pg.Spec.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
		}
		_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
		itest.Must(t, "create podgroup", err)
		createMembers(t, admin, ns, g.name, 2)
		waitBound(t, admin, ns, g.name, 2)
	}
	trainDomain := gangDomain(t, admin, ns, "train")
	train1 := mustPod(t, admin, ns, "train-1")

	start := time.Now()
	taintDeviceOf(t, admin, ns, "train-0")
	taintDeviceOf(t, admin, ns, "elastic-0")
	itest.Poll(t, "train restarting", 30*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.DisruptionTarget)
		if c == nil || c.Status != metav1.ConditionTrue || (c.Reason != vocab.ReasonMemberDisrupted && c.Reason != vocab.ReasonReplacingMembers) {
			return fmt.Errorf("DisruptionTarget %+v", c)
		}
		return nil
	})
	itest.Poll(t, "GangRestart event on train naming train-0", 30*time.Second, func(ctx context.Context) error {
		return schedFindEvent(ctx, admin, ns, "train", vocab.EventGangRestart, "member train-0 on ")
	})
	itest.Poll(t, "both train members gone", 30*time.Second, func(ctx context.Context) error {
		for _, name := range []string{"train-0", "train-1"} {
			if p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s still there (deleting: %v, err %v)", name, p.DeletionTimestamp != nil, err)
			}
		}
		return nil
	})
	t.Logf("taint to whole gang gone: %v", time.Since(start))
	itest.Poll(t, "GangRestart event on train-1", 30*time.Second, func(ctx context.Context) error {
		return schedFindEvent(ctx, admin, ns, "train-1", vocab.EventGangRestart, "restarts whole")
	})
	itest.Poll(t, "train's shared claim released", 30*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, "train", metav1.GetOptions{})
		if err != nil || len(pg.Status.ResourceClaimStatuses) == 0 {
			return fmt.Errorf("podgroup %v", err)
		}
		cl, err := admin.ResourceV1().ResourceClaims(ns).Get(ctx, *pg.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cl.Status.Allocation != nil {
			return fmt.Errorf("still allocated, reserved for %v", cl.Status.ReservedFor)
		}
		return nil
	})

	// The Pod-mode group keeps its healthy member.
	itest.Poll(t, "elastic-0 gone", 30*time.Second, func(ctx context.Context) error {
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, "elastic-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (err %v)", err)
		}
		return nil
	})
	if p := mustPod(t, admin, ns, "elastic-1"); p.DeletionTimestamp != nil {
		t.Errorf("elastic-1 evicted: a Pod-mode group loses only the member on the broken GPU")
	}

	// The workload's controller creates the members again.
	createMembers(t, admin, ns, "train", 2)
	waitBound(t, admin, ns, "train", 2)
	if p := mustPod(t, admin, ns, "train-1"); p.UID == train1.UID {
		t.Fatalf("train-1 was not restarted")
	}
	if d := gangDomain(t, admin, ns, "train"); d == trainDomain {
		t.Errorf("restarted gang in %s again, where a GPU is tainted NoExecute", d)
	}
	itest.Poll(t, "train's DisruptionTarget back to False", 30*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.DisruptionTarget); c == nil || c.Status != metav1.ConditionFalse || c.Reason != vocab.ReasonGangRestarted {
			return fmt.Errorf("DisruptionTarget %+v", c)
		}
		return nil
	})
	if dup, err := itest.DevicesAllocatedTwice(ctx, admin); err != nil || len(dup) > 0 {
		t.Errorf("devices allocated twice %v (err %v)", dup, err)
	}
}

func createMembers(t *testing.T, c kubernetes.Interface, ns, group string, n int) {
	t.Helper()
	for i := range n {
		_, err := c.CoreV1().Pods(ns).Create(t.Context(), itest.TemplatePod(ns, fmt.Sprintf("%s-%d", group, i), group), metav1.CreateOptions{})
		itest.Must(t, "create member", err)
	}
}

func mustPod(t *testing.T, c kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	itest.Must(t, "get pod "+name, err)
	return p
}

// taintDeviceOf puts a NoExecute Xid taint on the first GPU allocated to
// the pod's own claims, in its node's ResourceSlice.
func taintDeviceOf(t *testing.T, c kubernetes.Interface, ns, pod string) {
	t.Helper()
	ctx := t.Context()
	p := mustPod(t, c, ns, pod)
	var device string
	for _, st := range p.Status.ResourceClaimStatuses {
		cl, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, *st.ResourceClaimName, metav1.GetOptions{})
		itest.Must(t, "get claim", err)
		if cl.Status.Allocation == nil {
			continue
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			if r.Pool == p.Spec.NodeName {
				device = r.Device
			}
		}
	}
	if device == "" {
		t.Fatalf("%s has no GPU of node %s allocated", pod, p.Spec.NodeName)
	}
	name := p.Spec.NodeName + "-" + topology.DriverName
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := c.ResourceV1().ResourceSlices().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range s.Spec.Devices {
			if s.Spec.Devices[i].Name == device {
				s.Spec.Devices[i].Taints = []resourceapi.DeviceTaint{{Key: topology.TaintXID, Value: "79", Effect: resourceapi.DeviceTaintEffectNoExecute}}
			}
		}
		_, err = c.ResourceV1().ResourceSlices().Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
	itest.Must(t, "taint "+device+" of "+p.Spec.NodeName, err)
}
