package trees

import (
	"fmt"
	"slices"
	"strings"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/gang/composite"
	"github.com/gpufabric/gpufabric/pkg/gang/evict"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// The evict room's view of trees: how a running leaf's pods are disrupted.
var _ evict.Trees = (*Reader)(nil)

// Above walks up from a PodGroup with a parent as kube-scheduler 1.37's
// preemption does (getHighestAllAncestor, GetPodPriority): the key of the
// highest group on the way, the PodGroup included, whose disruptionMode is
// All ("" none), and the highest CompositePodGroup reached: the root, or
// the last one found when a parent is missing (nil when the PodGroup's own
// parent is). A cycle, or more than composite.MaxDepth groups on the way,
// is ErrInvalid.
func (r *Reader) Above(pg *schedulingv1beta1.PodGroup) (string, *schedulingv1alpha3.CompositePodGroup, error) {
	all := ""
	if dm := pg.Spec.DisruptionMode; dm != nil && dm.All != nil {
		all = vocab.PodGroupKey(pg.Namespace, pg.Name)
	}
	var top *schedulingv1alpha3.CompositePodGroup
	var seen []string
	parent := pg.Spec.ParentCompositePodGroupName
	for depth := 1; parent != nil; depth++ {
		name := *parent
		switch {
		case slices.Contains(seen, name):
			return "", nil, fmt.Errorf("%w: CompositePodGroup %s/%s: spec.parentCompositePodGroupName makes a cycle (%s)", ErrInvalid, pg.Namespace, name, strings.Join(append(seen, name), " → "))
		case depth >= composite.MaxDepth:
			return "", nil, fmt.Errorf("%w: PodGroup %s/%s: more than %d levels of spec.parentCompositePodGroupName above it", ErrInvalid, pg.Namespace, pg.Name, composite.MaxDepth-1)
		}
		seen = append(seen, name)
		c, err := r.Composites.Get(pg.Namespace, name)
		if err != nil {
			break // missing (or unreadable): the walk ends, as kube-scheduler's
		}
		top = c
		if dm := c.Spec.DisruptionMode; dm != nil && dm.All != nil {
			all = vocab.CompositeKey(c.Namespace, c.Name)
		}
		parent = c.Spec.ParentCompositePodGroupName
	}
	return all, top, nil
}

// Leaves lists the leaf PodGroups under a CompositePodGroup, within the
// bounds Read checks (composite.MaxDepth levels, composite.MaxChildren
// children, MaxLeaves PodGroups; past them ErrInvalid). Unlike Read it
// does not check that the groups belong to one Workload: a victim's tree
// is evicted as it stands.
func (r *Reader) Leaves(c *schedulingv1alpha3.CompositePodGroup) ([]*schedulingv1beta1.PodGroup, error) {
	var out []*schedulingv1beta1.PodGroup
	var walk func(c *schedulingv1alpha3.CompositePodGroup, depth int) error
	walk = func(c *schedulingv1alpha3.CompositePodGroup, depth int) error {
		if depth >= composite.MaxDepth {
			return fmt.Errorf("%w: %s/CompositePodGroup/%s: composites deeper than %d levels", ErrInvalid, c.Namespace, c.Name, composite.MaxDepth-1)
		}
		kids, err := r.children(c)
		if err != nil {
			return err
		}
		for _, k := range kids.composites {
			if err := walk(k, depth+1); err != nil {
				return err
			}
		}
		if out = append(out, kids.podGroups...); len(out) > MaxLeaves {
			return fmt.Errorf("%w: %s/CompositePodGroup/%s: more than %d PodGroups under it", ErrInvalid, c.Namespace, c.Name, MaxLeaves)
		}
		return nil
	}
	return out, walk(c, 1)
}

// Composite gets a CompositePodGroup; nil when it is gone.
func (r *Reader) Composite(namespace, name string) *schedulingv1alpha3.CompositePodGroup {
	c, err := r.Composites.Get(namespace, name)
	if err != nil {
		return nil
	}
	return c
}
