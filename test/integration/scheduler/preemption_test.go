package scheduler

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// Priority classes of the preemption tests.
var testPriorities = map[string]int32{"batch": 100, "research": 500, "production": 1000}

// preemptionCluster: kwok nodes in NVLink domains a and b (2 nodes × 4
// GPUs each), the priority classes, and a namespace whose gpus template
// asks 4 GPUs. Domain a runs the PodGroup "batch" (priority batch,
// disruptionMode All, 2 pods); domain b runs "notebook-0" and "notebook-1"
// (priority research, single pods without a PodGroup).
func preemptionCluster(t *testing.T, cp *framework.ControlPlane, admin kubernetes.Interface, ns string, sched kubernetes.Interface) *runningScheduler {
	t.Helper()
	ctx := t.Context()
	itest.KwokFabric(t, admin, []string{"a", "b"}, 2, 4)
	for name, value := range testPriorities {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := admin.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create priority class: %v", err)
		}
	}
	itest.GangNamespace(t, admin, ns, 4)
	rs := startScheduler(t, sched, scheduler.Config{DomainChannels: 4})
	createPriorityGang(t, admin, ns, "batch", "batch", true, 2)
	waitBound(t, admin, ns, "batch", 2)
	for i := range 2 {
		p := itest.TemplatePod(ns, fmt.Sprintf("notebook-%d", i), "")
		p.Labels = map[string]string{"app": "notebook"}
		p.Spec.SchedulingGroup, p.Spec.PriorityClassName = nil, "research"
		p.Spec.ResourceClaims = p.Spec.ResourceClaims[1:]
		p.Spec.Containers[0].Resources.Claims = p.Spec.Containers[0].Resources.Claims[1:]
		_, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		itest.Must(t, "create notebook", err)
	}
	waitBound(t, admin, ns, "notebook", 2)
	if d := gangDomain(t, admin, ns, "batch"); d != "dom-a" && d != "dom-b" {
		t.Fatalf("batch in %s", d)
	}
	return rs
}

