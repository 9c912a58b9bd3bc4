package replace

import (
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

const above = "cpg:ns/svc"

// TestTurnTreeLeaf: a tree's leaf is replaced in place as a flat gang is
// (its lost member evicted, ReplacingInPlace, ReplacedInPlace once the
// replacement runs); under a CompositePodGroup whose disruptionMode is
// All a loss asks for the composite's restart, not the leaf's, and evicts
// nothing itself, and the leaf remembers its previous domain (its tree's
// search pins it there first); a leaf's restart by policy Restart holds
// no previous domain.
func TestTurnTreeLeaf(t *testing.T) {
	lossOf := func(p *v1.Pod) []Loss {
		return []Loss{{Pod: p, Trigger: NodeNotReady, Since: t0, Why: p.Name + " on node " + p.Spec.NodeName + ", NotReady"}}
	}
	t.Run("in place", func(t *testing.T) {
		lost, ok := member("train-1", "n2"), member("train-0", "n1")
		g := newRig(t, lost, ok)
		pg := podGroup(false, nil)
		g.clock.SetTime(t0.Add(time.Second))
		out, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Losses: lossOf(lost), Running: []*v1.Pod{ok}, Expected: 2,
			Cond: baseCond(metav1.ConditionTrue), Leaf: true})
		if err != nil || out.Cond.Reason != vocab.ReasonReplacingInPlace || g.writes() != "evict train-1" || len(g.restarts) != 0 {
			t.Fatalf("%+v %v; writes %q, restarts %v", out, err, g.writes(), g.restarts)
		}
		g.clock.SetTime(t0.Add(5 * time.Second))
		out, _ = g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Running: []*v1.Pod{ok, member("train-1b", "n3")}, Expected: 2,
			Cond: baseCond(metav1.ConditionFalse), Leaf: true})
		if out.Cond.Reason != vocab.ReasonReplacedInPlace {
			t.Errorf("after the replacement: %+v", out.Cond)
		}
		if n, sum := g.observed(t, NodeNotReady, OutcomeInPlace); n != 1 || sum != 5 {
			t.Errorf("in_place observed %d, sum %v", n, sum)
		}
	})
	t.Run("composite disrupted only whole", func(t *testing.T) {
		lost, ok := member("train-1", "n2"), member("train-0", "n1")
		g := newRig(t, lost, ok)
		out, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: podGroup(false, nil), Losses: lossOf(lost), Running: []*v1.Pod{ok}, Expected: 2,
			Cond: baseCond(metav1.ConditionTrue), Leaf: true, WholeAbove: above})
		if err != nil || out.Stop {
			t.Fatal(out, err)
		}
		if why := g.restarts[above]; !strings.Contains(why, "CompositePodGroup ns/svc above the group is disrupted only whole") || !strings.Contains(why, "(node_not_ready)") {
			t.Errorf("restarts %v, want the composite's with the loss named", g.restarts)
		}
		if _, own := g.restarts[key]; own || g.writes() != "" {
			t.Errorf("restarts %v, writes %q: want only the composite's restart, no eviction", g.restarts, g.writes())
		}
		if p := g.r.Prefer(key); !slices.Equal(p, []string{"n1"}) {
			t.Errorf("prefer %v, want the running member's node n1", p)
		}
		if !strings.Contains(out.Cond.Message, "its tree's search places it again") {
			t.Errorf("condition %+v", out.Cond)
		}
	})
	t.Run("composite, a taint manager's deletion", func(t *testing.T) {
		gone := member("train-1", "n2")
		gone.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "DeletionByTaintManager"}}
		g := newRig(t)
		g.r.Disrupted(key, gone)
		if _, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: podGroup(false, nil), Running: []*v1.Pod{member("train-0", "n1")}, Expected: 2,
			Cond: baseCond(metav1.ConditionTrue), Leaf: true, WholeAbove: above}); err != nil {
			t.Fatal(err)
		}
		if why := g.restarts[above]; !strings.Contains(why, "deleted by a taint manager (node_tainted)") {
			t.Errorf("restarts %v", g.restarts)
		}
	})
	t.Run("policy Restart", func(t *testing.T) {
		lost, ok := member("train-1", "n2"), member("train-0", "n1")
		g := newRig(t, lost, ok)
		pg := podGroup(false, map[string]string{vocab.AnnotationOnMemberLoss: vocab.PolicyRestart})
		turn := Turn{Key: key, PodGroup: pg, Losses: lossOf(lost), Running: []*v1.Pod{ok}, Expected: 2, Cond: baseCond(metav1.ConditionTrue), Leaf: true}
		g.r.Turn(t.Context(), turn)
		g.clock.SetTime(t0.Add(2 * time.Minute))
		turn.Losses[0].Pod.DeletionTimestamp = &metav1.Time{Time: t0} // evicted, going
		if _, err := g.r.Turn(t.Context(), turn); err != nil {
			t.Fatal(err)
		}
		if why := g.restarts[key]; !strings.Contains(why, "policy Restart") {
			t.Errorf("restarts %v, want the leaf's own", g.restarts)
		}
		if p := g.r.Prefer(key); len(p) != 0 || g.r.Stays(key, pg) != "" {
			t.Errorf("prefer %v: a leaf's restart holds no previous domain", p)
		}
	})
}
