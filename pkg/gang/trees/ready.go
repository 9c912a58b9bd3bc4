package trees

import (
	"fmt"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/gang/composite"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Count is what the loop knows of a leaf's pods: All that exist (placed,
// waiting and gated), Gated those held by scheduling gates.
type Count struct{ All, Gated int }

// Ready says whether the tree may be placed, as kube-scheduler's
// GangScheduling plugin decides it: no pod of the tree has a scheduling
// gate, and, recursively, each composite has at least minGroupCount
// (basic: 1) ready children, a leaf at least minCount (basic: 1) pods.
// When it may not, why says what it waits for.
func (t *Tree) Ready(count func(*schedulingv1beta1.PodGroup) Count) (ok bool, why string) {
	gated := 0
	for _, l := range t.Leaves {
		gated += count(l.PodGroup).Gated
	}
	if gated > 0 {
		return false, fmt.Sprintf("%d pods of the tree have scheduling gates: a tree is placed when none has", gated)
	}
	return t.ready(t.Root, count)
}

func (t *Tree) ready(n *Node, count func(*schedulingv1beta1.PodGroup) Count) (bool, string) {
	if n.PodGroup != nil {
		have, want := count(n.PodGroup).All, MinCount(n.PodGroup)
		if have < want {
			return false, fmt.Sprintf("%s has %d of minCount %d pods", n.Name(), have, want)
		}
		return true, ""
	}
	readyKids, first := 0, ""
	for _, c := range n.Children {
		ok, why := t.ready(c, count)
		if ok {
			readyKids++
		} else if first == "" {
			first = why
		}
	}
	if want := MinGroupCount(n.Composite); readyKids < want {
		return false, fmt.Sprintf("%s has %d of minGroupCount %d children ready (%s)", n.Name(), readyKids, want, first)
	}
	return true, ""
}

// MinCount is a PodGroup's gang minCount (1 for the basic policy).
func MinCount(pg *schedulingv1beta1.PodGroup) int {
	if g := pg.Spec.SchedulingPolicy.Gang; g != nil {
		return int(g.MinCount)
	}
	return 1
}

// MinGroupCount is a composite's gang minGroupCount (1 for the basic
// policy, as kube-scheduler counts it).
func MinGroupCount(c *schedulingv1alpha3.CompositePodGroup) int {
	if g := c.Spec.SchedulingPolicy.Gang; g != nil {
		return int(g.MinGroupCount)
	}
	return 1
}

// compositeKey and podGroupKey are schedulingConstraints.topology[0].key
// ("" none).
func compositeKey(c *schedulingv1alpha3.CompositePodGroup) string {
	if sc := c.Spec.SchedulingConstraints; sc != nil && len(sc.Topology) > 0 {
		return sc.Topology[0].Key
	}
	return ""
}

func podGroupKey(pg *schedulingv1beta1.PodGroup) string {
	if sc := pg.Spec.SchedulingConstraints; sc != nil && len(sc.Topology) > 0 {
		return sc.Topology[0].Key
	}
	return ""
}

// Group is the tree as the search places it: each leaf's gang from leaf
// (nil gang: the leaf is left out, it is not ready); a composite left with
// fewer than minGroupCount children is left out too. Each group carries
// its annotation gpufabric.dev/rail-coupling (the search validates it); a
// PodGroup that says rail-alignment: preferred under a required coupling
// makes the tree invalid (ErrInvalid).
func (t *Tree) Group(leaf func(*schedulingv1beta1.PodGroup) (*placement.Gang, error)) (*composite.Group, error) {
	var build func(n *Node, coupling string) (*composite.Group, error)
	build = func(n *Node, coupling string) (*composite.Group, error) {
		if n.PodGroup != nil {
			if err := loosenedAlignment(n, coupling); err != nil {
				return nil, err
			}
			g, err := leaf(n.PodGroup)
			if err != nil || g == nil {
				return nil, err
			}
			return &composite.Group{Name: n.Name(), TopologyKey: podGroupKey(n.PodGroup), Gang: g,
				RailCoupling: n.PodGroup.Annotations[topology.AnnotationRailCoupling]}, nil
		}
		out := &composite.Group{Name: n.Name(), TopologyKey: compositeKey(n.Composite), MinGroupCount: MinGroupCount(n.Composite),
			RailCoupling: n.Composite.Annotations[topology.AnnotationRailCoupling]}
		if out.RailCoupling != "" {
			coupling = out.RailCoupling
		}
		for _, c := range n.Children {
			g, err := build(c, coupling)
			if err != nil {
				return nil, err
			}
			if g != nil {
				out.Children = append(out.Children, g)
			}
		}
		if len(out.Children) < out.MinGroupCount {
			return nil, nil // not ready (Ready says why)
		}
		return out, nil
	}
	g, err := build(t.Root, "")
	if err == nil && g == nil {
		err = fmt.Errorf("%s: no PodGroup of the tree can be placed", t.Root.Name())
	}
	return g, err
}

// loosenedAlignment refuses a PodGroup whose rail-alignment: preferred
// contradicts the required rail coupling it is under (its own
// rail-coupling: none takes it out).
func loosenedAlignment(n *Node, coupling string) error {
	a := n.PodGroup.Annotations
	if v, ok := a[topology.AnnotationRailCoupling]; ok {
		coupling = v
	}
	if coupling != topology.RailCouplingRequired || a[topology.AnnotationRailAlignment] != topology.RailAlignmentPreferred {
		return nil
	}
	return fmt.Errorf("%w: %s/%s: annotation %s: %s contradicts %s: %s above it (coupled PodGroups are rail-aligned): remove it, or set %s: %s on the PodGroup",
		ErrInvalid, n.PodGroup.Namespace, n.Name(), topology.AnnotationRailAlignment, topology.RailAlignmentPreferred,
		topology.AnnotationRailCoupling, topology.RailCouplingRequired, topology.AnnotationRailCoupling, topology.RailCouplingNone)
}
