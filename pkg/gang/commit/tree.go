package commit

import (
	"errors"
	"fmt"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/commit/recordwire"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

// Kinds of a commit's root (Root.Kind).
const (
	// KindPodGroup: a flat gang, its record named by its PodGroup.
	KindPodGroup = recordwire.KindPodGroup
	// KindCompositePodGroup: a tree (scheduling.k8s.io/v1alpha3
	// CompositePodGroup), its record named by the root CompositePodGroup;
	// its leaves are PodGroups of the root's namespace.
	KindCompositePodGroup = recordwire.KindCompositePodGroup
)

// Root is what a commit is recorded under: the PodGroup of a flat gang, or
// the root CompositePodGroup of a tree, whose placed leaf PodGroups commit
// as one transaction (Committer.BeginTree).
type Root = recordwire.Root

// rootOf is the root of a flat gang's commit: its PodGroup (the zero Root
// for a gang of one, which has no record).
func rootOf(pg *schedulingv1beta1.PodGroup) Root {
	if pg == nil {
		return Root{}
	}
	return Root{Kind: KindPodGroup, Namespace: pg.Namespace, Name: pg.Name, UID: pg.UID}
}

// Leaf is one placed leaf PodGroup of a tree: the PodGroup, its gang and
// the engine's decision for it.
type Leaf struct {
	PodGroup *schedulingv1beta1.PodGroup
	Gang     *placement.Gang
	Decision *placement.Decision
}

// checkTree says why leaves cannot commit under root, nil when they can:
// the root is a PodGroup with itself as its one leaf, or a
// CompositePodGroup with 1..MaxRecordGroups distinct leaf PodGroups of its
// namespace (not itself), each with a gang and a decision that places at
// least one pod of that namespace.
func checkTree(root Root, leaves []Leaf) error {
	var errs []error
	switch {
	case root.Kind != KindPodGroup && root.Kind != KindCompositePodGroup:
		return fmt.Errorf("root %s: kind %q, want %s or %s", root.Key(), root.Kind, KindPodGroup, KindCompositePodGroup)
	case root.Namespace == "" || root.Name == "" || root.UID == "":
		return fmt.Errorf("%s: namespace, name and uid are required", root)
	case len(leaves) == 0 || len(leaves) > MaxRecordGroups:
		return fmt.Errorf("%s: %d leaf podgroups, want 1..%d", root, len(leaves), MaxRecordGroups)
	case root.Kind == KindPodGroup && len(leaves) != 1:
		return fmt.Errorf("%s: %d leaves, a podgroup is its own one leaf", root, len(leaves))
	}
	seen := make(map[types.UID]bool, len(leaves))
	for i, l := range leaves {
		if l.PodGroup == nil || l.Gang == nil || l.Decision == nil {
			errs = append(errs, fmt.Errorf("leaf %d: podgroup, gang and decision are required", i))
			continue
		}
		pg := l.PodGroup
		switch {
		case pg.Namespace != root.Namespace:
			errs = append(errs, fmt.Errorf("leaf podgroup %s/%s is not in the root's namespace", pg.Namespace, pg.Name))
		case root.Kind == KindPodGroup && (pg.UID != root.UID || pg.Name != root.Name):
			errs = append(errs, fmt.Errorf("leaf podgroup %s is not the root podgroup", pg.Name))
		case root.Kind == KindCompositePodGroup && pg.UID == root.UID:
			errs = append(errs, fmt.Errorf("leaf podgroup %s has the root's uid", pg.Name))
		case seen[pg.UID]:
			errs = append(errs, fmt.Errorf("leaf podgroup %s listed twice", pg.Name))
		case len(l.Decision.Pods) == 0:
			errs = append(errs, fmt.Errorf("leaf podgroup %s: the decision places no pod", pg.Name))
		}
		seen[pg.UID] = true
		for _, p := range l.Decision.Pods {
			if p.Namespace != root.Namespace {
				errs = append(errs, fmt.Errorf("leaf podgroup %s: pod %s/%s is not in the root's namespace", pg.Name, p.Namespace, p.Name))
				break
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", root, err)
	}
	return nil
}

// treePods are the pods the leaves' decisions place, leaf by leaf (one
// leaf's own slice when there is one).
func treePods(leaves []Leaf) []placement.PodPlacement {
	if len(leaves) == 1 {
		return leaves[0].Decision.Pods
	}
	var out []placement.PodPlacement
	for _, l := range leaves {
		out = append(out, l.Decision.Pods...)
	}
	return out
}

// gangKey names the commit in logs and at the gate's last step: the
// gang's key for a flat gang (or a gang of one), the root's for a tree.
func gangKey(root Root, leaves []Leaf) string {
	if root.Kind == KindCompositePodGroup {
		return root.Key()
	}
	return leaves[0].Decision.Gang
}
