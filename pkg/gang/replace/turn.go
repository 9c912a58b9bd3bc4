package replace

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// Turn is what the loop knows of one placed gang on this attempt.
type Turn struct {
	Key      string
	PodGroup *schedulingv1beta1.PodGroup
	// Losses are the bound members lost to a trigger, terminating ones
	// included (those count as gone).
	Losses  []Loss
	Running []*v1.Pod
	Pending []*v1.Pod
	// Expected members running (the most that ran, at least minCount;
	// failed pods their controller keeps are not counted); Cond is the
	// loop's MembersLost condition.
	Expected int
	Cond     metav1.Condition
	// WholeAbove is the key of the CompositePodGroup above the PodGroup
	// whose disruptionMode is All ("" none): the PodGroup is then
	// disrupted only whole with it, and its restart is asked for that
	// key (the loop restarts every leaf under it).
	WholeAbove string
	// Leaf: the PodGroup is a tree's leaf; its tree's search places its
	// restarted members, so no previous domain is held for them.
	Leaf bool
}

// whole reports whether the turn's PodGroup is disrupted only whole: its
// own disruptionMode All, or a composite's above it.
func (t Turn) whole() bool { return whole(t.PodGroup) || t.WholeAbove != "" }

// restartKey is the key whose whole restart a loss asks for.
func (t Turn) restartKey() string {
	if t.WholeAbove != "" {
		return t.WholeAbove
	}
	return t.Key
}

// Outcome is what the loop does with the gang after its Turn.
type Outcome struct {
	// Cond is the MembersLost condition to write.
	Cond metav1.Condition
	// Stop: place nothing of the gang now (it failed).
	Stop bool
	// RetryIn: look at the gang again then (its bound), 0: no need.
	RetryIn time.Duration
	// Echo: Cond is the end of an episode that ended, which the informers
	// do not show yet: written again only where it is missing (its first
	// write failed), and nobody is told again.
	Echo bool
}

// aboveWhy says that a leaf restarts with the composite above it.
func aboveWhy(t Turn) string {
	_, ns, name := vocab.SplitKey(t.WholeAbove)
	return fmt.Sprintf("CompositePodGroup %s/%s above the group is disrupted only whole, so every PodGroup under it restarts whole at once", ns, name)
}

// notFailed: a loss other than a failed pod (which its controller
// replaces and keeps).
func notFailed(l Loss) bool { return l.Trigger != PodFailed }

// freshLosses are the losses whose pods are not terminating yet.
func freshLosses(ls []Loss) []Loss {
	var out []Loss
	for _, l := range ls {
		if l.Pod.DeletionTimestamp == nil {
			out = append(out, l)
		}
	}
	return out
}

// waitingWhy is why the gang's replacements wait: the first waiting
// member's PodScheduled message, cut.
func waitingWhy(pending []*v1.Pod) string {
	if len(pending) == 0 {
		return "no replacement pod exists yet (its controller has not recreated it)"
	}
	for _, c := range pending[0].Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Message != "" {
			return report.Truncate(c.Message, 512)
		}
	}
	return fmt.Sprintf("%d replacements not placed yet", len(pending))
}
