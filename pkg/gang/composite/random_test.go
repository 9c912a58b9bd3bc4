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

// The randomized comparison: small clusters (two racks of two NVLink
// domains of one or two 4-GPU nodes, some GPUs in use, some nodes
// labelled), trees of a root composite and two to four leaf PodGroups
// (each with or without its own topology key, some pinned to labelled
// nodes), and a brute force that tries every root domain, every set of
// children and every domain for each, and packs the pods on the nodes'
// free GPUs. The engine must place a tree exactly when the brute force
// can, and then as many children as the brute force's best.

const keyNVL = topology.TopologyKeyNVLinkDomain

// bfNode is a node as the brute force sees it.
type bfNode struct {
	name, nvl, rack, sel string
	free                 int
}

// bfLeaf is a leaf as the brute force sees it.
type bfLeaf struct {
	key  string // "", keyNVL or "rack"
	pods []int  // GPUs per pod
	sel  string // node label value the pods select, "" none
}

func randomTreeCase(r *rand.Rand, i int) (treeFile, []bfNode, string, int, []bfLeaf) {
	var f treeFile
	f.Levels = []string{"rack"}
	var nodes []bfNode
	for rack := range 2 {
		for d := range 2 {
			id := fmt.Sprintf("d%d%d", rack, d)
			spec := scenario.DomainSpec{ID: id, Nodes: 1 + r.IntN(2), GPUsPerNode: 4, Labels: map[string]string{"rack": fmt.Sprintf("r%d", rack)},
				NodeLabels: map[int]map[string]string{}}
			for n := range spec.Nodes {
				node := bfNode{name: scenario.NodeName(id, n), nvl: id, rack: fmt.Sprintf("r%d", rack), free: 4}
				if r.IntN(4) == 0 {
					node.sel = fmt.Sprintf("s%d", r.IntN(2))
					spec.NodeLabels[n] = map[string]string{"sel": node.sel}
				}
				if used := r.IntN(4); used > 0 && r.IntN(2) == 0 {
					var gpus []int
					for g := range used {
						gpus = append(gpus, g)
					}
					f.Load = append(f.Load, scenario.LoadSpec{Node: node.name, GPUs: gpus})
					node.free -= used
				}
				nodes = append(nodes, node)
			}
			f.Domains = append(f.Domains, spec)
		}
	}
	rootKey := []string{"rack", "", topology.TopologyKeyCluster}[r.IntN(3)]
	root := treeSpec{Name: fmt.Sprintf("t%d", i), Key: rootKey}
	var leaves []bfLeaf
	for c := range 2 + r.IntN(3) {
		l := bfLeaf{key: []string{keyNVL, keyNVL, "", "rack"}[r.IntN(4)]}
		if rootKey == "rack" && l.key == "rack" {
			l.key = ""
		}
		for range 1 + r.IntN(2) {
			l.pods = append(l.pods, 1+r.IntN(4))
		}
		gs := &scenario.GangSpec{Pods: len(l.pods)}
		for _, g := range l.pods {
			gs.PodGPUs = append(gs.PodGPUs, scenario.PodGPUSpec{GPUs: int64(g)})
		}
		if r.IntN(5) == 0 {
			l.sel = fmt.Sprintf("s%d", r.IntN(2))
			gs.NodeSelector = map[string]string{"sel": l.sel}
		}
		root.Children = append(root.Children, treeSpec{Name: fmt.Sprintf("t%d-c%d", i, c), Key: l.key, Gang: gs})
		leaves = append(leaves, l)
	}
	root.Min = 1 + r.IntN(len(root.Children))
	f.Trees = []treeSpec{root}
	return f, nodes, rootKey, root.Min, leaves
}

// bruteForce returns the most children of the root that can be placed
// together, -1 when fewer than min can.
func bruteForce(nodes []bfNode, rootKey string, min int, leaves []bfLeaf) int {
	roots := []string{""}
	if rootKey == "rack" {
		roots = []string{"r0", "r1"}
	}
	best := -1
	for _, rack := range roots {
		for set := 1; set < 1<<len(leaves); set++ {
			n := popcount(set)
			if n < min || n <= best {
				continue
			}
			if fitsSet(nodes, rack, set, leaves) {
				best = n
			}
		}
	}
	return best
}

