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

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSchedulerSegments: an 8-pod gang of 4 GPUs per pod with
// gpufabric.dev/segment-size 4 in gpufabric.dev/nvlinkDomain, on NVLink
// domains of 5, 3, 4 and 3 one-pod nodes. Without segments the fewest
// domains that hold it are dom-b (3) and dom-a (5), which would split
// ranks 0-3 over two domains; with segments each 4 consecutive ranks land
// in one domain: ranks 0-3 in dom-a, 4-7 in dom-c. The PodGroup's
// condition and the Scheduled event say where the segments went.
func TestSchedulerSegments(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, nil, 0, 4) // the device classes
	itest.UnevenDomains(t, admin, map[string]int{"a": 5, "b": 3, "c": 4, "d": 3}, 4)
	const ns, group = "segments", "train"
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{DomainChannels: 0})

	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: group, Annotations: map[string]string{
			topology.AnnotationSegmentSize: "4", topology.AnnotationSegmentTopologyKey: topology.TopologyKeyNVLinkDomain,
		}},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 8}}},
	}
	byRank := placeGPUOnlyGang(t, admin, pg, 8)
	want := map[string]string{}
	for i := range 8 {
		want[fmt.Sprintf("%s-%d", group, i)] = map[bool]string{true: "dom-a", false: "dom-c"}[i < 4]
	}
	if fmt.Sprint(byRank) != fmt.Sprint(want) {
		t.Errorf("members by rank in domains %v, want %v", byRank, want)
	}
	note := "segments in gpufabric.dev/nvlinkDomain: 0 in dom-a, 1 in dom-c"
	itest.Poll(t, "condition and event naming the segments", 20*time.Second, func(ctx context.Context) error {
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
