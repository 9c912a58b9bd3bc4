package replace

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

type fakeConditions struct{ set []metav1.Condition }

func (f *fakeConditions) SetCondition(_ context.Context, _ *schedulingv1beta1.PodGroup, c metav1.Condition) error {
	f.set = append(f.set, c)
	return nil
}

type fakeRestarts map[string]string

func (f fakeRestarts) Restart(key, why string) { f[key] = why }

// rig is a Replacer on fakes.
type rig struct {
	r        *Replacer
	client   *fake.Clientset
	conds    *fakeConditions
	restarts fakeRestarts
	metrics  *Metrics
	events   *events.FakeRecorder
	clock    *clocktesting.FakeClock
}

func newRig(t *testing.T, objs ...runtime.Object) *rig {
	t.Helper()
	cfg, err := Config{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	g := &rig{client: fake.NewClientset(objs...), conds: &fakeConditions{}, restarts: fakeRestarts{}, metrics: NewMetrics(),
		events: events.NewFakeRecorder(100), clock: clocktesting.NewFakeClock(t0)}
	g.r = New(Deps{Config: cfg, Client: g.client, Gate: &gate.Gate{}, Report: report.New(g.events), Metrics: g.metrics,
		Conditions: g.conds, Restarts: g.restarts, Clock: g.clock})
	return g
}

// reasons drains the recorded events' reasons.
func (g *rig) reasons() string {
	var out []string
	for {
		select {
		case e := <-g.events.Events:
			out = append(out, strings.Fields(e)[1])
		default:
			return strings.Join(out, ",")
		}
	}
}

// observed returns the count and sum of the metric's series.
func (g *rig) observed(t *testing.T, tr Trigger, outcome string) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := g.metrics.seconds.WithLabelValues(string(tr), outcome).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// deleted lists the pods the client deleted or evicted.
func (g *rig) writes() string {
	var out []string
	for _, a := range g.client.Actions() {
		switch {
		case a.GetVerb() == "create" && a.GetSubresource() == "eviction":
			out = append(out, "evict "+a.(interface{ GetObject() runtime.Object }).GetObject().(*policyv1.Eviction).Name)
		}
	}
	return strings.Join(out, ",")
}

func podGroup(whole bool, annotations map[string]string, conds ...metav1.Condition) *schedulingv1beta1.PodGroup {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train", Annotations: annotations},
		Status: schedulingv1beta1.PodGroupStatus{Conditions: conds}}
	if whole {
		pg.Spec.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
	}
	return pg
}

func baseCond(status metav1.ConditionStatus) metav1.Condition {
	return metav1.Condition{Type: vocab.ConditionMembersLost, Status: status, Reason: vocab.ReasonMembersLost, Message: "1 of 2 members remain running (minCount 2)"}
}

const key = "pg:ns/train"

// TestTurnInPlace: a Pod-mode gang's member lost to its node's NotReady
// is deleted, the condition says ReplacingInPlace since the loss (with
// the bound), and once the replacement runs ReplacedInPlace, an event,
// and the metric observe the time from the loss.
func TestTurnInPlace(t *testing.T) {
	lost, ok := member("train-1", "n2"), member("train-0", "n1")
	g := newRig(t, lost, ok)
	pg := podGroup(false, nil)
	g.clock.SetTime(t0.Add(45 * time.Second))
	loss := Loss{Pod: lost, Trigger: NodeNotReady, Since: t0.Add(30 * time.Second), Why: "train-1 on node n2, Ready=False"}
	out, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Losses: []Loss{loss}, Running: []*v1.Pod{ok}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)})
	if err != nil {
		t.Fatal(err)
	}
	if out.Stop || out.Cond.Reason != vocab.ReasonReplacingInPlace || !out.Cond.LastTransitionTime.Time.Equal(loss.Since) || out.RetryIn != 45*time.Second {
		t.Errorf("outcome %+v", out)
	}
	for _, w := range []string{"(node_not_ready)", "train-1 on node n2", "within 1m0s, then policy Restart"} {
		if !strings.Contains(out.Cond.Message, w) {
			t.Errorf("message %q: want %q", out.Cond.Message, w)
		}
	}
	if w := g.writes(); w != "evict train-1" {
		t.Errorf("writes %q, want the lost pod deleted", w)
	}
	if r := g.reasons(); r != vocab.EventReplacingInPlace {
		t.Errorf("events %q", r)
	}
	// The replacement runs 20 s later.
	g.clock.SetTime(t0.Add(50 * time.Second))
	repl := member("train-1b", "n3")
	out, _ = g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Running: []*v1.Pod{ok, repl}, Expected: 2, Cond: baseCond(metav1.ConditionFalse)})
	if out.Cond.Status != metav1.ConditionFalse || out.Cond.Reason != vocab.ReasonReplacedInPlace {
		t.Errorf("after the replacement: %+v", out.Cond)
	}
	if n, sum := g.observed(t, NodeNotReady, OutcomeInPlace); n != 1 || sum != 20 {
		t.Errorf("in_place observed %d times, sum %v; want once, 20 s", n, sum)
	}
	if r := g.reasons(); r != vocab.EventReplacedInPlace {
		t.Errorf("events %q", r)
	}
	if g.r.gangs[key] != nil {
		t.Error("the gang's state outlived its replacement")
	}
}

