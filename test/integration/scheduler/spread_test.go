package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSchedulerSpreadsOverFewestDomains: a 6-pod gang of 4 GPUs per pod
// fits no NVLink domain (dom-a has 2 nodes, dom-b 3, dom-c and dom-d 4), so
// it spans domains. The shipped scheduler takes the fewest (two) and of the
// pairs that hold it the fullest, dom-c whole and dom-a, with consecutive
// ranks together; the PodGroup's condition and the Scheduled event name the
// split. Filling nodes in name order would have used dom-a, dom-b and
// dom-c.
func TestSchedulerSpreadsOverFewestDomains(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, nil, 0, 4) // the device classes
	itest.UnevenDomains(t, admin, map[string]int{"a": 2, "b": 3, "c": 4, "d": 4}, 4)
	const ns, group = "spread", "wide"
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 0})

	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: group},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 6}}},
	}
	byRank := placeGPUOnlyGang(t, admin, pg, 6)
	want := map[string]string{"wide-0": "dom-a", "wide-1": "dom-a", "wide-2": "dom-c", "wide-3": "dom-c", "wide-4": "dom-c", "wide-5": "dom-c"}
	if fmt.Sprint(byRank) != fmt.Sprint(want) {
		t.Errorf("members by rank in domains %v, want %v", byRank, want)
	}
	note := "over 2 gpufabric.dev/nvlinkDomain domains (dom-c: 4 pods, dom-a: 2)"
	itest.Poll(t, "condition and event naming the split", 20*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
		if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, note) {
			return fmt.Errorf("condition: %+v", c)
		}
		return schedFindEvent(ctx, admin, ns, group, vocab.EventScheduled, note)
	})
}

// placeGPUOnlyGang creates pg and its n members (<pg>-<i>, the GPU claim
// only), waits until all are bound and returns each member's domain.
func placeGPUOnlyGang(t *testing.T, admin kubernetes.Interface, pg *schedulingv1beta1.PodGroup, n int) map[string]string {
	t.Helper()
	ctx, ns, group := t.Context(), pg.Namespace, pg.Name
	_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	for i := range n {
		p := itest.TemplatePod(ns, fmt.Sprintf("%s-%d", group, i), group)
		p.Spec.ResourceClaims = p.Spec.ResourceClaims[1:] // the GPU claim only
		p.Spec.Containers[0].Resources.Claims = p.Spec.Containers[0].Resources.Claims[1:]
		_, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}
	var st *itest.GangState
	itest.Poll(t, fmt.Sprintf("all %d pods bound", n), 90*time.Second, func(ctx context.Context) error {
		var err error
		if st, err = itest.ReadGang(ctx, admin, ns); err != nil {
			return err
		}
		if b := st.Bound(); b != n {
			return fmt.Errorf("%d of %d bound", b, n)
		}
		return nil
	})
	domains := map[string]string{}
	for _, p := range st.Pods {
		domains[p.Name] = itest.DomainOf(p.Spec.NodeName)
	}
	return domains
}
