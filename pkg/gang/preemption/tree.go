package preemption

import (
	"context"
	"fmt"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// Placer places a preemptor on a snapshot: the pods it places (a tree's
// every leaf's in one Decision), or nil and a sentence saying why none
// fits. A Request's Gang is placed by the engine; a Tree brings its own
// Placer (the tree search, pkg/gang/composite, wrapped by pkg/gang/trees),
// so this package knows nothing of trees.
type Placer interface {
	Place(ctx context.Context, cfg placement.Config, s *index.Snapshot) (*placement.Decision, string, error)
}

// Tree is a preemptor placed as one decision by its own Placer: a
// CompositePodGroup tree. A plan for it is made as for a gang, in the
// domains of its root's level.
type Tree struct {
	// Namespace is the tree's: PodDisruptionBudgets of other namespaces
	// are not named to it.
	Namespace string
	// TopologyKey is the root's schedulingConstraints topology key: plans
	// are made in the domains of that level ("": the levels from the
	// smallest up, as for a gang without a key).
	TopologyKey string
	// BoundNodes are where the tree's members run: a candidate domain
	// holds them all (a subtree with running members is pinned to them).
	BoundNodes []string
	Placer     Placer
	// Devices are the node-local devices its waiting members ask for
	// (GangDevices of its leaves' gangs): a starvation reservation's need.
	Devices int
}

// gangPlacer places a gang by the engine.
type gangPlacer struct{ g *placement.Gang }

func (p gangPlacer) Place(ctx context.Context, cfg placement.Config, s *index.Snapshot) (*placement.Decision, string, error) {
	d, u, err := placement.Place(ctx, cfg, s, p.g)
	if err != nil || d != nil {
		return d, "", err
	}
	msg := "no placement"
	if u != nil {
		msg = firstLine(u.Message)
	}
	return nil, msg, nil
}

// preemptor is what a plan needs of a Request's preemptor, gang or tree.
type preemptor struct {
	// what names it in reasons: "gang" or "tree".
	what, namespace, topologyKey string
	boundNodes                   []string
	placer                       Placer
}

// preemptorOf reads a request's preemptor: its Tree when set, else its
// Gang.
func preemptorOf(req Request) (preemptor, error) {
	switch {
	case req.Tree != nil:
		if req.Tree.Placer == nil {
			return preemptor{}, fmt.Errorf("preemption request: a tree without a placer")
		}
		t := req.Tree
		return preemptor{what: "tree", namespace: t.Namespace, topologyKey: t.TopologyKey, boundNodes: t.BoundNodes, placer: t.Placer}, nil
	case req.Gang != nil:
		g := req.Gang
		return preemptor{what: "gang", namespace: g.Namespace, topologyKey: g.TopologyKey, boundNodes: g.BoundNodes, placer: gangPlacer{g}}, nil
	}
	return preemptor{}, fmt.Errorf("preemption request: neither a gang nor a tree")
}