// TestTurnPolicies: once the bound passes with no replacement placed, the
// policy decides: Wait keeps waiting and says why, Restart asks for the
// whole-gang restart naming the trigger, Fail fails the PodGroup and
// evicts the members; a failed pod is never deleted (its controller
// replaces it).
func TestTurnPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy, timeout string
		wantReason      string
		wantWrites      string
		wantEvents      string
		stop            bool
	}{
		{policy: "Wait", wantReason: vocab.ReasonNoReplacement, wantEvents: vocab.EventNoReplacement},
		{policy: "Restart", wantReason: vocab.ReasonReplacingInPlace},
		{policy: "Fail", wantWrites: "evict train-0", wantEvents: vocab.EventGangFailed, stop: true},
		{policy: "Fail", timeout: "10m", wantReason: vocab.ReasonReplacingInPlace},
		{policy: "bogus", wantReason: vocab.ReasonReplacingInPlace, wantEvents: vocab.EventInvalidAnnotation},
	} {
		t.Run(tc.policy+tc.timeout, func(t *testing.T) {
			failed, ok := member("train-1", "n2"), member("train-0", "n1")
			failed.Status.Phase = v1.PodFailed
			waiting := member("train-1b", "")
			waiting.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Message: "no room in domain nvl-a"}}
			g := newRig(t, failed, ok)
			ann := map[string]string{vocab.AnnotationOnMemberLoss: tc.policy}
			if tc.timeout != "" {
				ann[vocab.AnnotationReplacementTimeout] = tc.timeout
			}
			pg := podGroup(false, ann)
			g.clock.SetTime(t0.Add(2 * time.Minute))
			turn := Turn{Key: key, PodGroup: pg, Losses: []Loss{{Pod: failed, Trigger: PodFailed, Since: t0, Why: "train-1 failed"}},
				Running: []*v1.Pod{ok}, Pending: []*v1.Pod{waiting}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)}
			out, err := g.r.Turn(t.Context(), turn)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantReason != "" && out.Cond.Reason != tc.wantReason {
				t.Errorf("reason %s (%s), want %s", out.Cond.Reason, out.Cond.Message, tc.wantReason)
			}
			if out.Stop != tc.stop {
				t.Errorf("stop %v", out.Stop)
			}
			if w := g.writes(); w != tc.wantWrites {
				t.Errorf("writes %q, want %q", w, tc.wantWrites)
			}
			if r := g.reasons(); r != tc.wantEvents {
				t.Errorf("events %q, want %q", r, tc.wantEvents)
			}
			switch tc.policy + tc.timeout {
			case "Wait":
				if !strings.Contains(out.Cond.Message, "keeps waiting") || !strings.Contains(out.Cond.Message, "no room in domain nvl-a") {
					t.Errorf("message %q", out.Cond.Message)
				}
				g.r.Turn(t.Context(), turn)
				if r := g.reasons(); r != "" {
					t.Errorf("a second turn recorded %q again", r)
				}
			case "Restart":
				if why := g.restarts[key]; !strings.Contains(why, "(pod_failed") || !strings.Contains(why, "policy Restart") {
					t.Errorf("restart asked with %q", why)
				}
				if g.r.Prefer(key) != nil {
					t.Error("policy Restart prefers the old domain, which had no room")
				}
			case "Fail":
				if len(g.conds.set) != 1 || g.conds.set[0].Type != vocab.ConditionFailed || g.conds.set[0].Reason != vocab.ReasonNoReplacement ||
					!strings.Contains(g.conds.set[0].Message, "until it is recreated") {
					t.Errorf("conditions %+v", g.conds.set)
				}
				if n, _ := g.observed(t, PodFailed, OutcomeFailed); n != 1 {
					t.Errorf("failed observed %d times", n)
				}
			case "Fail10m":
				if out.RetryIn != 8*time.Minute {
					t.Errorf("retry in %s, want the bound's 8m", out.RetryIn)
				}
			}
			if tc.policy != "Restart" && tc.policy != "bogus" && len(g.restarts) > 0 {
				t.Errorf("restart asked: %v", g.restarts)
			}
		})
	}
}

