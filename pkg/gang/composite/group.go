package composite

import (
	"fmt"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// MaxDepth is the deepest tree Kubernetes 1.37 makes from Workload
// templates: three composite levels and the PodGroups below them.
const MaxDepth = 4

// MaxChildren bounds a composite's children (a Workload template holds at
// most 8; live objects are not bounded by the API, so this is the cost
// bound for what a tenant creates by hand).
const MaxChildren = 64

// Group is one node of a tree: a composite (Children) or a leaf PodGroup
// (Gang).
type Group struct {
	// Name names the group in messages and keys the decision:
	// "CompositePodGroup/<name>" or "PodGroup/<name>".
	Name string
	// TopologyKey is schedulingConstraints.topology[0].key: the group goes
	// inside one domain of that level (a fabric level or any node label);
	// "": inside its parent's.
	TopologyKey string
	// MinGroupCount, for a composite: how many children must be placed
	// (gang policy's minGroupCount; 1 for the basic policy, as
	// kube-scheduler counts it).
	MinGroupCount int
	Children      []*Group
	// Gang, for a leaf: its members waiting to be placed (none when all
	// run) and BoundNodes where its members run. Its TopologyKey is the
	// group's; Place sets its Within.
	Gang *placement.Gang
	// RailCoupling is the annotation gpufabric.dev/rail-coupling
	// (topology.RailCoupling*; "": not set): on a composite, required or
	// preferred couples the IB rails of the leaves below it (coupling.go),
	// none leaves its subtree out of an ancestor's; on a leaf only none.
	RailCoupling string
}

// Leaf reports whether g is a leaf PodGroup.
func (g *Group) Leaf() bool { return g.Gang != nil }

// pending reports whether the group has members waiting to be placed.
func (g *Group) pending() bool {
	if g.Leaf() {
		return len(g.Gang.Members) > 0
	}
	for _, c := range g.Children {
		if c.pending() {
			return true
		}
	}
	return false
}

// runningNodes are the nodes where the subtree's members run.
func (g *Group) runningNodes() []string {
	if g.Leaf() {
		return g.Gang.BoundNodes
	}
	var out []string
	for _, c := range g.Children {
		out = append(out, c.runningNodes()...)
	}
	return out
}

// leaves lists the subtree's leaves in tree order.
func (g *Group) leaves() []*Group {
	if g.Leaf() {
		return []*Group{g}
	}
	var out []*Group
	for _, c := range g.Children {
		out = append(out, c.leaves()...)
	}
	return out
}

// Validate checks a tree's shape: at most MaxDepth levels, leaves at the
// bottom only, every composite with 1..MaxChildren children and a
// MinGroupCount among them, names unique. The error names the group and
// the field.
func Validate(root *Group) error {
	seen := map[string]bool{}
	var walk func(g *Group, depth int) error
	walk = func(g *Group, depth int) error {
		switch {
		case depth > MaxDepth:
			return fmt.Errorf("%s: the tree is deeper than %d levels", g.Name, MaxDepth)
		case seen[g.Name]:
			return fmt.Errorf("%s: in the tree twice", g.Name)
		case g.Leaf() && len(g.Children) > 0:
			return fmt.Errorf("%s: a PodGroup has no children", g.Name)
		}
		seen[g.Name] = true
		if err := validCoupling(g); err != nil {
			return err
		}
		if g.Leaf() {
			return nil
		}
		switch {
		case len(g.Children) == 0:
			return fmt.Errorf("%s: a composite without children", g.Name)
		case len(g.Children) > MaxChildren:
			return fmt.Errorf("%s: %d children, at most %d", g.Name, len(g.Children), MaxChildren)
		case g.MinGroupCount < 1 || g.MinGroupCount > len(g.Children):
			return fmt.Errorf("%s: spec.schedulingPolicy.gang.minGroupCount %d, want 1..%d (its children)", g.Name, g.MinGroupCount, len(g.Children))
		}
		for _, c := range g.Children {
			if err := walk(c, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(root, 1)
}

// validCoupling checks a group's RailCoupling: a value of the annotation,
// and on a leaf only none (a PodGroup has no roles of its own to couple).
func validCoupling(g *Group) error {
	if g.RailCoupling == "" {
		return nil
	}
	if _, err := topology.ParseRailCoupling(g.RailCoupling); err != nil {
		return fmt.Errorf("%s: %w", g.Name, err)
	}
	if g.Leaf() && g.RailCoupling != topology.RailCouplingNone {
		return fmt.Errorf("%s: annotation %s: %q on a PodGroup; it couples the PodGroups below a CompositePodGroup, a PodGroup may only opt out with %q",
			g.Name, topology.AnnotationRailCoupling, g.RailCoupling, topology.RailCouplingNone)
	}
	return nil
}