// createPriorityGang creates a PodGroup of n pods in one NVLink domain at
// a priority class, optionally with disruptionMode All.
func createPriorityGang(t *testing.T, c kubernetes.Interface, ns, name, class string, whole bool, n int) {
	t.Helper()
	pg := itest.TemplateGroup(ns, name, int32(n))
	pg.Spec.PriorityClassName = class
	if whole {
		pg.Spec.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
	}
	_, err := c.SchedulingV1beta1().PodGroups(ns).Create(t.Context(), pg, metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	for i := range n {
		p := itest.TemplatePod(ns, fmt.Sprintf("%s-%d", name, i), name)
		p.Spec.PriorityClassName = class
		_, err := c.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}
}

// TestSchedulerPreemption on the real control plane (kube-controller-
// manager, kwok): a production gang that fits nowhere preempts the
// cheapest domain: the whole batch PodGroup (priority 100), not the
// research notebooks (500). The victims get events and DisruptionTarget
// conditions naming the preemptor, the batch group's shared claim is
// released, the preemptor lands in the freed domain, and its nomination
// record is gone. A batch gang then cannot preempt anything and says so,
// and a PodDisruptionBudget keeps a second production gang from evicting
// the notebooks.
func TestSchedulerPreemption(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	const ns = "preempt"
	preemptionCluster(t, cp, admin, ns, schedulerClient(t, cp, "gpufabric-scheduler"))
	batchDomain := gangDomain(t, admin, ns, "batch")
	batchPG, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, "batch", metav1.GetOptions{})
	itest.Must(t, "get batch", err)
	sharedClaim := batchPG.Status.ResourceClaimStatuses[0].ResourceClaimName

	createPriorityGang(t, admin, ns, "prod", "production", false, 2)
	waitBound(t, admin, ns, "prod", 2)
	if got := gangDomain(t, admin, ns, "prod"); got != batchDomain {
		t.Fatalf("prod placed in %s, want the batch's domain %s", got, batchDomain)
	}
	itest.Poll(t, "batch pods gone, notebooks untouched", 30*time.Second, func(ctx context.Context) error {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		notebooks := 0
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, "batch-") {
				return fmt.Errorf("victim %s still there", p.Name)
			}
			if strings.HasPrefix(p.Name, "notebook-") && p.DeletionTimestamp == nil {
				notebooks++
			}
		}
		if notebooks != 2 {
			return fmt.Errorf("%d notebooks left, want 2", notebooks)
		}
		return nil
	})
	pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, "batch", metav1.GetOptions{})
	itest.Must(t, "get batch", err)
	c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.DisruptionTarget)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != schedulingv1beta1.PodGroupReasonPreemptionByScheduler ||
		!strings.Contains(c.Message, "preempted by PodGroup preempt/prod (priority 1000)") {
		t.Errorf("batch DisruptionTarget %+v, want True/PreemptionByScheduler naming the preemptor", c)
	}
	for _, check := range []struct{ name, reason, note string }{
		// 9 devices: 8 GPUs and the group's fabric channel.
		{"prod", vocab.EventPreempting, "preempting 1 workloads of priority 100 or lower (2 pods, 9 devices)"},
		{"batch", vocab.EventPreempted, "preempted by PodGroup preempt/prod"},
		{"batch-0", vocab.EventPreempted, "preempted by PodGroup preempt/prod"},
	} {
		itest.Poll(t, check.reason+" event on "+check.name, 30*time.Second, func(ctx context.Context) error {
			return schedFindEvent(ctx, admin, ns, check.name, check.reason, check.note)
		})
	}
	itest.Poll(t, "the batch's shared claim released", 30*time.Second, func(ctx context.Context) error {
		cl, err := admin.ResourceV1().ResourceClaims(ns).Get(ctx, *sharedClaim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cl.Status.Allocation != nil || len(cl.Status.ReservedFor) > 0 {
			return fmt.Errorf("claim still allocated (%d reservations)", len(cl.Status.ReservedFor))
		}
		return nil
	})
	itest.Poll(t, "nomination record gone", 30*time.Second, noNominations(admin))

	// Nothing runs below batch's priority: a new batch gang waits and
	// evicts nothing.
	createPriorityGang(t, admin, ns, "batch2", "batch", true, 2)
	itest.Poll(t, "batch2 waits", 30*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, "batch2", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := findCondition(pg); c == nil || c.Status != metav1.ConditionFalse || strings.Contains(c.Message, "preempting") {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})

	// A budget that allows no disruption of the notebooks: a second
	// production gang does not evict them.
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "notebooks"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(2)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "notebook"}},
		},
	}
	_, err = admin.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
	itest.Must(t, "create pdb", err)
	itest.Poll(t, "the disruption controller counts the notebooks", 30*time.Second, func(ctx context.Context) error {
		p, err := admin.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "notebooks", metav1.GetOptions{})
		if err != nil || p.Status.CurrentHealthy != 2 {
			return fmt.Errorf("pdb status %+v: %v", p.Status, err)
		}
		return nil
	})
	createPriorityGang(t, admin, ns, "prod2", "production", false, 2)
	itest.Poll(t, "prod2 names the budget", 30*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, "prod2", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := findCondition(pg); c == nil || !strings.Contains(c.Message, "PodDisruptionBudget preempt/notebooks allows 0 disruptions") {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	for i := range 2 {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("notebook-%d", i), metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			t.Fatalf("notebook-%d evicted despite its budget: %v", i, err)
		}
	}
}

// noNominations: no nomination record is left in the scheduler's namespace.
func noNominations(c kubernetes.Interface) func(context.Context) error {
	return func(ctx context.Context) error {
		cms, err := c.CoreV1().ConfigMaps(itest.RecordNamespace).List(ctx, metav1.ListOptions{LabelSelector: vocab.LabelNomination + "=true"})
		if err != nil {
			return err
		}
		if len(cms.Items) > 0 {
			return fmt.Errorf("%d nomination records left", len(cms.Items))
		}
		return nil
	}
}

// evictionCounter counts the scheduler's eviction requests per pod.
type evictionCounter struct {
	mu    sync.Mutex
	byPod map[string]int
	next  http.RoundTripper
}