// TestTurnWhole: a gang disrupted only whole is restarted at once on any
// trigger (never left partly running), preferring the domain of its
// running members; nothing is deleted; once it runs again the metric
// observes a restart.
func TestTurnWhole(t *testing.T) {
	lost, ok := member("train-1", "n2"), member("train-0", "n1")
	g := newRig(t, lost, ok)
	pg := podGroup(true, nil)
	g.clock.SetTime(t0.Add(time.Minute))
	out, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Losses: []Loss{{Pod: lost, Trigger: NodeTainted, Since: t0, Why: "train-1 on node n2, tainted x:NoExecute"}},
		Running: []*v1.Pod{ok}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)})
	if err != nil {
		t.Fatal(err)
	}
	if why := g.restarts[key]; !strings.Contains(why, "(node_tainted)") || !strings.Contains(why, "disrupted only whole") {
		t.Errorf("restart asked with %q", why)
	}
	if p := g.r.Prefer(key); len(p) != 1 || p[0] != "n1" {
		t.Errorf("prefer %v, want the running member's node n1", p)
	}
	if w := g.writes(); w != "" || out.Stop {
		t.Errorf("writes %q, stop %v", w, out.Stop)
	}
	// The restarted gang runs.
	g.clock.SetTime(t0.Add(90 * time.Second))
	base := baseCond(metav1.ConditionFalse)
	out, _ = g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Running: []*v1.Pod{member("a", "n1"), member("b", "n3")}, Expected: 2, Cond: base})
	if out.Cond != base {
		t.Errorf("after the restart: %+v", out.Cond)
	}
	if n, sum := g.observed(t, NodeTainted, OutcomeRestarted); n != 1 || sum != 90 {
		t.Errorf("restarted observed %d, sum %v", n, sum)
	}
}

// TestTurnRecovers: a new term (nothing in memory) reads the loss's time
// and trigger back from the MembersLost condition, so the bound is not
// restarted by a scheduler restart; a gang never lost to a trigger is
// left as the loop says.
func TestTurnRecovers(t *testing.T) {
	g := newRig(t)
	cond := metav1.Condition{Type: vocab.ConditionMembersLost, Status: metav1.ConditionTrue, Reason: vocab.ReasonReplacingInPlace,
		LastTransitionTime: metav1.NewTime(t0), Message: "1 of 2 members remain running; lost to a trigger (node_deleted) at ...; replacing in place"}
	pg := podGroup(false, map[string]string{vocab.AnnotationOnMemberLoss: "Wait"}, cond)
	g.clock.SetTime(t0.Add(61 * time.Second))
	out, _ := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Running: []*v1.Pod{member("a", "n1")}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)})
	if out.Cond.Reason != vocab.ReasonNoReplacement || !strings.Contains(out.Cond.Message, "(node_deleted") || !out.Cond.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("recovered %+v", out.Cond)
	}
	plain := podGroup(false, nil)
	base := baseCond(metav1.ConditionTrue)
	out, _ = g.r.Turn(t.Context(), Turn{Key: "pg:ns/other", PodGroup: plain, Running: []*v1.Pod{member("a", "n1")}, Expected: 2, Cond: base})
	if out.Cond != base || out.Stop || out.RetryIn != 0 {
		t.Errorf("a gang without a trigger: %+v", out)
	}
	if !Failed(podGroup(false, nil, metav1.Condition{Type: vocab.ConditionFailed, Status: metav1.ConditionTrue})) || Failed(plain) {
		t.Error("Failed")
	}
}

