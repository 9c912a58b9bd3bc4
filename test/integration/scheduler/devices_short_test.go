package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSchedulerDevicesShortWaitsForClaims: a gang refused because no
// domain has enough free devices is not tried again when a bound pod goes
// (its claims, still allocated, hold the devices), only when the devices
// are freed; then it is placed at once. Before this rule each pod's end
// cost such a gang a refused attempt and a doubled backoff, which could
// hold it past the deallocation when that comes late (kube-controller-
// manager at its default client rate).
//
// No kube-controller-manager runs, so the claims of a deleted pod stay
// allocated until the test deallocates them.
func TestSchedulerDevicesShortWaitsForClaims(t *testing.T) {
	const ns = "short"
	admin, reg := shortCluster(t, ns, scheduler.Config{})

	refused, settled := holderThenWaiter(t, admin, reg, ns, 1)
	time.Sleep(2 * time.Second) // backoff (at most 2 s) over: a woken gang would have been tried
	if n := refused(); n != settled {
		t.Errorf("refused %v times after the holder's pods went (claims still allocated), want %v: woken for nothing", n, settled)
	}
	for i := range 2 {
		deallocate(t, admin, ns, fmt.Sprintf("holder-%d-gpu", i))
	}
	waitBound(t, admin, ns, "waiter", 1)
	if n := refused(); n != settled {
		t.Errorf("refused %v times in all, want %v", n, settled)
	}
}

// shortCluster starts a control plane with 2 nodes of 4 GPUs in one
// NVLink domain, namespace ns, and the scheduler with cfg and metrics in
// the returned registry.
func shortCluster(t *testing.T, ns string, cfg scheduler.Config) (kubernetes.Interface, *prometheus.Registry) {
	t.Helper()
	cp := framework.StartT(t, framework.Options{})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 2, 4)
	itest.Must(t, "create namespace", framework.EnsureNamespace(t.Context(), admin, ns))
	itest.Must(t, "create service account", framework.EnsureServiceAccount(t.Context(), admin, ns))
	reg := prometheus.NewRegistry()
	metrics, err := scheduler.NewMetrics(reg)
	itest.Must(t, "metrics", err)
	cfg.Metrics = metrics
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), cfg)
	return admin, reg
}

// holderAndWaiter places a holder gang of 2 × 4 GPUs (all 8), then
// creates a waiter of waiters × 4 GPUs, which cannot fit; it returns the
// scheduler's counter of refused attempts.
func holderAndWaiter(t *testing.T, admin kubernetes.Interface, reg *prometheus.Registry, ns string, waiters int) func() float64 {
	t.Helper()
	createShortGang(t, admin, ns, "holder", 2)
	waitBound(t, admin, ns, "holder", 2)
	createShortGang(t, admin, ns, "waiter", waiters)
	return func() float64 {
		return schedMetricValue(t, reg, "gpufabric_scheduler_gangs_refused_total", scheduler.ReasonUnschedulable)
	}
}

// holderThenWaiter is holderAndWaiter, then waits until the waiter's
// refusals settle (refused, then parked), then deletes the holder's pods
// (their claims stay allocated). It returns the refusal counter and its
// settled value.
func holderThenWaiter(t *testing.T, admin kubernetes.Interface, reg *prometheus.Registry, ns string, waiters int) (func() float64, float64) {
	t.Helper()
	refused := holderAndWaiter(t, admin, reg, ns, waiters)
	settled := settleCount(t, refused, 1500*time.Millisecond)
	for i := range 2 {
		err := admin.CoreV1().Pods(ns).Delete(t.Context(), fmt.Sprintf("holder-%d", i), *metav1.NewDeleteOptions(0))
		itest.Must(t, "delete holder pod", err)
	}
	return refused, settled
}

// createShortGang creates a PodGroup of n members with 4 GPUs each (own
// claims), tolerating the kubelet-less nodes' taints.
func createShortGang(t *testing.T, c kubernetes.Interface, ns, group string, n int) {
	t.Helper()
	ctx := t.Context()
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: group},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(n)}}}}
	_, err := c.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	for i := range n {
		name := fmt.Sprintf("%s-%d", group, i)
		_, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, itest.GPUClaim(ns, name+"-gpu", 4), metav1.CreateOptions{})
		itest.Must(t, "create claim", err)
		p := itest.MemberPod(ns, name, group, "gpu", name+"-gpu")
		p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		_, err = c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}
}

// settleCount waits until count is at least 1 and has not changed for
// quiet, and returns it.
func settleCount(t *testing.T, count func() float64, quiet time.Duration) float64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last, since := count(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if n := count(); n != last {
			last, since = n, time.Now()
		}
		if last >= 1 && time.Since(since) >= quiet {
			return last
		}
	}
	t.Fatalf("count %v did not settle", last)
	return 0
}

// deallocate does what kube-controller-manager does for a claim whose
// consumers are gone: no reservation, no allocation.
func deallocate(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	itest.Poll(t, "deallocate "+name, 30*time.Second, func(ctx context.Context) error {
		claim, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		claim.Status = resourceapi.ResourceClaimStatus{}
		_, err = c.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
		return err
	})
}

// TestSchedulerShortGangWokenByFreedDevices: a gang refused short of
// devices is tried again as soon as claims freed as many devices as it
// lacked, and not before: with a 30 s backoff it is bound within seconds
// of the second deallocation (the scheduler is idle, so it does not wait
// its backoff out: kube-scheduler's SchedulerPopFromBackoffQ), and the
// first deallocation, which frees 4 of the 8 GPUs it lacks, wakes it for
// no refused attempt.
func TestSchedulerShortGangWokenByFreedDevices(t *testing.T) {
	const ns = "short-woken"
	const backoff = 30 * time.Second
	admin, reg := shortCluster(t, ns, scheduler.Config{InitialBackoff: backoff, MaxBackoff: backoff})

	refused, settled := holderThenWaiter(t, admin, reg, ns, 2) // the waiter lacks 8
	deallocate(t, admin, ns, "holder-0-gpu")
	time.Sleep(2 * time.Second)
	if n := refused(); n != settled {
		t.Errorf("refused %v times after 4 of the 8 GPUs it lacked were freed, want %v: woken for nothing", n, settled)
	}
	freed := time.Now()
	deallocate(t, admin, ns, "holder-1-gpu")
	waitBound(t, admin, ns, "waiter", 2)
	if d := time.Since(freed); d > 10*time.Second {
		t.Errorf("bound %v after the devices it lacked were freed; its backoff (%v ± 20%%) was waited out", d, backoff)
	}
	if n := refused(); n != settled {
		t.Errorf("refused %v times in all, want %v", n, settled)
	}
}
