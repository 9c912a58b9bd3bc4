package inspect

import (
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
)

// BuildGroups lists the PodGroups of the cluster (already filtered to a
// namespace by the caller, or all of them): state, members bound of all,
// the NVLink domains of the bound members, and the reason and first line of
// the message of the condition that explains the state.
func BuildGroups(c *Cluster, opts Options) (*GroupSummary, error) {
	ix, err := newIndex(c, opts)
	if err != nil {
		return nil, err
	}
	rep := &GroupSummary{Groups: []GroupLine{}}
	for i := range c.PodGroups {
		pg := &c.PodGroups[i]
		line := GroupLine{Namespace: pg.Namespace, Name: pg.Name, State: groupState(pg),
			Job: ix.jobs[pg.Namespace+"/"+pg.Name], MinCount: minCount(pg)}
		members := membersOf(c.Pods, pg.Namespace, pg.Name)
		line.Members = len(members)
		for _, p := range members {
			switch {
			case p.Spec.NodeName != "":
				line.Bound++
				if d := ix.tree.Levels[0].DomainOf(p.Spec.NodeName); d != nil && !slices.Contains(line.Domains, d.ID) {
					line.Domains = append(line.Domains, d.ID)
				}
			case len(p.Spec.SchedulingGates) > 0:
				line.Gated++
			}
		}
		slices.Sort(line.Domains)
		condType := vocab.ConditionInitiallyScheduled
		switch line.State {
		case StateMembersLost:
			condType = vocab.ConditionMembersLost
		case StateFailed:
			condType = vocab.ConditionFailed
		}
		if cond := meta.FindStatusCondition(pg.Status.Conditions, condType); cond != nil {
			line.Reason, line.Message = cond.Reason, cond.Message
		} else {
			line.Reason, line.Message = notAttempted(pg, members)
		}
		rep.Groups = append(rep.Groups, line)
	}
	sort.Slice(rep.Groups, func(i, j int) bool {
		a, b := rep.Groups[i], rep.Groups[j]
		return nsNameLess(a.Namespace, a.Name, b.Namespace, b.Name)
	})
	return rep, nil
}
