package trees

import (
	"fmt"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// Lost members of a tree's leaves (docs/design/composite.md, "Lost
// members"): a leaf is replaced in place as a flat gang is; under a
// CompositePodGroup whose disruptionMode is All, a loss restarts every
// leaf under that composite.

// WholeAbove is the key of the highest CompositePodGroup above pg whose
// disruptionMode is All ("" when none is, or when the walk is invalid:
// then the leaf is replaced on its own).
func (r *Reader) WholeAbove(pg *schedulingv1beta1.PodGroup) string {
	all, _, err := r.Above(pg)
	if err != nil || !vocab.IsCompositeKey(all) {
		return ""
	}
	return all
}

// LeavesUnder lists the leaf PodGroups under the CompositePodGroup key
// (a vocab.CompositeKey), within Leaves' bounds.
func (r *Reader) LeavesUnder(key string) ([]*schedulingv1beta1.PodGroup, error) {
	_, ns, name := vocab.SplitKey(key)
	c := r.Composite(ns, name)
	if c == nil {
		return nil, fmt.Errorf("CompositePodGroup %s/%s is gone", ns, name)
	}
	return r.Leaves(c)
}
