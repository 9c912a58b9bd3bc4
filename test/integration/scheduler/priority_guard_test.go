package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// Priority classes of the priority-guard tests: the same value, one
// whose policy is Never.
const (
	guardHigh      = "guard-high"
	guardHighNever = "guard-high-never"
)

// guardCluster: one NVLink domain (2 kwok nodes × 4 GPUs), the guard
// classes, a scheduler, and tenant-b's gang "hidden" (2 pods of 4 GPUs, no
// class: priority 0, disruptionMode All) filling the domain, created with
// tenant-b's own identity. It returns the admin client.
func guardCluster(t *testing.T) (*framework.ControlPlane, kubernetes.Interface) {
	t.Helper()
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true})
	admin := cp.AdminClient(t)
	itest.KwokFabric(t, admin, []string{"a"}, 2, 4)
	for _, pc := range []*schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: guardHigh}, Value: 1000},
		{ObjectMeta: metav1.ObjectMeta{Name: guardHighNever}, Value: 1000, PreemptionPolicy: ptr.To(corev1.PreemptNever)},
	} {
		_, err := admin.SchedulingV1().PriorityClasses().Create(t.Context(), pc, metav1.CreateOptions{})
		itest.Must(t, "create priority class", err)
	}
	itest.GangNamespace(t, admin, "tenant-b", 4)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4})
	createPriorityGang(t, tenantClient(t, cp, "tenant-b", "tenant-b"), "tenant-b", "hidden", "", true, 2)
	waitBound(t, admin, "tenant-b", "hidden", 2)
	return cp, admin
}

// refusedSaying waits until a PodGroup's condition is False and says want.
func refusedSaying(t *testing.T, c kubernetes.Interface, ns, name, want string) {
	t.Helper()
	itest.Poll(t, fmt.Sprintf("%s/%s refused saying %q", ns, name, want), 30*time.Second, func(ctx context.Context) error {
		pg, err := c.SchedulingV1beta1().PodGroups(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cond := findCondition(pg); cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, want) {
			return fmt.Errorf("condition %+v", cond)
		}
		return nil
	})
}

// victimUntouched: tenant-b's victim still runs whole and no preemption
// is under way.
func victimUntouched(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	pods, err := c.CoreV1().Pods("tenant-b").List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list victims", err)
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
			t.Errorf("victim %s evicted or unbound", p.Name)
		}
	}
	if err := noNominations(c)(t.Context()); err != nil {
		t.Error(err)
	}
}

// preemptsVictim: a gang that may preempt (class guard-high on the group
// and its pods) takes the victim's place, so the guards above, not the
// setup, kept the victim. tenant creates it, admin watches.
func preemptsVictim(t *testing.T, tenant, admin kubernetes.Interface, ns string) {
	t.Helper()
	createPriorityGang(t, tenant, ns, "legit", guardHigh, false, 2)
	waitBound(t, admin, ns, "legit", 2)
}

// TestSchedulerPriorityClassNever: a PodGroup naming a PriorityClass with
// preemptionPolicy Never does not preempt, although its pods (class
// guard-high, PreemptLowerPriority) rank above the victim and the
// PodGroup's own preemptionPolicy is unset (gate PodGroupPreemptionPolicy
// off); its condition says why. A gang of the same priority whose class
// allows preemption then does preempt.
func TestSchedulerPriorityClassNever(t *testing.T) {
	cp, admin := guardCluster(t)
	const ns = "tenant-a"
	itest.GangNamespace(t, admin, ns, 4)
	tenant := tenantClient(t, cp, "tenant-a", ns)
	pg := itest.TemplateGroup(ns, "never", 2)
	pg.Spec.PriorityClassName = guardHighNever
	_, err := tenant.SchedulingV1beta1().PodGroups(ns).Create(t.Context(), pg, metav1.CreateOptions{})
	itest.Must(t, "tenant creates the Never PodGroup", err)
	for i := range 2 {
		p := itest.TemplatePod(ns, fmt.Sprintf("never-%d", i), "never")
		p.Spec.PriorityClassName = guardHigh
		_, err := tenant.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		itest.Must(t, "tenant creates a member", err)
	}
	got, err := tenant.SchedulingV1beta1().PodGroups(ns).Get(t.Context(), "never", metav1.GetOptions{})
	itest.Must(t, "get the PodGroup", err)
	if got.Spec.PreemptionPolicy != nil || got.Spec.Priority == nil || *got.Spec.Priority != 1000 {
		t.Fatalf("PodGroup priority %v, policy %v: want 1000 from admission and no policy (gate off)", got.Spec.Priority, got.Spec.PreemptionPolicy)
	}

	refusedSaying(t, admin, ns, "never", "preemption not allowed: PriorityClass "+guardHighNever+" has preemptionPolicy Never")
	victimUntouched(t, admin)
	itest.Must(t, "delete the Never gang", tenant.SchedulingV1beta1().PodGroups(ns).Delete(t.Context(), "never", metav1.DeleteOptions{}))
	itest.Must(t, "delete its pods", tenant.CoreV1().Pods(ns).DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{}))
	preemptsVictim(t, tenant, admin, ns)
}