// TestTurnDisrupted: a member a device taint manager deleted starts a
// device_taint loss: a Pod-mode gang replaces it in place within the
// bound; a whole gang is left to the evict room's restart and measured as
// restarted.
func TestTurnDisrupted(t *testing.T) {
	gone := member("train-1", "n2")
	gone.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "DeletionByDeviceTaintManager"}}
	ok := member("train-0", "n1")
	for _, whole := range []bool{false, true} {
		g := newRig(t)
		g.r.Disrupted(key, gone)
		g.clock.SetTime(t0.Add(10 * time.Second))
		out, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: podGroup(whole, nil), Running: []*v1.Pod{ok}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)})
		if err != nil {
			t.Fatal(err)
		}
		if out.Cond.Reason != vocab.ReasonReplacingInPlace || !strings.Contains(out.Cond.Message, "(device_taint)") || !strings.Contains(out.Cond.Message, "train-1 on node n2") {
			t.Errorf("whole %v: %+v", whole, out.Cond)
		}
		if !whole && out.RetryIn != 50*time.Second {
			t.Errorf("retry in %s, want the bound's 50s", out.RetryIn)
		}
		g.clock.SetTime(t0.Add(2 * time.Minute)) // past the bound: a whole gang waits for its restart, policy or not
		g.r.Turn(t.Context(), Turn{Key: key, PodGroup: podGroup(whole, nil), Running: []*v1.Pod{ok}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)})
		if _, asked := g.restarts[key]; asked == whole {
			t.Errorf("whole %v: the replace room asked for a restart: %v", whole, asked)
		}
		g.r.Turn(t.Context(), Turn{Key: key, PodGroup: podGroup(whole, nil), Running: []*v1.Pod{ok, member("b", "n3")}, Expected: 2, Cond: baseCond(metav1.ConditionFalse)})
		outcome := OutcomeRestarted // the policy Restart, or the whole gang's own
		if n, _ := g.observed(t, DeviceTaint, outcome); n != 1 {
			t.Errorf("whole %v: %s observed %d times", whole, outcome, n)
		}
	}
}

// TestTurnFailedPodKept: a failed member its controller keeps (a Job keeps
// failed pods) does not keep the gang short once its replacement runs: the
// replacement ends the loss, and the failed pod is Handled from then on
// (it failed before MembersLost went False), so it starts no loss again.
func TestTurnFailedPodKept(t *testing.T) {
	failed, ok, repl := member("train-1", "n2"), member("train-0", "n1"), member("train-2", "n3")
	failed.Status.Phase = v1.PodFailed
	g := newRig(t)
	pg := podGroup(false, nil)
	loss := Loss{Pod: failed, Trigger: PodFailed, Since: t0, Why: "train-1 failed"}
	g.clock.SetTime(t0.Add(5 * time.Second))
	if Handled(pg, &loss) {
		t.Fatal("a failure with no replacement yet is handled")
	}
	g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Losses: []Loss{loss}, Running: []*v1.Pod{ok}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)})
	g.clock.SetTime(t0.Add(8 * time.Second))
	out, _ := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Losses: []Loss{loss}, Running: []*v1.Pod{ok, repl}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)})
	if out.Cond.Reason != vocab.ReasonReplacedInPlace {
		t.Fatalf("the replacement runs beside the kept failed pod: %+v", out.Cond)
	}
	if w := g.writes(); w != "" {
		t.Errorf("writes %q: a failed pod is its controller's", w)
	}
	out.Cond.LastTransitionTime = metav1.NewTime(g.clock.Now())
	pg.Status.Conditions = []metav1.Condition{out.Cond}
	if !Handled(pg, &loss) {
		t.Error("the replaced failure still counts")
	}
	if later := (Loss{Pod: failed, Trigger: PodFailed, Since: t0.Add(time.Minute)}); Handled(pg, &later) {
		t.Error("a later failure is handled")
	}
	if n, _ := g.observed(t, PodFailed, OutcomeInPlace); n != 1 {
		t.Errorf("in_place observed %d times", n)
	}
}

