package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSchedulerPriorityOrder: gangs created while no scheduler runs, with
// room for two of them (two NVLink domains): the production gang created
// last goes first, then the older of the two batch gangs; the newer batch
// gang waits. Preemption is off, so the order alone decides.
func TestSchedulerPriorityOrder(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a", "b"}, 2, 4)
	for name, value := range testPriorities {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := admin.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create priority class: %v", err)
		}
	}
	const ns = "order"
	itest.GangNamespace(t, admin, ns, 4)
	createPriorityGang(t, admin, ns, "old-batch", "batch", false, 2)
	time.Sleep(1100 * time.Millisecond) // creation timestamps have second resolution
	createPriorityGang(t, admin, ns, "new-batch", "batch", false, 2)
	time.Sleep(1100 * time.Millisecond)
	createPriorityGang(t, admin, ns, "prod", "production", false, 2)
	itest.Poll(t, "claims from templates", 30*time.Second, func(ctx context.Context) error {
		cl, err := admin.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(cl.Items) < 9 {
			return fmt.Errorf("%d claims: %v", len(cl.Items), err)
		}
		return nil
	})

	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4, DisablePreemption: true})
	waitBound(t, admin, ns, "prod", 2)
	waitBound(t, admin, ns, "old-batch", 2)
	time.Sleep(2 * time.Second) // several attempts
	st, err := itest.ReadGang(ctx, admin, ns)
	itest.Must(t, "read", err)
	for _, p := range st.Pods {
		if p.Spec.NodeName != "" && (p.Name == "new-batch-0" || p.Name == "new-batch-1") {
			t.Fatalf("%s bound before the older gang of its priority and the production gang", p.Name)
		}
	}
}
