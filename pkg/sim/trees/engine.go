package trees

import (
	"fmt"

	"github.com/gpufabric/gpufabric/pkg/gang/composite"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Group is a tree as the engine's tree search (composite.Place) takes it:
// a CompositePodGroup per composite (minGroupCount: all its children), a
// PodGroup per leaf with its pods and one GPU claim per pod (none for a
// CPU-only pod), built with the scenario builders the simulator's flat
// gangs use. A composite whose children have a rail group asks for
// coupled roles (gpufabric.dev/rail-coupling: its Spec.Coupled mode), and
// its children outside the group opt out (none).
type Group struct {
	Root *composite.Group
	// Pod maps each pod's name to its index in Spec.Flat order.
	Pod map[string]int
}

// NewGroup builds the tree of s; prefix names its groups
// (<prefix>-<name>) and so its pods (<prefix>-<leaf>-NN) and claims.
func NewGroup(s *Spec, prefix string) (*Group, error) {
	g := &Group{Pod: map[string]int{}}
	next := 0
	var build func(sp *Spec) (*composite.Group, error)
	build = func(sp *Spec) (*composite.Group, error) {
		name := prefix + "-" + sp.Name
		mode, coupled := sp.Coupled()
		if sp.Leaf() {
			gang, _, err := scenario.BuildGang(scenario.GangSpec{Name: name, Pods: sp.Pods, GPUsPerPod: int64(sp.GPUsPerPod), TopologyKey: sp.TopologyKey})
			if err != nil {
				return nil, fmt.Errorf("leaf %s: %w", name, err)
			}
			for _, m := range gang.Members {
				g.Pod[m.Pod.Name] = next
				next++
			}
			return &composite.Group{Name: "PodGroup/" + name, TopologyKey: sp.TopologyKey, Gang: gang}, nil
		}
		out := &composite.Group{Name: "CompositePodGroup/" + name, TopologyKey: sp.TopologyKey, MinGroupCount: len(sp.Children)}
		if coupled {
			out.RailCoupling = mode // the values are the annotation's
		}
		for i := range sp.Children {
			c, err := build(&sp.Children[i])
			if err != nil {
				return nil, err
			}
			if coupled && sp.Children[i].RailGroup == "" {
				c.RailCoupling = topology.RailCouplingNone
			}
			out.Children = append(out.Children, c)
		}
		return out, nil
	}
	root, err := build(s)
	if err != nil {
		return nil, err
	}
	if next != len(s.Flat()) {
		return nil, fmt.Errorf("tree %s: %d pods built for %d", prefix, next, len(s.Flat()))
	}
	g.Root = root
	return g, nil
}
