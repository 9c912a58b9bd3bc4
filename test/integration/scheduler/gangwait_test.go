package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestGangWaitMetric: a placed gang is counted once in
// gang_wait_seconds{result="placed"}, with a wait no longer than since its
// PodGroup was created; a late member placed after the gang (minCount
// below the gang's size) is not counted again. A PodGroup deleted before it
// was placed is counted under result="abandoned"; the placed one, deleted
// before it, is not. A gang gated for a while waits from its last gate's
// removal.
func TestGangWaitMetric(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 4, 4)
	client := schedulerClient(t, cp, "gpufabric-scheduler")
	reg := prometheus.NewRegistry()
	metrics, err := scheduler.NewMetrics(reg)
	itest.Must(t, "metrics", err)
	startScheduler(t, client, scheduler.Config{DomainChannels: 4, Metrics: metrics, MetricsInterval: 200 * time.Millisecond})

	const ns = "wait-metric"
	itest.GangNamespace(t, admin, ns, 4)
	start := time.Now()
	itest.CreateGang(t, admin, ns, "g", 2, 2)
	bound := func(want int) {
		t.Helper()
		itest.Poll(t, fmt.Sprintf("%d members bound", want), 30*time.Second, func(ctx context.Context) error {
			st, err := itest.ReadGang(ctx, admin, ns)
			if err == nil && st.Bound() != want {
				err = fmt.Errorf("%d of %d bound", st.Bound(), want)
			}
			return err
		})
	}
	bound(2)
	count, sum := gangWait(t, reg, "placed")
	if count != 1 || sum <= 0 || sum > time.Since(start).Seconds()+1 {
		t.Fatalf("gang_wait_seconds{result=placed}: count %d, sum %vs; want 1 sample within the %s since the PodGroup was created", count, sum, time.Since(start))
	}
	itest.Poll(t, "InitiallyScheduled condition", 30*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, "g", metav1.GetOptions{})
		if err == nil && !meta.IsStatusConditionTrue(pg.Status.Conditions, vocab.ConditionInitiallyScheduled) {
			err = fmt.Errorf("conditions %+v", pg.Status.Conditions)
		}
		return err
	})
	itest.CreateMember(t, admin, ns, "g", 2)
	bound(3)
	if count, _ := gangWait(t, reg, "placed"); count != 1 {
		t.Errorf("gang_wait_seconds{result=placed} count after a late member = %d, want 1", count)
	}

	pgs := admin.SchedulingV1beta1().PodGroups(ns)
	itest.Must(t, "delete the placed podgroup", pgs.Delete(t.Context(), "g", metav1.DeleteOptions{}))
	now := int64(0)
	for i := range 3 {
		itest.Must(t, "delete a placed pod", admin.CoreV1().Pods(ns).Delete(t.Context(), fmt.Sprintf("g-%d", i), metav1.DeleteOptions{GracePeriodSeconds: &now}))
	}
	itest.Poll(t, "placed podgroup gone", 30*time.Second, func(ctx context.Context) error {
		if _, err := pgs.Get(ctx, "g", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("podgroup g still there (%v)", err)
		}
		return nil
	})
	time.Sleep(time.Second) // the scheduler's informer sees the deletion
	if count, _ := gangWait(t, reg, "abandoned"); count != 0 {
		t.Errorf("gang_wait_seconds{result=abandoned} count after deleting a placed gang = %d, want 0", count)
	}
	itest.CreateGang(t, admin, ns, "w", 3, 1) // waits for its other members
	itest.Must(t, "delete the waiting podgroup", pgs.Delete(t.Context(), "w", metav1.DeleteOptions{}))
	itest.Must(t, "delete the waiting pod", admin.CoreV1().Pods(ns).Delete(t.Context(), "w-0", metav1.DeleteOptions{}))
	itest.Poll(t, "abandoned gang counted", 30*time.Second, func(context.Context) error {
		if count, _ := gangWait(t, reg, "abandoned"); count != 1 {
			return fmt.Errorf("gang_wait_seconds{result=abandoned} count %d, want 1", count)
		}
		return nil
	})
	if count, _ := gangWait(t, reg, "placed"); count != 1 {
		t.Errorf("gang_wait_seconds{result=placed} count after the deletions = %d, want 1", count)
	}
	checkGatedGangWait(t, admin, reg, ns)
}

// checkGatedGangWait: a gang whose members were gated waits from the
// removal of its last gate, not from its creation.
func checkGatedGangWait(t *testing.T, admin kubernetes.Interface, reg *prometheus.Registry, ns string) {
	_, sumBefore := gangWait(t, reg, "placed")
	_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(t.Context(), itest.TemplateGroup(ns, "k", 2), metav1.CreateOptions{})
	itest.Must(t, "create the gated podgroup", err)
	for i := range 2 {
		p := itest.TemplatePod(ns, fmt.Sprintf("k-%d", i), "k")
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/admission"}}
		_, err := admin.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		itest.Must(t, "create a gated member", err)
	}
	const gated = time.Second
	time.Sleep(gated) // the gang waits gated, as for Kueue's admission
	var ungated time.Time
	for i := range 2 {
		ungated = time.Now()
		_, err := admin.CoreV1().Pods(ns).Patch(t.Context(), fmt.Sprintf("k-%d", i), types.StrategicMergePatchType, []byte(`{"spec":{"schedulingGates":null}}`), metav1.PatchOptions{})
		itest.Must(t, "remove the gate", err)
	}
	itest.Poll(t, "gated gang placed and counted", 30*time.Second, func(context.Context) error {
		if count, _ := gangWait(t, reg, "placed"); count != 2 {
			return fmt.Errorf("gang_wait_seconds{result=placed} count %d, want 2", count)
		}
		return nil
	})
	// The wait ends before now: it began after the last gate's removal,
	// not at the creation, gated (1 s) earlier.
	_, sum := gangWait(t, reg, "placed")
	if wait, since := sum-sumBefore, time.Since(ungated).Seconds(); wait <= 0 || wait > since+0.05 {
		t.Errorf("gated gang waited %.2fs, want at most the %.2fs since its last gate went (%s after its creation)", wait, since, gated)
	}
}

// gangWait reads gang_wait_seconds{result}: samples and sum.
func gangWait(t *testing.T, reg *prometheus.Registry, result string) (uint64, float64) {
	t.Helper()
	families, err := reg.Gather()
	itest.Must(t, "gather metrics", err)
	for _, f := range families {
		if f.GetName() != "gpufabric_scheduler_gang_wait_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == result {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	t.Fatalf("no gang_wait_seconds{result=%s}", result)
	return 0, 0
}
