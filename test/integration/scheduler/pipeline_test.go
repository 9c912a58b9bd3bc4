package scheduler

import (
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/test/integration/itest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// TestSchedulerPipelinedCommit: the commit of one gang does not hold up the
// placement and commit of the next, and the next never takes the devices
// of a commit still in flight. The first gang's commit is held back (the
// commit hook waits) before its first claim write, so no informer shows its
// devices taken; meanwhile a second gang
// that fits only on the other node of the domain is placed, committed and
// bound. Then the first gang's commit finishes: both bound, on different
// nodes, no device allocated twice. With commits made serial the second
// gang is not bound while the first's commit waits; without the in-flight
// assumption it is given the first gang's devices.
func TestSchedulerPipelinedCommit(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 2, 4)
	for _, ns := range []string{"first", "second"} {
		itest.GangNamespace(t, admin, ns, 4)
	}
	atClaims, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(step gate.Step, object string) error {
		if (step == gate.StepClaimFinalizer || step == gate.StepClaimStatus) && strings.HasPrefix(object, "first/") {
			once.Do(func() { close(atClaims) })
			select {
			case <-release:
			case <-time.After(90 * time.Second):
			}
		}
		return nil
	}
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 4, CommitHook: hook})

	itest.CreateGang(t, admin, "first", "g", 1, 1)
	select {
	case <-atClaims:
	case <-time.After(60 * time.Second):
		t.Fatal("the first gang's commit never reached its claim writes")
	}
	itest.CreateGang(t, admin, "second", "g", 1, 1)
	itest.Poll(t, "second gang bound while the first's commit waits", 30*time.Second, gangIn(admin, "second", 1, "dom-a"))
	st, err := itest.ReadGang(ctx, admin, "first")
	itest.Must(t, "read first gang", err)
	if st.Bound() != 0 || st.Allocated() != 0 || len(st.Records) != 1 {
		t.Fatalf("first gang: %d bound, %d claims allocated, records %v; want its commit in flight before its first claim write", st.Bound(), st.Allocated(), st.Records)
	}
	close(release)
	itest.Poll(t, "first gang bound", 30*time.Second, gangIn(admin, "first", 1, "dom-a"))
	nodes := map[string]string{}
	for _, ns := range []string{"first", "second"} {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "g-0", metav1.GetOptions{})
		itest.Must(t, "get pod", err)
		if other, ok := nodes[p.Spec.NodeName]; ok {
			t.Errorf("gangs %s and %s both on node %s (4 GPUs, 4 each)", other, ns, p.Spec.NodeName)
		}
		nodes[p.Spec.NodeName] = ns
	}
	dup, err := itest.DevicesAllocatedTwice(ctx, admin)
	itest.Must(t, "list claims", err)
	if len(dup) > 0 {
		t.Errorf("allocated twice: %v", dup)
	}
}
