package scheduler

import (
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/replace"
	"github.com/gpufabric/gpufabric/pkg/gang/trees"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// A tree's leaf PodGroup has a turn of its own before its tree is tried
// (docs/design/composite.md, "Lost members"): its lost members are
// replaced in place and its whole restarts run as a flat gang's; under a
// CompositePodGroup whose disruptionMode is All a loss restarts every
// leaf under that composite (treeRestarts); the tree places what the
// leaves' controllers recreate.

var _ replace.Restarts = treeRestarts{}

// leafMembers is a leaf's members as its tree sees them: none for a
// failed leaf; Restarting while a whole restart's old members go; after
// them, the old members that stay (a Job keeps failed pods) no longer
// make the new ones late members, and the new ones have the previous
// domain the replace room remembers (and whether they must stay there).
func (g *gangPods) leafMembers(pg *schedulingv1beta1.PodGroup) (trees.Members, error) {
	if replace.Failed(pg) {
		return trees.Members{}, nil
	}
	ms, err := g.members(pg)
	if err != nil {
		return trees.Members{}, err
	}
	restart := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.DisruptionTarget)
	active := restart != nil && restart.Status == metav1.ConditionTrue
	if active && restart.Reason == vocab.ReasonReplacingMembers {
		forgetOld(ms)
	}
	out := trees.Members{Pending: ms.pending, Running: ms.running, Gated: ms.gated, AnyBound: ms.anyBound, BoundNodes: ms.boundNodes,
		Restarting: active && restart.Reason == vocab.ReasonMemberDisrupted}
	if g.previous != nil && !ms.anyBound && len(ms.pending) > 0 {
		key := vocab.PodGroupKey(pg.Namespace, pg.Name)
		if out.Previous = g.previous.Prefer(key); len(out.Previous) > 0 {
			out.Stays = g.previous.Stays(key, pg)
		}
	}
	return out, nil
}

// treeRestarts asks for whole restarts (replace.Restarts): a PodGroup's
// own; for a CompositePodGroup's key, every placed leaf's under it, each
// queued so that its turn carries the restart out.
type treeRestarts struct{ s *Scheduler }

func (r treeRestarts) Restart(key, why string) {
	s := r.s
	if !vocab.IsCompositeKey(key) || s.tree == nil {
		s.inf.disrupted.Restart(key, why)
		return
	}
	leaves, err := s.tree.LeavesUnder(key)
	if err != nil {
		// Gone or invalid: nothing under it can be restarted whole; each
		// leaf's own turn goes on replacing in place.
		return
	}
	for _, pg := range leaves {
		if ms, err := s.gangs.members(pg); err != nil || !ms.anyBound {
			continue // never placed: nothing to restart
		}
		k := vocab.PodGroupKey(pg.Namespace, pg.Name)
		s.inf.disrupted.Restart(k, why)
		s.queue.Add(k)
	}
}
