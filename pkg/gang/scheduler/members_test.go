package scheduler

import (
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/internal/objtest"
	"github.com/gpufabric/gpufabric/pkg/gang/replace"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestMembersLostToTriggers: a member on a node NotReady past the grace is
// lost (not running, its loss noted), one within the grace runs and asks
// to be looked at again when the grace ends, and one terminating on a lost
// node counts as gone (neither running nor lost: its kubelet never
// confirms it); the evict room's NodeLost says the same.
func TestMembersLostToTriggers(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for name, since := range map[string]time.Duration{"down": -time.Minute, "flaky": -10 * time.Second} {
		_ = nodes.Add(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
			{Type: v1.NodeReady, Status: v1.ConditionUnknown, LastTransitionTime: metav1.NewTime(now.Add(since))}}}})
	}
	_ = nodes.Add(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "up"}})
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{podGroupIndex: indexByPodGroup})
	member := func(name, node string, terminating bool) *v1.Pod {
		p := objtest.Pod(name)
		p.Spec = v1.PodSpec{SchedulerName: topology.SchedulerName, NodeName: node, SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To("g")}}
		p.Status.Phase = v1.PodRunning
		if terminating {
			p.DeletionTimestamp = ptr.To(metav1.NewTime(now))
		}
		_ = pods.Add(p)
		return p
	}
	member("a", "up", false)
	lost := member("b", "down", false)
	member("c", "flaky", false)
	going := member("d", "down", true)
	r := replace.New(replace.Deps{Config: replace.Config{NodeFailureGrace: 30 * time.Second}, Clock: clocktesting.NewFakeClock(now)})
	g := &gangPods{pods: pods, nodes: corelisters.NewNodeLister(nodes), classify: r.Classify}
	ms, err := g.members(&schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}})
	if err != nil {
		t.Fatal(err)
	}
	var running []string
	for _, p := range ms.running {
		running = append(running, p.Name)
	}
	if !slices.Equal(running, []string{"a", "c"}) && !slices.Equal(running, []string{"c", "a"}) {
		t.Errorf("running %v, want a and c", running)
	}
	if len(ms.lost) != 1 || !strings.HasPrefix(ms.lost[0], "b on node down") {
		t.Errorf("lost %q, want b's loss only", ms.lost)
	}
	if len(ms.losses) != 2 || ms.recheck != 20*time.Second {
		t.Errorf("%d losses (want b's and d's), recheck %s (want flaky's 20s)", len(ms.losses), ms.recheck)
	}
	if !g.nodeLost(lost) || !g.nodeLost(going) || g.nodeLost(ms.running[0]) {
		t.Error("nodeLost")
	}
}
