package scheduler

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/spares"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSchedulerSpares: with 2 spare nodes per NVLink domain, a 3-pod gang
// (minCount 2) on a 4-node domain is placed 2 pods on the nodes that are no
// spares; its third member, a late member, is a replacement and takes a
// spare; a new 1-pod gang is then refused the last free node, which is a
// spare, and says so.
func TestSchedulerSpares(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 4, 4)
	const ns = "spares"
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"),
		scheduler.Config{DomainChannels: 4, Placement: placement.Config{Spares: spares.Policy{PerDomain: 2}}})

	itest.CreateGang(t, admin, ns, "job", 2, 3)
	waitBound(t, admin, ns, "job", 3)
	pods, err := admin.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	itest.Must(t, "list pods", err)
	var nodes []string
	for _, p := range pods.Items {
		nodes = append(nodes, p.Spec.NodeName)
	}
	slices.Sort(nodes)
	// The kept spares are the domain's last two free nodes by name: the
	// first two members got the first two nodes, the late member a spare.
	if len(nodes) != 3 || nodes[0] != "a-0" || nodes[1] != "a-1" {
		t.Fatalf("job's nodes %v: want the two nodes that are no spares, and one spare", nodes)
	}

	itest.CreateGang(t, admin, ns, "new", 1, 1)
	itest.Poll(t, "the new gang is refused the spare, saying so", 30*time.Second, func(ctx context.Context) error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "new-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			return fmt.Errorf("bound to %s", p.Spec.NodeName)
		}
		return podScheduledSays(p, "its 1 free node is a spare kept for replacements (--spare-nodes-per-domain=2)")
	})
}
