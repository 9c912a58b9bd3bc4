package scheduler

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// TestSchedulerGangQueue runs one scheduler on two domains of 4 nodes × 4
// GPUs (16 GPUs each) through the queue's cases, in order:
//   - fits-nowhere: 5 pods × 4 GPUs in one nvlinkDomain get an Unschedulable
//     condition and a FailedScheduling event with numbers, and no allocation;
//   - waits-for-minCount: a gang of 3 with 2 members waits, and goes when the
//     third arrives (12 GPUs of one domain);
//   - competing-gangs: three gangs of 2 × 4 GPUs, queued together; two fit
//     (the other domain), never on the same device; the third waits.
func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func TestSchedulerGangQueue(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a", "b"}, 4, 4)
	client := schedulerClient(t, cp, "gpufabric-scheduler")
	reg := prometheus.NewRegistry()
	metrics, err := scheduler.NewMetricsWith(reg, scheduler.MetricsOptions{PerDomain: true})
	itest.Must(t, "metrics", err)
	cfg := scheduler.Config{DomainChannels: 4, Metrics: metrics, MetricsInterval: 200 * time.Millisecond}
	sched := startScheduler(t, client, cfg)

	t.Run("fits-nowhere", func(t *testing.T) {
		const ns = "nowhere"
		itest.GangNamespace(t, admin, ns, 4)
		itest.CreateGang(t, admin, ns, "big", 5, 5)
		want := "needs 5 pods with 20 gpu.gpufabric.dev devices in one gpufabric.dev/nvlinkDomain: largest free 16 devices with room for 4 pods"
		itest.Poll(t, "unschedulable condition", 30*time.Second, func(ctx context.Context) error {
			return groupCondition(ctx, admin, ns, "big", metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable, want)
		})
		itest.Poll(t, "event", 30*time.Second, func(ctx context.Context) error {
			return schedFindEvent(ctx, admin, ns, "big", vocab.EventFailedScheduling, want)
		})
		itest.Poll(t, "PodScheduled=False on every member", 30*time.Second, func(ctx context.Context) error {
			pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, p := range pods.Items {
				c := podCondition(&p, corev1.PodScheduled)
				if c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable || !strings.Contains(c.Message, want) {
					return fmt.Errorf("pod %s: PodScheduled condition %+v", p.Name, c)
				}
			}
			return nil
		})
		st, err := itest.ReadGang(t.Context(), admin, ns)
		itest.Must(t, "read gang", err)
		if st.Bound() != 0 || st.Allocated() != 0 {
			t.Errorf("fits nowhere, yet %d pods bound and %d claims allocated", st.Bound(), st.Allocated())
		}
		if n := schedMetricValue(t, reg, "gpufabric_scheduler_gangs_refused_total", scheduler.ReasonUnschedulable); n < 1 {
			t.Errorf("gangs_refused_total{reason=unschedulable} = %v", n)
		}
	})

	t.Run("waits-for-minCount", func(t *testing.T) {
		const ns = "wait"
		itest.GangNamespace(t, admin, ns, 4)
		itest.CreateGang(t, admin, ns, "g", 3, 2)
		time.Sleep(2 * time.Second) // several backoff periods
		st, err := itest.ReadGang(t.Context(), admin, ns)
		itest.Must(t, "read gang", err)
		if st.Bound() != 0 || st.Allocated() != 0 {
			t.Fatalf("below minCount, yet %d pods bound and %d claims allocated", st.Bound(), st.Allocated())
		}
		itest.CreateMember(t, admin, ns, "g", 2)
		itest.Poll(t, "gang of 3 bound", 30*time.Second, func(ctx context.Context) error {
			if st, err = itest.ReadGang(ctx, admin, ns); err != nil {
				return err
			}
			if st.Bound() != 3 {
				return fmt.Errorf("%d of 3 bound", st.Bound())
			}
			return nil
		})
		checkPlacedGang(t, admin, st, "g", 3)
		dom := itest.DomainOf(st.Pods[0].Spec.NodeName)
		itest.Poll(t, "free GPUs gauge", 30*time.Second, func(context.Context) error {
			if n := schedMetricValue(t, reg, "gpufabric_scheduler_domain_free_gpus", dom); n != 4 {
				return fmt.Errorf("domain_free_gpus{domain=%s} = %v, want 4", dom, n)
			}
			return nil
		})
		if n := schedMetricValue(t, reg, "gpufabric_scheduler_gangs_placed_total", ""); n != 1 {
			t.Errorf("gangs_placed_total = %v, want 1", n)
		}
	})

	t.Run("competing-gangs", func(t *testing.T) {
		const ns = "compete"
		sched.stop() // queue all three gangs at once in a new instance
		itest.GangNamespace(t, admin, ns, 4)
		for _, g := range []string{"g1", "g2", "g3"} {
			itest.CreateGang(t, admin, ns, g, 2, 2)
		}
		itest.Poll(t, "claims created", 30*time.Second, func(ctx context.Context) error {
			st, err := itest.ReadGang(ctx, admin, ns)
			if err == nil && len(st.Claims) != 9 {
				err = fmt.Errorf("%d of 9 claims", len(st.Claims))
			}
			return err
		})
		startScheduler(t, client, scheduler.Config{DomainChannels: 4})
		var st *itest.GangState
		itest.Poll(t, "two gangs bound", 30*time.Second, func(ctx context.Context) error {
			var err error
			if st, err = itest.ReadGang(ctx, admin, ns); err != nil {
				return err
			}
			if st.Bound() != 4 {
				return fmt.Errorf("%d of 4 bound", st.Bound())
			}
			return st.Consistent(true)
		})
		bound := map[string]int{}
		for _, p := range st.Pods {
			if p.Spec.NodeName != "" {
				bound[strings.Split(p.Name, "-")[0]]++
			}
		}
		for g, n := range bound {
			if n != 2 {
				t.Errorf("gang %s partly bound: %d of 2", g, n)
			}
		}
		if dup, err := itest.DevicesAllocatedTwice(t.Context(), admin); err != nil || len(dup) > 0 {
			t.Fatalf("devices allocated twice: %v (%v)", dup, err)
		}
		for g := range map[string]bool{"g1": true, "g2": true, "g3": true} {
			if bound[g] == 0 {
				itest.Poll(t, "loser unschedulable", 20*time.Second, func(ctx context.Context) error {
					return groupCondition(ctx, admin, ns, g, metav1.ConditionFalse, schedulingv1beta1.PodGroupReasonUnschedulable, "needs 2 pods with 8")
				})
			}
		}
	})
}

// groupCondition checks a PodGroup's PodGroupInitiallyScheduled condition.
func groupCondition(ctx context.Context, c kubernetes.Interface, ns, name string, status metav1.ConditionStatus, reason, msgContains string) error {
	pg, err := c.SchedulingV1beta1().PodGroups(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cond := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
	if cond == nil || cond.Status != status || cond.Reason != reason || !strings.Contains(cond.Message, msgContains) {
		return fmt.Errorf("condition %+v, want %s/%s containing %q", cond, status, reason, msgContains)
	}
	return nil
}

// metricValue returns the value of a counter or gauge whose only label has
// value label ("" for no label), or -1.
func schedMetricValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	itest.Must(t, "gather metrics", err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() != label {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}
