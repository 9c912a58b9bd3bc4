package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// holdFinalizer keeps an evicted victim in the API (terminating, its claim
// still reserved) until the test lets it go: a preemption caught halfway.
const holdFinalizer = "test.gpufabric.dev/hold"

// TestSchedulerPreemptionPodMode on the real control plane (kube-
// controller-manager, kwok), with victims held by a finalizer so the test
// sees the preemption halfway:
//   - a PodGroup at production whose pod is at production too preempts
//     (a PodGroup whose pods run lower is capped at their priority:
//     TestSchedulerPriorityQuotaCap);
//   - a victim PodGroup without disruptionMode All loses one pod, the one
//     the preemptor needs, not the whole group; that pod's DisruptionTarget
//     condition names the preemptor and the group gets none;
//   - while a second preemption waits for its last victim, room its first
//     victim freed stays held: a lower-priority gang that fits there is not
//     placed, and the preemptor gets the whole domain once the victim goes.
func TestSchedulerPreemptionPodMode(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	const ns, small = "preempt-pods", "preempt-small"
	itest.KwokFabric(t, admin, []string{"a", "b"}, 2, 4)
	for name, value := range testPriorities {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		_, err := admin.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
		itest.Must(t, "create priority class", err)
	}
	itest.GangNamespace(t, admin, ns, 4)
	itest.GangNamespace(t, admin, small, 2)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})

	// Domain a or b: the elastic batch group, one pod per node, each pod
	// its own victim unit. The other domain: two research notebooks.
	createHeldGang(t, admin, ns, "elastic", "batch", 2)
	waitBound(t, admin, ns, "elastic", 2)
	elasticDomain := gangDomain(t, admin, ns, "elastic")
	for i := range 2 {
		p := itest.TemplatePod(ns, fmt.Sprintf("notebook-%d", i), "")
		p.Spec.SchedulingGroup, p.Spec.PriorityClassName = nil, "research"
		p.Spec.ResourceClaims = p.Spec.ResourceClaims[1:]
		p.Spec.Containers[0].Resources.Claims = p.Spec.Containers[0].Resources.Claims[1:]
		p.Finalizers = []string{holdFinalizer}
		_, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		itest.Must(t, "create notebook", err)
	}
	waitBound(t, admin, ns, "notebook", 2)

	// One pod of a production PodGroup.
	pg := itest.TemplateGroup(ns, "prod-one", 1)
	pg.Spec.PriorityClassName = "production"
	_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
	itest.Must(t, "create prod-one", err)
	prodPod := itest.TemplatePod(ns, "prod-one-0", "prod-one")
	prodPod.Spec.PriorityClassName = "production"
	_, err = admin.CoreV1().Pods(ns).Create(ctx, prodPod, metav1.CreateOptions{})
	itest.Must(t, "create prod-one pod", err)
	victim := waitTerminating(t, admin, ns, "elastic-", 1)[0]
	checkPodDisruptionTarget(t, admin, ns, victim, "preempted by PodGroup preempt-pods/prod-one (priority 1000)")
	for _, name := range []string{"elastic-0", "elastic-1", "notebook-0", "notebook-1"} {
		if p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); name != victim && (err != nil || p.DeletionTimestamp != nil) {
			t.Errorf("%s evicted (err %v): only %s was needed", name, err, victim)
		}
	}
	release(t, admin, ns, victim)
	waitBound(t, admin, ns, "prod-one", 1)
	if got := gangDomain(t, admin, ns, "prod-one"); got != elasticDomain {
		t.Errorf("prod-one in %s, want the elastic group's domain %s", got, elasticDomain)
	}
	egroup, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, "elastic", metav1.GetOptions{})
	itest.Must(t, "get elastic", err)
	if c := meta.FindStatusCondition(egroup.Status.Conditions, schedulingv1beta1.DisruptionTarget); c != nil {
		t.Errorf("elastic group got %+v: only one of its pods was a victim", c)
	}

	// A two-node production gang: only the notebooks' domain can hold it.
	// Halfway (one notebook gone), a batch gang of 2 GPUs that would fit on
	// the freed node is not placed there.
	createPriorityGang(t, admin, ns, "prod-two", "production", false, 2)
	notebooks := waitTerminating(t, admin, ns, "notebook-", 2)
	createPriorityGang(t, admin, small, "late", "batch", false, 1)
	release(t, admin, ns, notebooks[0])
	itest.Poll(t, notebooks[0]+" gone and its claim free", 30*time.Second, func(ctx context.Context) error {
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, notebooks[0], metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (err %v)", err)
		}
		return claimsOfPodFree(ctx, admin, ns, notebooks[0])
	})
	// The freed node wakes every waiting gang; give the late gang time to
	// be tried against it.
	time.Sleep(3 * time.Second)
	st, err := itest.ReadGang(ctx, admin, small)
	itest.Must(t, "read late", err)
	if st.Bound() != 0 {
		t.Fatalf("the late batch gang took room held for prod-two")
	}
	release(t, admin, ns, notebooks[1])
	waitBound(t, admin, ns, "prod-two", 2)
	if got := gangDomain(t, admin, ns, "prod-two"); got == elasticDomain {
		t.Errorf("prod-two in %s, the domain of prod-one", got)
	}
	st, err = itest.ReadGang(ctx, admin, small)
	itest.Must(t, "read late", err)
	if st.Bound() != 0 {
		t.Errorf("the late batch gang was placed in a full cluster")
	}
	itest.Poll(t, "nomination records gone", 30*time.Second, noNominations(admin))
	if dup, err := itest.DevicesAllocatedTwice(ctx, admin); err != nil || len(dup) > 0 {
		t.Errorf("devices allocated twice %v (err %v)", dup, err)
	}
}