// TestSchedulerPriorityQuotaCap: tenant-a's ResourceQuota forbids class
// guard-high to its pods (scopeSelector PriorityClass In [guard-high],
// pods: 0). Its PodGroup names guard-high anyway (no quota checks a
// PodGroup) while its pods run at the default priority 0: the gang ranks at
// 0, does not preempt tenant-b's gang of priority 0, and its condition and
// a PriorityCapped event say so. A gang of a namespace that may use the
// class preempts.
func TestSchedulerPriorityQuotaCap(t *testing.T) {
	cp, admin := guardCluster(t)
	ctx := t.Context()
	const ns = "tenant-a"
	itest.GangNamespace(t, admin, ns, 4)
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-high"},
		Spec: corev1.ResourceQuotaSpec{
			Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")},
			ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
				ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{guardHigh},
			}}},
		},
	}
	_, err := admin.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{})
	itest.Must(t, "create quota", err)
	itest.Poll(t, "the quota controller fills the quota's status", 30*time.Second, func(ctx context.Context) error {
		q, err := admin.CoreV1().ResourceQuotas(ns).Get(ctx, "no-high", metav1.GetOptions{})
		if err != nil || len(q.Status.Hard) == 0 {
			return fmt.Errorf("status %+v: %v", q.Status, err)
		}
		return nil
	})
	tenant := tenantClient(t, cp, "tenant-a", ns)
	high := itest.TemplatePod(ns, "high-0", "")
	high.Spec.SchedulingGroup, high.Spec.PriorityClassName = nil, guardHigh
	if _, err := tenant.CoreV1().Pods(ns).Create(ctx, high, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("tenant created a pod of class %s despite its quota: %v", guardHigh, err)
	}

	pg := itest.TemplateGroup(ns, "forbidden", 2)
	pg.Spec.PriorityClassName = guardHigh
	_, err = tenant.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
	itest.Must(t, "tenant creates a PodGroup naming the forbidden class", err)
	for i := range 2 {
		_, err := tenant.CoreV1().Pods(ns).Create(ctx, itest.TemplatePod(ns, fmt.Sprintf("forbidden-%d", i), "forbidden"), metav1.CreateOptions{})
		itest.Must(t, "tenant creates a member", err)
	}

	refusedSaying(t, admin, ns, "forbidden", "priority capped at 0 (the PodGroup asks for 1000; its pods were admitted with priority 0 or lower)")
	itest.Poll(t, "PriorityCapped event", 30*time.Second, func(ctx context.Context) error {
		return schedFindEvent(ctx, admin, ns, "forbidden", vocab.EventPriorityCapped, "priority capped at 0")
	})
	victimUntouched(t, admin)
	itest.Must(t, "delete the capped gang", tenant.SchedulingV1beta1().PodGroups(ns).Delete(ctx, "forbidden", metav1.DeleteOptions{}))
	itest.Must(t, "delete its pods", tenant.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	const allowed = "tenant-c"
	itest.GangNamespace(t, admin, allowed, 4)
	preemptsVictim(t, tenantClient(t, cp, allowed, allowed), admin, allowed)
}

// TestSchedulerPreemptionAcrossTenants: tenant-a's gang preempts tenant-b's
// (each with its own identity). What tenant-a reads (events, its
// PodGroup's condition, its pods' conditions) never names tenant-b or its
// gang, and what tenant-b reads never names tenant-a or its gang; tenant-b
// is still told it was preempted, and tenant-a what it preempts.
func TestSchedulerPreemptionAcrossTenants(t *testing.T) {
	cp, admin := guardCluster(t)
	const ns = "tenant-a"
	itest.GangNamespace(t, admin, ns, 4)
	preemptsVictim(t, tenantClient(t, cp, ns, ns), admin, ns)
	itest.Poll(t, "Preempted event on tenant-b's gang", 30*time.Second, func(ctx context.Context) error {
		return schedFindEvent(ctx, admin, "tenant-b", "hidden", vocab.EventPreempted, "preempted by a gang of another namespace")
	})
	itest.Poll(t, "Preempting event on tenant-a's gang", 30*time.Second, func(ctx context.Context) error {
		return schedFindEvent(ctx, admin, ns, "legit", vocab.EventPreempting, "1 of other namespaces")
	})
	for reader, secrets := range map[string][]string{ns: {"tenant-b", "hidden"}, "tenant-b": {"tenant-a", "legit"}} {
		for _, msg := range messagesIn(t, admin, reader) {
			for _, s := range secrets {
				if strings.Contains(msg, s) {
					t.Errorf("%s reads %q: %s", reader, s, msg)
				}
			}
		}
	}
}

// messagesIn lists the messages a namespace's users read: its events'
// notes, its PodGroups' and pods' condition messages.
func messagesIn(t *testing.T, c kubernetes.Interface, ns string) []string {
	t.Helper()
	var out []string
	evs, err := c.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list events", err)
	for _, e := range evs.Items {
		out = append(out, e.Note)
	}
	pgs, err := c.SchedulingV1beta1().PodGroups(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list podgroups", err)
	for _, pg := range pgs.Items {
		for _, cond := range pg.Status.Conditions {
			out = append(out, cond.Message)
		}
	}
	pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list pods", err)
	for _, p := range pods.Items {
		for _, cond := range p.Status.Conditions {
			out = append(out, cond.Message)
		}
	}
	return out
}
