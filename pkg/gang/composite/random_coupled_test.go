package composite_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpufabric/gpufabric/pkg/gang/composite"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// The randomized comparison for coupled roles: small clusters (two racks
// of two NVLink domains of one or two nodes of 4 GPUs, GPU i on IB rail
// i, some GPUs in use), a root composite with gpufabric.dev/rail-coupling:
// required over two or three leaf PodGroups of one or two pods, every pod
// of the tree asking the same k GPUs (1 to 4). Coupled, every pod uses one
// set R of k rails, so a node (one GPU per rail) holds at most one pod of
// the tree. The brute force tries every root domain, set of children,
// domain for each and rail set R, and matches pods to distinct nodes with
// R free. The engine must never place a tree off one rail set
// (checkCoupled), never place more children than the brute force, and
// place as many in all but at most 1% of the cases (the search is
// bounded).

// cNode is a node as the coupled brute force sees it.
type cNode struct {
	name, nvl, rack string
	free            [4]bool // by rail
}

func randomCoupledCase(r *rand.Rand, i int) (treeFile, []cNode, string, int, []bfLeaf, int) {
	var f treeFile
	f.Levels = []string{"rack"}
	var nodes []cNode
	for rack := range 2 {
		for d := range 2 {
			id := fmt.Sprintf("d%d%d", rack, d)
			spec := scenario.DomainSpec{ID: id, Nodes: 1 + r.IntN(2), GPUsPerNode: 4, Labels: map[string]string{"rack": fmt.Sprintf("r%d", rack)}}
			for n := range spec.Nodes {
				node := cNode{name: scenario.NodeName(id, n), nvl: id, rack: fmt.Sprintf("r%d", rack), free: [4]bool{true, true, true, true}}
				var used []int
				for g := range 4 {
					if r.IntN(3) == 0 {
						used = append(used, g)
						node.free[g] = false
					}
				}
				if len(used) > 0 {
					f.Load = append(f.Load, scenario.LoadSpec{Node: node.name, GPUs: used})
				}
				nodes = append(nodes, node)
			}
			f.Domains = append(f.Domains, spec)
		}
	}
	k := 1 + r.IntN(4)
	rootKey := []string{"rack", "", topology.TopologyKeyCluster}[r.IntN(3)]
	root := treeSpec{Name: fmt.Sprintf("t%d", i), Key: rootKey, Coupling: topology.RailCouplingRequired}
	var leaves []bfLeaf
	for c := range 2 + r.IntN(2) {
		l := bfLeaf{key: []string{keyNVL, keyNVL, "", "rack"}[r.IntN(4)]}
		if rootKey == "rack" && l.key == "rack" {
			l.key = ""
		}
		for range 1 + r.IntN(2) {
			l.pods = append(l.pods, k)
		}
		gs := &scenario.GangSpec{Pods: len(l.pods), GPUsPerPod: int64(k)}
		root.Children = append(root.Children, treeSpec{Name: fmt.Sprintf("t%d-c%d", i, c), Key: l.key, Gang: gs})
		leaves = append(leaves, l)
	}
	root.Min = 1 + r.IntN(len(root.Children))
	f.Trees = []treeSpec{root}
	return f, nodes, rootKey, root.Min, leaves, k
}

// coupledBruteForce returns the most children of the root that can be
// placed together on one rail set of k rails, -1 when fewer than min can.
func coupledBruteForce(nodes []cNode, rootKey string, min int, leaves []bfLeaf, k int) int {
	roots := []string{""}
	if rootKey == "rack" {
		roots = []string{"r0", "r1"}
	}
	var sets [][]int
	for mask := 1; mask < 16; mask++ {
		if popcount(mask) == k {
			var set []int
			for rail := range 4 {
				if mask&(1<<rail) != 0 {
					set = append(set, rail)
				}
			}
			sets = append(sets, set)
		}
	}
	best := -1
	for _, rack := range roots {
		for chosen := 1; chosen < 1<<len(leaves); chosen++ {
			n := popcount(chosen)
			if n < min || n <= best {
				continue
			}
			for _, set := range sets {
				if coupledFits(nodes, rack, chosen, leaves, set) {
					best = n
					break
				}
			}
		}
	}
	return best
}

