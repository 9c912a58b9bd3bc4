package replace

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// TestTurnWholePolicies: a whole gang restarted at once after a loss
// whose previous domain has no room: policy Restart lets it go wherever
// it fits (Stays says nothing, no bound); Wait and Fail keep it to its
// previous domain (Stays says why) until the bound from the loss; past
// it, Wait keeps waiting (NoReplacement, one event) and Fail fails the
// PodGroup (Failed=True NoReplacement, GangFailed, the metric).
func TestTurnWholePolicies(t *testing.T) {
	for _, tc := range []struct {
		policy     string
		stays      string // in Stays' answer, "" none
		beforeMsg  string // in the condition's message before the bound
		retry      time.Duration
		afterMsg   string
		afterWhy   string // the condition's reason past the bound
		afterStop  bool
		afterEvent string
	}{
		{policy: "Restart", beforeMsg: "its old members go", afterMsg: "its old members go", afterWhy: vocab.ReasonReplacingInPlace},
		{policy: "Wait", stays: "policy Wait: the restarted gang waits for room in its previous domain",
			beforeMsg: "wait for room in its previous domain within 1m0s, then policy Wait", retry: 40 * time.Second,
			afterMsg: "policy Wait: it keeps waiting for room in its previous domain: no room in domain nvl-a", afterWhy: vocab.ReasonNoReplacement,
			afterEvent: vocab.EventNoReplacement},
		{policy: "Fail", stays: "policy Fail: the restarted gang waits for room in its previous domain until 2026-11-01T12:01:00Z (1m0s from the loss), then fails",
			beforeMsg: "wait for room in its previous domain within 1m0s, then policy Fail", retry: 40 * time.Second,
			afterStop: true, afterEvent: vocab.EventGangFailed},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			lost, ok := member("train-1", "n2"), member("train-0", "n1")
			g := newRig(t, lost, ok)
			pg := podGroup(true, map[string]string{vocab.AnnotationOnMemberLoss: tc.policy})
			g.clock.SetTime(t0.Add(time.Second))
			if _, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Losses: []Loss{{Pod: lost, Trigger: NodeTainted, Since: t0, Why: "train-1 on node n2, tainted"}},
				Running: []*v1.Pod{ok}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)}); err != nil {
				t.Fatal(err)
			}
			if g.restarts[key] == "" {
				t.Fatal("no restart asked")
			}
			if got := g.r.Stays(key, pg); (tc.stays == "") != (got == "") || !strings.Contains(got, tc.stays) {
				t.Errorf("stays %q, want %q", got, tc.stays)
			}
			// Its old members went; its new ones wait (the previous domain is full).
			waiting := member("train-0b", "")
			waiting.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Message: "no room in domain nvl-a"}}
			turn := Turn{Key: key, PodGroup: pg, Pending: []*v1.Pod{waiting, member("train-1b", "")}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)}
			g.clock.SetTime(t0.Add(20 * time.Second))
			out, err := g.r.Turn(t.Context(), turn)
			if err != nil || out.Stop || out.RetryIn != tc.retry || !strings.Contains(out.Cond.Message, tc.beforeMsg) ||
				!strings.Contains(out.Cond.Message, phraseRestarting) || !out.Cond.LastTransitionTime.Time.Equal(t0) {
				t.Errorf("before the bound: %+v, %v", out, err)
			}
			g.reasons()
			g.clock.SetTime(t0.Add(61 * time.Second))
			out, err = g.r.Turn(t.Context(), turn)
			if tc.afterWhy == "" {
				tc.afterWhy = vocab.ReasonMembersLost // failed: the loop's own condition stands
			}
			if err != nil || out.Stop != tc.afterStop || out.Cond.Type != vocab.ConditionMembersLost || out.Cond.Reason != tc.afterWhy || !strings.Contains(out.Cond.Message, tc.afterMsg) {
				t.Errorf("past the bound: %+v, %v", out, err)
			}
			if r := g.reasons(); r != tc.afterEvent {
				t.Errorf("events %q, want %q", r, tc.afterEvent)
			}
			failed := len(g.conds.set) == 1 && g.conds.set[0].Type == vocab.ConditionFailed && g.conds.set[0].Reason == vocab.ReasonNoReplacement &&
				strings.Contains(g.conds.set[0].Message, "not placed in its previous domain within 1m0s")
			if n, _ := g.observed(t, NodeTainted, OutcomeFailed); failed != tc.afterStop || (n == 1) != tc.afterStop {
				t.Errorf("failed %v (conditions %+v), metric %d", failed, g.conds.set, n)
			}
			if tc.policy == "Wait" {
				g.r.Turn(t.Context(), turn)
				if r := g.reasons(); r != "" {
					t.Errorf("a second turn recorded %q again", r)
				}
			}
		})
	}
}
