package trees

import (
	"context"
	"strings"

	v1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/composite"
	"github.com/gpufabric/gpufabric/pkg/gang/evict"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
)

// Evictor is the evict room as a tree's attempt sees it: the nodes other
// gangs hold against the tree, and its preemption after a refusal.
type Evictor interface {
	Held(a *evict.Attempt) sets.Set[string]
	HeldNote(a *evict.Attempt) string
	Nominated(key string) bool
	AfterTreeRefusal(ctx context.Context, a *evict.Attempt, t *preemption.Tree, in index.SnapshotInput) (string, error)
}

// Priorities resolves a tree's effective priority and preemption policy.
type Priorities interface {
	Tree(root *schedulingv1alpha3.CompositePodGroup, leaves []*schedulingv1beta1.PodGroup) preemption.Effective
}

var (
	_ Evictor    = (*evict.Evictor)(nil)
	_ Priorities = (*evict.Priorities)(nil)
)

// resolve reads the tree's effective priority and policy (its root's,
// capped by its class and its leaves' pods) and builds the attempt as the
// evict room sees it.
func (c *Cycle) resolve(a *attempt, tree *Tree) {
	var eff preemption.Effective
	if c.d.Priorities != nil {
		leaves := make([]*schedulingv1beta1.PodGroup, 0, len(tree.Leaves))
		for _, l := range tree.Leaves {
			leaves = append(leaves, l.PodGroup)
		}
		eff = c.d.Priorities.Tree(a.root, leaves)
	}
	var pending []*v1.Pod
	for _, l := range tree.Leaves {
		pending = append(pending, a.leaves[l.PodGroup.UID].ms.Pending...)
	}
	a.pre = &evict.Attempt{Key: a.key, Root: a.root, Priority: eff.Priority, NoPreemption: eff.NoPreemption, Capped: eff.Capped, Members: pending}
}

// held returns the nodes other gangs hold against the tree.
func (c *Cycle) held(a *attempt) sets.Set[string] {
	if c.d.Evictor == nil || a.pre == nil {
		return nil
	}
	return c.d.Evictor.Held(a.pre)
}

// afterRefusal follows a tree the search refused (refusal says why): what
// other gangs hold against it comes first, then, when members wait, its
// preemption by the evict room (a plan the tree search makes in the domains of its root's
// level; the victims evicted; the tree placed by a later attempt once they
// are gone). It returns the refusal's message; only an error that stops
// the scheduler is returned.
func (c *Cycle) afterRefusal(ctx context.Context, a *attempt, group *composite.Group, refusal string) (string, error) {
	if c.d.Evictor == nil || a.pre == nil {
		return refusal, nil
	}
	msg := refusal
	if note := c.d.Evictor.HeldNote(a.pre); note != "" {
		msg = note + "\n" + msg
	}
	if len(a.pre.Members) == 0 {
		return msg, nil // nothing waits: nothing to make room for
	}
	if !c.d.DisablePreemption {
		// Preemption plans on the listers, which do not show the commits
		// in flight: let them land first.
		c.d.Pipeline.Wait()
	}
	in, err := c.d.Input(c.d.Evictor.Held(a.pre))
	var extra string
	if err == nil {
		extra, err = c.d.Evictor.AfterTreeRefusal(ctx, a.pre, a.preemptionTree(group, c.d.PlaceCalls), in)
	}
	if gate.Stops(err) {
		return "", err
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Preemption failed")
		extra = "preemption failed: " + err.Error()
	}
	if extra != "" {
		msg += "\n" + extra
	}
	return msg, nil
}

// preemptionTree is the tree as a preemption plans it: the root's level,
// where its members run, and the tree search as its placer.
func (a *attempt) preemptionTree(group *composite.Group, placeCalls int) *preemption.Tree {
	bound := sets.New[string]()
	for _, l := range a.leaves {
		bound.Insert(l.ms.BoundNodes...)
	}
	return &preemption.Tree{Namespace: a.root.Namespace, TopologyKey: compositeKey(a.root), BoundNodes: sets.List(bound),
		Placer: treePlacer{key: a.key, group: group, opts: composite.Options{PlaceCalls: placeCalls}}, Devices: groupDevices(group)}
}

// groupDevices counts the node-local devices the gangs of a group's
// leaves ask for (preemption.GangDevices).
func groupDevices(g *composite.Group) int {
	if g == nil {
		return 0
	}
	n := 0
	if g.Gang != nil {
		n += preemption.GangDevices(g.Gang)
	}
	for _, c := range g.Children {
		n += groupDevices(c)
	}
	return n
}

// treePlacer places a tree for a preemption's plan with the tree search;
// the decision holds every placed leaf's pods.
type treePlacer struct {
	key   string
	group *composite.Group
	opts  composite.Options
}

func (p treePlacer) Place(ctx context.Context, cfg placement.Config, s *index.Snapshot) (*placement.Decision, string, error) {
	d, u, err := composite.Place(ctx, cfg, s, p.group, p.opts)
	if err != nil {
		return nil, "", err
	}
	if d == nil {
		line, _, _ := strings.Cut(u.Message, "\n")
		return nil, line, nil
	}
	out := &placement.Decision{Gang: p.key}
	for _, l := range d.Leaves {
		out.Pods = append(out.Pods, l.Decision.Pods...)
	}
	return out, "", nil
}