// coupledFits tries every domain for each chosen child, inside rack (""
// any), and matches the pods to distinct nodes with every rail of set
// free.
func coupledFits(nodes []cNode, rack string, chosen int, leaves []bfLeaf, set []int) bool {
	var kids []int
	for i := range leaves {
		if chosen&(1<<i) != 0 {
			kids = append(kids, i)
		}
	}
	allowed := make([][]int, len(leaves))
	places := make([]bfPlace, len(nodes))
	for i, n := range nodes {
		places[i] = bfPlace{nvl: n.nvl, rack: n.rack}
	}
	var try func(j int) bool
	try = func(j int) bool {
		if j == len(kids) {
			return matchPods(nodes, kids, allowed, leaves, set)
		}
		for _, in := range leafChoices(places, rack, leaves[kids[j]].key, func(int) bool { return true }) {
			allowed[kids[j]] = in
			if try(j + 1) {
				return true
			}
		}
		return false
	}
	return try(0)
}

// matchPods puts every pod of the kids on its own allowed node with the
// set's rails free.
func matchPods(nodes []cNode, kids []int, allowed [][]int, leaves []bfLeaf, set []int) bool {
	var pods []int // leaf per pod
	for _, li := range kids {
		for range leaves[li].pods {
			pods = append(pods, li)
		}
	}
	taken := make([]bool, len(nodes))
	var put func(p int) bool
	put = func(p int) bool {
		if p == len(pods) {
			return true
		}
		for _, ni := range allowed[pods[p]] {
			if taken[ni] || slices.ContainsFunc(set, func(rail int) bool { return !nodes[ni].free[rail] }) {
				continue
			}
			taken[ni] = true
			if put(p + 1) {
				return true
			}
			taken[ni] = false
		}
		return false
	}
	return put(0)
}

// TestRandomCoupledTreesVsBruteForce: 300 random coupled trees (100 with
// -short).
func TestRandomCoupledTreesVsBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 3))
	cases, placed, searched, fewer := 300, 0, 0, 0
	if testing.Short() {
		cases = 100
	}
	ctx := context.Background()
	for i := range cases {
		f, nodes, rootKey, min, leaves, k := randomCoupledCase(r, i)
		want := coupledBruteForce(nodes, rootKey, min, leaves, k)
		cfg, s := snapshotOf(ctx, t, f.Scenario)
		root := f.Trees[0].build(t)
		d, u, err := composite.Place(ctx, cfg, s, root, composite.Options{})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		got := -1
		if d != nil {
			got = len(d.Leaves)
			checkDecision(t, s, root, d)
			checkCoupled(t, s, d)
			if len(d.Coupled) != 1 || len(d.Coupled[0].Rails) != k {
				t.Errorf("case %d: couplings %+v, want one on %d rails", i, d.Coupled, k)
			}
			placed++
			if d.Stats.Searches > 0 {
				searched++
			}
		}
		if got > want {
			t.Errorf("case %d: placed %d children, brute force %d (k %d, min %d, root key %q, leaves %+v, nodes %+v)", i, got, want, k, min, rootKey, leaves, nodes)
		}
		if got < want {
			msg := ""
			if u != nil {
				msg = u.Message
			}
			fewer++
			t.Logf("case %d: placed %d children, brute force %d (k %d, min %d, root key %q, leaves %+v, nodes %+v): %s", i, got, want, k, min, rootKey, leaves, nodes, msg)
		}
	}
	t.Logf("%d cases: %d placed (%d with the joint search), %d refused, %d with fewer children than the brute force", cases, placed, searched, cases-placed, fewer)
	// The search is bounded (tryIn's tries, Options.PlaceCalls): on 3,000
	// cases of seed (99, 7) it placed fewer children than the brute force
	// in 5 (one looked at: the leaf that fixes the set took two nodes a
	// sibling with a narrower domain needed, and no try went without both).
	// More than 1% fails.
	if fewer*100 > cases {
		t.Errorf("%d of %d trees placed with fewer children than the brute force, more than 1%%", fewer, cases)
	}
}
