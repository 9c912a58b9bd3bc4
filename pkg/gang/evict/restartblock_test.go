package evict

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// fakeGangs serves one PodGroup's members.
type fakeGangs struct{ pods []*v1.Pod }

func (g *fakeGangs) GroupPods(string, string) ([]*v1.Pod, error)            { return g.pods, nil }
func (g *fakeGangs) NodePods(string) ([]*v1.Pod, error)                     { return nil, nil }
func (g *fakeGangs) Waiting(*schedulingv1beta1.PodGroup) ([]*v1.Pod, error) { return nil, nil }
func (c *fakeConditions) SetCondition(_ context.Context, pg *schedulingv1beta1.PodGroup, cond metav1.Condition) error {
	old := meta.FindStatusCondition(pg.Status.Conditions, cond.Type)
	if old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message {
		return nil
	}
	c.writes = append(c.writes, cond)
	meta.SetStatusCondition(&pg.Status.Conditions, cond)
	return nil
}

// fakeConditions applies and records condition writes.
type fakeConditions struct{ writes []metav1.Condition }

// restartFixture is a PodGroup (disruptionMode All) in a whole-gang
// restart whose three old members a PodDisruptionBudget keeps (every
// eviction answers 429 while refuse is set).
type restartFixture struct {
	r         *Restarter
	pg        *schedulingv1beta1.PodGroup
	clk       *testingclock.FakeClock
	conds     *fakeConditions
	recorder  *events.FakeRecorder
	evictions int
	refuse    bool
}

func newRestartFixture(t *testing.T) *restartFixture {
	f := &restartFixture{clk: testingclock.NewFakeClock(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)), conds: &fakeConditions{},
		recorder: events.NewFakeRecorder(100), refuse: true}
	boundary := f.clk.Now().Add(-time.Minute)
	f.pg = &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train", UID: "uid-train"},
		Spec: schedulingv1beta1.PodGroupSpec{DisruptionMode: &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}}}
	meta.SetStatusCondition(&f.pg.Status.Conditions, metav1.Condition{Type: schedulingv1beta1.DisruptionTarget, Status: metav1.ConditionTrue,
		Reason: vocab.ReasonMemberDisrupted, Message: "member train-3 was deleted", LastTransitionTime: metav1.NewTime(boundary)})
	gangs := &fakeGangs{}
	for i := range 3 {
		gangs.pods = append(gangs.pods, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("train-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i)),
				CreationTimestamp: metav1.NewTime(boundary.Add(-time.Hour))},
			Spec:   v1.PodSpec{SchedulerName: topology.SchedulerName, NodeName: "n1", SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To("train")}},
			Status: v1.PodStatus{Phase: v1.PodRunning},
		})
	}
	client := fake.NewClientset()
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		f.evictions++
		if f.refuse {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
		}
		return true, nil, nil
	})
	f.r = NewRestarter(Config{Client: client, Gate: &gate.Gate{}, Report: report.New(f.recorder), Conditions: f.conds,
		Gangs: gangs, Disruptions: &Disruptions{}, Clock: f.clk})
	return f
}

func (f *restartFixture) turn(t *testing.T) {
	t.Helper()
	going, _, err := f.r.RestartGang(t.Context(), f.pg, 0, 3)
	if err != nil || !going {
		t.Fatalf("RestartGang: going %v, err %v; want the old members going", going, err)
	}
}

