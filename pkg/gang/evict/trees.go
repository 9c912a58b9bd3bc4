package evict

import (
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// Trees reads the CompositePodGroup trees above running PodGroups, for
// their victim units (pkg/gang/trees' Reader serves it over the
// informers' indexes, with its bounds).
type Trees interface {
	// Above walks up from a PodGroup with a parent as kube-scheduler does
	// (a missing parent ends the walk): the key of the highest group on
	// the way, the PodGroup included, whose disruptionMode is All
	// (vocab.PodGroupKey or vocab.CompositeKey; "" none), and the highest
	// CompositePodGroup reached (the root; nil when the PodGroup's parent
	// is missing). An error: a cycle, or a chain deeper than a tree may be.
	Above(pg *schedulingv1beta1.PodGroup) (all string, top *schedulingv1alpha3.CompositePodGroup, err error)
	// Leaves lists the leaf PodGroups under a CompositePodGroup, within a
	// tree's bounds (an error past them).
	Leaves(c *schedulingv1alpha3.CompositePodGroup) ([]*schedulingv1beta1.PodGroup, error)
	// Composite gets a CompositePodGroup; nil when it is gone.
	Composite(namespace, name string) *schedulingv1alpha3.CompositePodGroup
}

// victimGroup is what the pods of one PodGroup are evicted as: unit is
// the key of the whole they go with ("" each pod alone), at priority.
// For a key of a tree's root (vocab.CompositeKey) it caches the tree's
// priority, ok when the tree could be read.
type victimGroup struct {
	pg       *schedulingv1beta1.PodGroup // nil: gone
	unit     string
	priority int32
	ok       bool
}

// groupOf resolves how the running pods of PodGroup ns/name are evicted,
// as kube-scheduler 1.37 does:
//   - a PodGroup in a tree: with the highest group above or at it whose
//     disruptionMode is All (all the running pods of every leaf PodGroup
//     under it are one unit), or each pod alone when there is none; at
//     the priority of its tree's root (treeGroup);
//   - a PodGroup alone: whole when its disruptionMode is All, at its
//     effective priority.
//
// A tree that cannot be read (a cycle, deeper or wider than a tree may
// be) leaves the PodGroup standing alone.
func (v *victims) groupOf(ns, name string, groups map[string]*victimGroup) *victimGroup {
	g := &victimGroup{}
	if g.pg, _ = v.cfg.PodGroups.PodGroups(ns).Get(name); g.pg == nil {
		return g
	}
	if v.cfg.Trees != nil && g.pg.Spec.ParentCompositePodGroupName != nil {
		if tg := v.treeGroup(g.pg, groups); tg != nil {
			return tg
		}
	}
	g.priority = resolveGroup(v.cfg, g.pg).Priority
	if dm := g.pg.Spec.DisruptionMode; dm != nil && dm.All != nil {
		g.unit = vocab.PodGroupKey(ns, name)
	}
	return g
}

// treeGroup is groupOf for a PodGroup with a parent; nil when its tree
// cannot be read. The tree's priority is its root's effective one
// (resolveTree), read once per root into groups.
func (v *victims) treeGroup(pg *schedulingv1beta1.PodGroup, groups map[string]*victimGroup) *victimGroup {
	all, top, err := v.cfg.Trees.Above(pg)
	if err != nil || top == nil {
		return nil
	}
	rootKey := vocab.CompositeKey(top.Namespace, top.Name)
	r, seen := groups[rootKey]
	if !seen {
		r = &victimGroup{}
		if leaves, err := v.cfg.Trees.Leaves(top); err == nil {
			r.priority, r.ok = resolveTree(v.cfg, top, leaves).Priority, true
		}
		groups[rootKey] = r
	}
	if !r.ok {
		return nil
	}
	return &victimGroup{pg: pg, unit: all, priority: r.priority, ok: true}
}

// composite gets a CompositePodGroup for an event; nil when it is gone or
// trees are off.
func (v *victims) composite(ns, name string) *schedulingv1alpha3.CompositePodGroup {
	if v.cfg.Trees == nil {
		return nil
	}
	return v.cfg.Trees.Composite(ns, name)
}