// TestTurnEndedOnce: a turn on the stale condition of an episode that
// ended (the informers have not seen its end written yet: MembersLost
// still True with the loss's time) starts no new episode and observes
// nothing again; a new loss afterwards is a new episode. Before, a whole
// restart was observed once per turn until the write arrived (count 2 for
// a 2-pod gang on the real control plane).
func TestTurnEndedOnce(t *testing.T) {
	lost, ok := member("train-1", "n2"), member("train-0", "n1")
	g := newRig(t, lost, ok)
	pg := podGroup(true, nil)
	g.clock.SetTime(t0.Add(time.Minute))
	out, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Losses: []Loss{{Pod: lost, Trigger: NodeTainted, Since: t0, Why: "train-1 on node n2, tainted x:NoExecute"}},
		Running: []*v1.Pod{ok}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)})
	if err != nil {
		t.Fatal(err)
	}
	stale := podGroup(true, nil, out.Cond)
	running := []*v1.Pod{member("a", "n1"), member("b", "n3")}
	for i := range 3 {
		g.clock.SetTime(t0.Add(time.Duration(90+i) * time.Second))
		if _, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: stale, Running: running, Expected: 2, Cond: baseCond(metav1.ConditionFalse)}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := g.observed(t, NodeTainted, OutcomeRestarted); n != 1 {
		t.Errorf("restarted observed %d times over three turns on the stale condition, want 1", n)
	}
	// The end written and seen; a new loss is a new episode.
	g.clock.SetTime(t0.Add(5 * time.Minute))
	if _, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Running: running, Expected: 2, Cond: baseCond(metav1.ConditionFalse)}); err != nil {
		t.Fatal(err)
	}
	again := member("b", "n3")
	out, _ = g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Losses: []Loss{{Pod: again, Trigger: NodeDeleted, Since: t0.Add(5 * time.Minute), Why: "b on node n3, deleted"}},
		Running: []*v1.Pod{running[0]}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)})
	if out.Cond.Reason != vocab.ReasonReplacingInPlace || !strings.Contains(out.Cond.Message, "(node_deleted)") {
		t.Errorf("a new loss after the end: %+v", out.Cond)
	}
}

// TestTurnEchoKeepsTheEnd: turns on the stale condition of a replacement
// that ended in place (the informers still show MembersLost True
// NoReplacement) keep the end's ReplacedInPlace, marked as an echo, and
// observe and tell nothing again; once the end is seen it stays while all
// members run. Before, both returned the loop's plain AllMembersRunning,
// which the loop wrote over ReplacedInPlace (the faults test's Wait and
// segmented cases failed so under load).
func TestTurnEchoKeepsTheEnd(t *testing.T) {
	lost, ok := member("train-1", "n2"), member("train-0", "n1")
	g := newRig(t, lost, ok)
	waiting := metav1.Condition{Type: vocab.ConditionMembersLost, Status: metav1.ConditionTrue, Reason: vocab.ReasonNoReplacement,
		LastTransitionTime: metav1.NewTime(t0), Message: "lost to a trigger (node_tainted) ...; policy Wait"}
	stale := podGroup(false, map[string]string{vocab.AnnotationOnMemberLoss: vocab.PolicyWait}, waiting)
	g.r.state(key, &waiting, nil, t0) // recovered from the condition, as after the NoReplacement turn
	g.clock.SetTime(t0.Add(30 * time.Second))
	running := []*v1.Pod{ok, member("train-1b", "n3")}
	end, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: stale, Running: running, Expected: 2, Cond: baseCond(metav1.ConditionFalse)})
	if err != nil || end.Cond.Reason != vocab.ReasonReplacedInPlace || end.Echo {
		t.Fatalf("the end: %+v, %v", end, err)
	}
	g.reasons()
	for i := range 3 {
		g.clock.SetTime(t0.Add(time.Duration(31+i) * time.Second))
		out, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: stale, Running: running, Expected: 2, Cond: baseCond(metav1.ConditionFalse)})
		if err != nil || !out.Echo || out.Cond.Reason != vocab.ReasonReplacedInPlace || out.Cond.Message != end.Cond.Message {
			t.Errorf("turn %d on the stale condition: %+v, %v; want the end's ReplacedInPlace, an echo", i, out, err)
		}
	}
	if n, _ := g.observed(t, NodeTainted, OutcomeInPlace); n != 1 {
		t.Errorf("in_place observed %d times, want 1", n)
	}
	if r := g.reasons(); r != "" {
		t.Errorf("events on the stale turns: %q", r)
	}
	// The end seen: it stays while all run (the loop's plain condition
	// wrote over it before); a member short again ends it.
	seen := podGroup(false, nil, end.Cond)
	if out, _ := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: seen, Running: running, Expected: 2, Cond: baseCond(metav1.ConditionFalse)}); out.Echo || out.Cond != end.Cond {
		t.Errorf("after the end was seen: %+v, want it kept", out)
	}
	if out, _ := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: seen, Running: running[:1], Expected: 2, Cond: baseCond(metav1.ConditionTrue)}); out.Cond.Status != metav1.ConditionTrue {
		t.Errorf("a member short after the end: %+v, want the loop's True", out)
	}
}