// createHeldGang creates a PodGroup of n pods at a priority class,
// disruptionMode unset (each pod a victim of its own), whose pods carry
// holdFinalizer.
func createHeldGang(t *testing.T, c kubernetes.Interface, ns, name, class string, n int) {
	t.Helper()
	pg := itest.TemplateGroup(ns, name, int32(n))
	pg.Spec.PriorityClassName = class
	_, err := c.SchedulingV1beta1().PodGroups(ns).Create(t.Context(), pg, metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	for i := range n {
		p := itest.TemplatePod(ns, fmt.Sprintf("%s-%d", name, i), name)
		p.Spec.PriorityClassName, p.Finalizers = class, []string{holdFinalizer}
		_, err := c.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}
}

// waitTerminating waits until exactly n pods named prefix* are being
// deleted and returns their names, sorted.
func waitTerminating(t *testing.T, c kubernetes.Interface, ns, prefix string, n int) []string {
	t.Helper()
	var names []string
	itest.Poll(t, fmt.Sprintf("%d %s* pods evicted", n, prefix), 30*time.Second, func(ctx context.Context) error {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		names = names[:0]
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, prefix) && p.DeletionTimestamp != nil {
				names = append(names, p.Name)
			}
		}
		if len(names) != n {
			return fmt.Errorf("terminating %v", names)
		}
		return nil
	})
	// The preemption must not go further while it waits.
	time.Sleep(time.Second)
	pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list pods", err)
	count := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			count++
		}
	}
	if count != n {
		t.Fatalf("%d pods terminating, want only the %d victims %v", count, n, names)
	}
	return names
}

// checkPodDisruptionTarget: the victim's DisruptionTarget condition is
// the scheduler's and names the preemptor.
func checkPodDisruptionTarget(t *testing.T, c kubernetes.Interface, ns, name, want string) {
	t.Helper()
	itest.Poll(t, "DisruptionTarget of "+name, 30*time.Second, func(ctx context.Context) error {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.DisruptionTarget && cond.Reason == vocab.ReasonPreemptionByScheduler && strings.Contains(cond.Message, want) {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", p.Status.Conditions)
	})
}

// release removes holdFinalizer from a pod.
func release(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": nil}})
	itest.Must(t, "encode patch", err)
	_, err = c.CoreV1().Pods(ns).Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("release %s: %v", name, err)
	}
}

// claimsOfPodFree: no claim in ns is still reserved for the pod.
func claimsOfPodFree(ctx context.Context, c kubernetes.Interface, ns, pod string) error {
	claims, err := c.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, cl := range claims.Items {
		for _, r := range cl.Status.ReservedFor {
			if r.Resource == "pods" && r.Name == pod {
				return fmt.Errorf("claim %s still reserved for %s", cl.Name, pod)
			}
		}
	}
	return nil
}