// TestRestartBlockedByBudgetBacksOff: a whole-gang restart whose evictions
// a PodDisruptionBudget refuses evicts again only after a backoff that
// doubles per refused round up to RestartBackoffCap, however often the
// gang is looked at (here every second for ten minutes, as the loop did),
// says so once (one RestartBlocked event, one condition write that keeps
// the restart's boundary), and evicts at once when its backoff ends and the
// budget allows. Before, every member was evicted again every second, for
// ever (1,800 evictions in these ten minutes).
func TestRestartBlockedByBudgetBacksOff(t *testing.T) {
	f := newRestartFixture(t)
	key := vocab.PodGroupKey("ns", "train")
	boundary := meta.FindStatusCondition(f.pg.Status.Conditions, schedulingv1beta1.DisruptionTarget).LastTransitionTime
	var rounds []time.Duration // when each eviction round ran
	start := f.clk.Now()
	for range 600 {
		before := f.evictions
		f.turn(t)
		if f.evictions > before {
			rounds = append(rounds, f.clk.Since(start))
		}
		f.clk.Step(time.Second)
	}
	// Rounds at 0, 2, 6, 14, 30, 62, 126, 254 and 510 s: backoff 2 s ×2 per
	// round, capped at 5 min.
	if len(rounds) != 9 || f.evictions != 27 {
		t.Errorf("%d eviction rounds (%d evictions) in 10 minutes, the first at %v; want 9 rounds of 3", len(rounds), f.evictions, rounds[:min(len(rounds), 10)])
	}
	if got := f.r.RetryIn(key); got <= RestartRetry || got > RestartBackoffCap {
		t.Errorf("RetryIn while blocked = %v, want the rest of the backoff (at most %v)", got, RestartBackoffCap)
	}
	if n := len(f.recorder.Events); n != 1 {
		t.Errorf("%d events, want one RestartBlocked", n)
	} else if e := <-f.recorder.Events; !strings.Contains(e, vocab.EventRestartBlocked) || !strings.Contains(e, "PodDisruptionBudget") {
		t.Errorf("event %q", e)
	}
	if len(f.conds.writes) != 1 {
		t.Fatalf("%d condition writes, want 1: %+v", len(f.conds.writes), f.conds.writes)
	}
	cond := meta.FindStatusCondition(f.pg.Status.Conditions, schedulingv1beta1.DisruptionTarget)
	if cond.Status != metav1.ConditionTrue || cond.Reason != vocab.ReasonMemberDisrupted || !cond.LastTransitionTime.Equal(&boundary) ||
		!strings.Contains(cond.Message, "blocked: a PodDisruptionBudget refused the eviction of 3 old members") {
		t.Errorf("condition %+v", cond)
	}

	// The budget allows the evictions now: the next round, once the
	// backoff ends, evicts them and ends the backoff.
	f.refuse = false
	f.clk.Step(f.r.RetryIn(key))
	before := f.evictions
	f.turn(t)
	if f.evictions != before+3 {
		t.Errorf("after the backoff: %d evictions, want 3", f.evictions-before)
	}
	if got := f.r.RetryIn(key); got != RestartRetry {
		t.Errorf("RetryIn once evictions go through = %v, want %v", got, RestartRetry)
	}
}

// TestRestartAnyModeAndLostNodes: a taint manager's deletion does not
// restart a Pod-mode gang, a restart the replace room asks for does
// (whatever the mode: policy Restart), naming what was lost; an old member
// terminating on a lost node counts as gone, so the restart goes on
// instead of waiting for a kubelet that never confirms it (before, it
// waited for ever).
func TestRestartAnyModeAndLostNodes(t *testing.T) {
	for _, lostNode := range []bool{false, true} {
		f := newRestartFixture(t)
		f.refuse = false
		f.pg.Spec.DisruptionMode, f.pg.Status.Conditions = nil, nil
		gangs := f.r.cfg.Gangs.(*fakeGangs)
		f.r.cfg.NodeLost = func(p *v1.Pod) bool { return lostNode && p.Spec.NodeName == "n1" }
		key := vocab.PodGroupKey("ns", "train")
		tainted := gangs.pods[0].DeepCopy()
		tainted.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: reasonNodeTaintManager}}
		f.r.cfg.Disruptions.Note(tainted)
		if going, replaced, err := f.r.RestartGang(t.Context(), f.pg, 0, 3); going || replaced || err != nil || f.evictions != 0 {
			t.Fatalf("a Pod-mode gang restarted on a taint manager's deletion: going %v, replaced %v, err %v, %d evictions", going, replaced, err, f.evictions)
		}
		f.r.cfg.Disruptions.Restart(key, "member train-2 was lost (node_not_ready); policy Restart")
		f.clk.Step(time.Second) // the restart's boundary is after the members' creation
		going, _, err := f.r.RestartGang(t.Context(), f.pg, 0, 3)
		if err != nil || !going || f.evictions != 3 {
			t.Fatalf("restart asked: going %v, err %v, %d evictions; want the 3 old members evicted", going, err, f.evictions)
		}
		cond := meta.FindStatusCondition(f.pg.Status.Conditions, schedulingv1beta1.DisruptionTarget)
		if cond == nil || cond.Reason != vocab.ReasonMemberDisrupted || !strings.Contains(cond.Message, "(node_not_ready); policy Restart") {
			t.Fatalf("condition %+v", cond)
		}
		for _, p := range gangs.pods { // evicted: terminating, their kubelet gone
			p.DeletionTimestamp = ptr.To(metav1.NewTime(f.clk.Now()))
		}
		going, _, err = f.r.RestartGang(t.Context(), f.pg, 0, 0)
		if err != nil || going == lostNode {
			t.Errorf("lost node %v: going %v (err %v); want the restart to go on only when their node is lost", lostNode, going, err)
		}
	}
}
