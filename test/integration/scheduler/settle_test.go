package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSchedulerBurstWritesNoWaitingStatus: a gang whose members are
// created in a burst (as a Job or JobSet creates them) gets no waiting
// status while they arrive: no member is written "waiting for the gang",
// no WaitingForMembers condition, and it is bound once the last exists
// (before the rule: a round of writes per second of the burst). A gang
// whose members stop arriving short of its minCount is told so, each
// waiting member once its count held still for a second.
func TestSchedulerBurstWritesNoWaitingStatus(t *testing.T) {
	cp := framework.StartT(t, framework.Options{})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 2, 8)
	const burst, stalled = "burst", "stalled"
	const group, burstMembers, stalledMembers = "g", 12, 4
	for ns, n := range map[string]int{burst: burstMembers, stalled: stalledMembers} {
		waitingGang(t, admin, ns, group, n)
	}
	release := make(chan struct{})
	close(release)
	hold := &waitingHold{release: release, held: make(chan struct{})}
	startScheduler(t, heldSchedulerClient(t, cp, hold), scheduler.Config{})

	start := time.Now()
	for i := range burstMembers - 1 {
		createWaitingMember(t, admin, burst, group, i)
	}
	time.Sleep(300 * time.Millisecond) // the scheduler sees 11 of 12 for a moment
	createWaitingMember(t, admin, burst, group, burstMembers-1)
	t.Logf("burst of %d members created in %v", burstMembers, time.Since(start))
	waitBound(t, admin, burst, group, burstMembers)
	if pods, conditions := hold.counts(); pods != 0 || conditions != 0 {
		t.Errorf("a gang created in a burst: %d members written as waiting, %d WaitingForMembers conditions; want none", pods, conditions)
	}

	for i := range stalledMembers - 1 {
		createWaitingMember(t, admin, stalled, group, i)
	}
	itest.Poll(t, "the stalled gang's members told they wait", 30*time.Second, func(ctx context.Context) error {
		if pods, conditions := hold.counts(); pods != stalledMembers-1 || conditions == 0 {
			return fmt.Errorf("%d members written as waiting (want %d), %d WaitingForMembers conditions", pods, stalledMembers-1, conditions)
		}
		return nil
	})
	createWaitingMember(t, admin, stalled, group, stalledMembers-1)
	waitBound(t, admin, stalled, group, stalledMembers)
}

// waitingGang creates a namespace with a PodGroup of minCount members and
// one single-GPU claim per member.
func waitingGang(t *testing.T, c kubernetes.Interface, ns, group string, members int) {
	t.Helper()
	ctx := t.Context()
	itest.Must(t, "create namespace", framework.EnsureNamespace(ctx, c, ns))
	itest.Must(t, "create service account", framework.EnsureServiceAccount(ctx, c, ns))
	for i := range members {
		_, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, itest.GPUClaim(ns, fmt.Sprintf("%s-%d-gpu", group, i), 1), metav1.CreateOptions{})
		itest.Must(t, "create claim", err)
	}
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: group},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(members)}}}}
	_, err := c.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
}