func popcount(x int) int {
	n := 0
	for ; x > 0; x &= x - 1 {
		n++
	}
	return n
}

// fitsSet tries every domain for each child in set, inside rack ("" any).
func fitsSet(nodes []bfNode, rack string, set int, leaves []bfLeaf) bool {
	var chosen []int
	for i := range leaves {
		if set&(1<<i) != 0 {
			chosen = append(chosen, i)
		}
	}
	allowed := make([][]int, len(leaves)) // node indexes per leaf
	places := make([]bfPlace, len(nodes))
	for i, n := range nodes {
		places[i] = bfPlace{nvl: n.nvl, rack: n.rack}
	}
	var try func(k int) bool
	try = func(k int) bool {
		if k == len(chosen) {
			return pack(nodes, chosen, allowed, leaves)
		}
		l := leaves[chosen[k]]
		for _, in := range leafChoices(places, rack, l.key, func(i int) bool { return l.sel == "" || nodes[i].sel == l.sel }) {
			allowed[chosen[k]] = in
			if try(k + 1) {
				return true
			}
		}
		return false
	}
	return try(0)
}

// bfPlace is where a brute-force node is: its NVLink domain and rack.
type bfPlace struct{ nvl, rack string }

// leafChoices lists the node sets a leaf of key may use inside rack (""
// any), one per domain of its level (one set without a key), each the
// indexes of places in that domain that admit takes, as the brute forces
// try them.
func leafChoices(places []bfPlace, rack, key string, admit func(i int) bool) [][]int {
	domains := []string{""}
	switch key {
	case keyNVL:
		domains = nil
		for _, p := range places {
			if !slices.Contains(domains, p.nvl) {
				domains = append(domains, p.nvl)
			}
		}
	case "rack":
		domains = []string{"r0", "r1"}
	}
	out := make([][]int, len(domains))
	for di, d := range domains {
		for i, p := range places {
			in := (rack == "" || p.rack == rack) && admit(i)
			switch key {
			case keyNVL:
				in = in && p.nvl == d
			case "rack":
				in = in && p.rack == d
			}
			if in {
				out[di] = append(out[di], i)
			}
		}
	}
	return out
}

// pack puts every pod of the chosen leaves on an allowed node with room.
func pack(nodes []bfNode, chosen []int, allowed [][]int, leaves []bfLeaf) bool {
	type pod struct{ leaf, gpus int }
	var pods []pod
	for _, li := range chosen {
		for _, g := range leaves[li].pods {
			pods = append(pods, pod{li, g})
		}
	}
	slices.SortFunc(pods, func(a, b pod) int { return b.gpus - a.gpus })
	free := make([]int, len(nodes))
	for i, n := range nodes {
		free[i] = n.free
	}
	var put func(k int) bool
	put = func(k int) bool {
		if k == len(pods) {
			return true
		}
		for _, ni := range allowed[pods[k].leaf] {
			if free[ni] >= pods[k].gpus {
				free[ni] -= pods[k].gpus
				if put(k + 1) {
					return true
				}
				free[ni] += pods[k].gpus
			}
		}
		return false
	}
	return put(0)
}

// TestRandomTreesVsBruteForce: 400 random trees (100 with -short).
func TestRandomTreesVsBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 6012))
	cases, placed, searched, partial := 400, 0, 0, 0
	if testing.Short() {
		cases = 100
	}
	ctx := context.Background()
	for i := range cases {
		f, nodes, rootKey, min, leaves := randomTreeCase(r, i)
		want := bruteForce(nodes, rootKey, min, leaves)
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
			placed++
			if d.Stats.Searches > 0 {
				searched++
			}
			if got < len(leaves) {
				partial++
			}
		}
		if got != want {
			msg := ""
			if u != nil {
				msg = u.Message
			}
			t.Errorf("case %d: placed %d children, brute force %d (min %d, root key %q, leaves %+v, nodes %+v): %s", i, got, want, min, rootKey, leaves, nodes, msg)
		}
	}
	t.Logf("%d cases: %d placed (%d with the joint search, %d partly: fewer children than asked), %d refused", cases, placed, searched, partial, cases-placed)
}