func (e *evictionCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/eviction") {
		parts := strings.Split(r.URL.Path, "/")
		e.mu.Lock()
		e.byPod[parts[len(parts)-2]]++
		e.mu.Unlock()
	}
	return e.next.RoundTrip(r)
}

func (e *evictionCounter) counts() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]int{}
	for k, v := range e.byPod {
		out[k] = v
	}
	return out
}

// countingSchedulerClient is schedulerClient whose evictions are counted.
func countingSchedulerClient(t *testing.T, cp *framework.ControlPlane, user string, ec *evictionCounter) kubernetes.Interface {
	t.Helper()
	itest.Must(t, "grant scheduler rules", framework.GrantSchedulerRules(t.Context(), cp.AdminClient(t), user, itest.RecordNamespace))
	cfg, err := cp.UserConfig(user)
	itest.Must(t, "user config", err)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { ec.next = rt; return ec })
	c, err := kubernetes.NewForConfig(cfg)
	itest.Must(t, "client for "+user, err)
	return c
}

// TestSchedulerPreemptionCrash: the scheduler dies after the first of the
// two evictions of a preemption (nomination recorded, one victim evicted).
// A new scheduler carries the preemption on from the record: it evicts
// the other victim, never one twice nor anything the record does not name,
// and places the preemptor.
func TestSchedulerPreemptionCrash(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	const ns = "preempt-crash"
	ec := &evictionCounter{byPod: map[string]int{}}
	client := countingSchedulerClient(t, cp, "gpufabric-scheduler", ec)
	first := preemptionCluster(t, cp, admin, ns, client)
	first.stop()

	evictions := 0
	var mu sync.Mutex
	crashed := startScheduler(t, client, scheduler.Config{DomainChannels: 4, CommitHook: func(step gate.Step, _ string) error {
		mu.Lock()
		defer mu.Unlock()
		if step == gate.StepEvict {
			if evictions++; evictions == 2 {
				return fmt.Errorf("crash before the second eviction")
			}
		}
		return nil
	}})
	createPriorityGang(t, admin, ns, "prod", "production", false, 2)
	<-crashed.done
	if crashed.err == nil || !strings.Contains(crashed.err.Error(), "crash before the second eviction") {
		t.Fatalf("scheduler ended with %v, want the injected crash", crashed.err)
	}
	cms, err := admin.CoreV1().ConfigMaps(itest.RecordNamespace).List(ctx, metav1.ListOptions{LabelSelector: vocab.LabelNomination + "=true"})
	itest.Must(t, "list nominations", err)
	if len(cms.Items) != 1 {
		t.Fatalf("%d nomination records after the crash, want 1", len(cms.Items))
	}
	if got := ec.counts(); len(got) != 1 {
		t.Fatalf("evictions before the crash %v, want exactly one victim", got)
	}

	reg := prometheus.NewRegistry()
	metrics, err := scheduler.NewMetrics(reg)
	itest.Must(t, "metrics", err)
	startScheduler(t, client, scheduler.Config{DomainChannels: 4, Metrics: metrics})
	waitBound(t, admin, ns, "prod", 2)
	itest.Poll(t, "nomination record gone", 30*time.Second, noNominations(admin))
	// The second term carried on the recorded preemption; it chose nothing.
	if got := schedMetricValue(t, reg, "gpufabric_scheduler_preemptions_total", "planned"); got != 0 {
		t.Errorf("second term planned %v preemptions, want 0 (the record's plan carried on)", got)
	}
	if got := schedMetricValue(t, reg, "gpufabric_scheduler_preemption_victims_total", "group"); got != 1 {
		t.Errorf("second term counted %v victim groups, want 1 (batch, its second pod)", got)
	}
	got := ec.counts()
	want := map[string]int{"batch-0": 1, "batch-1": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("evictions %v, want each batch pod exactly once and nothing else", got)
	}
	for i := range 2 {
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("notebook-%d", i), metav1.GetOptions{}); err != nil {
			t.Fatalf("notebook-%d: %v", i, err)
		}
	}
}
