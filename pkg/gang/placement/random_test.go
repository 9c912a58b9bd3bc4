package placement_test

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"math/rand/v2"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// bfNode is a node as the brute force sees it.
type bfNode struct {
	domain, rack string
	freeGPUs     int
	freeMilliCPU int64
	tainted      bool
	channels     int
}

// randomCase builds a small random cluster (at most maxNodes nodes, 4 GPUs
// each, random GPU and cpu occupancy, random taints and fabric channels)
// and one homogeneous gang; with alternatives, its pods ask for GPUs with
// two prioritized alternatives (firstAvailable [a, b], a > b).
func randomCase(r *rand.Rand, maxNodes int, alternatives bool) (scenario.Scenario, []bfNode) {
	taint := v1.Taint{Key: "maint", Value: "x", Effect: v1.TaintEffectNoSchedule}
	sc := scenario.Scenario{Levels: []string{"rack"}}
	var nodes []bfNode
	total := 1 + r.IntN(maxNodes)
	for di := 0; total > 0; di++ {
		n := 1 + r.IntN(total)
		total -= n
		d := scenario.DomainSpec{
			ID: fmt.Sprintf("d%d", di), Nodes: n, GPUsPerNode: 1 + r.IntN(4), CPU: "8",
			Labels: map[string]string{"rack": fmt.Sprintf("r%d", r.IntN(2))}, Channels: r.IntN(2),
		}
		if r.IntN(5) == 0 {
			d.Taints = []v1.Taint{taint}
		}
		sc.Domains = append(sc.Domains, d)
		for i := range n {
			bn := bfNode{domain: d.ID, rack: d.Labels["rack"], freeGPUs: d.GPUsPerNode, freeMilliCPU: 8000, tainted: d.Taints != nil, channels: d.Channels}
			loadCPU := r.IntN(5)
			load := scenario.LoadSpec{Node: scenario.NodeName(d.ID, i), CPU: fmt.Sprintf("%d", loadCPU)}
			bn.freeMilliCPU -= 1000 * int64(loadCPU)
			for g := range d.GPUsPerNode {
				if r.IntN(3) == 0 {
					load.GPUs = append(load.GPUs, g)
					bn.freeGPUs--
				}
			}
			sc.Load = append(sc.Load, load)
			nodes = append(nodes, bn)
		}
	}
	g := scenario.GangSpec{Name: "g", Pods: 1 + r.IntN(6), GPUsPerPod: int64(1 + r.IntN(3)), CPU: fmt.Sprintf("%d", 1+r.IntN(3)), FabricClaim: r.IntN(3) == 0}
	switch r.IntN(3) {
	case 0:
		g.TopologyKey = topology.TopologyKeyNVLinkDomain
	case 1:
		g.TopologyKey = "rack"
	}
	if r.IntN(2) == 0 {
		g.Tolerations = []v1.Toleration{{Key: "maint", Operator: v1.TolerationOpExists}}
	}
	if alternatives {
		first := int64(2 + r.IntN(3))
		g.FirstAvailable = []int64{first, 1 + r.Int64N(first-1)}
	}
	sc.Gangs = []scenario.GangSpec{g}
	return sc, nodes
}

// bruteForce enumerates every way to put the gang's identical pods on the
// nodes of each possible domain and reports whether one fits.
func bruteForce(g scenario.GangSpec, nodes []bfNode) bool {
	groups := map[string][]bfNode{}
	for _, n := range nodes {
		if group, ok := groupOf(g, n); ok {
			groups[group] = append(groups[group], n)
		}
	}
	cpu := 1000 * int64(g.CPU[0]-'0')
	sizes := []int{int(g.GPUsPerPod)}
	if len(g.FirstAvailable) > 0 {
		sizes = []int{int(g.FirstAvailable[0]), int(g.FirstAvailable[1])}
	}
	for _, members := range groups {
		if assignSizes(members, g.Pods, sizes, cpu) {
			return true
		}
	}
	return false
}

// groupOf returns the domain of the gang's level that holds the node, and
// whether the gang may use the node at all (taints, fabric channels).
func groupOf(g scenario.GangSpec, n bfNode) (string, bool) {
	if (n.tainted && g.Tolerations == nil) || (g.FabricClaim && n.channels == 0) {
		return "", false
	}
	switch {
	case g.FabricClaim || g.TopologyKey == topology.TopologyKeyNVLinkDomain:
		return n.domain, true // a fabric-domain claim pins to one NVLink domain
	case g.TopologyKey == "rack":
		return n.rack, true
	default:
		return "cluster", true
	}
}

// assignSizes tries every split of the pods on the first node among the
// GPU counts they may take, recursively.
func assignSizes(nodes []bfNode, pods int, sizes []int, cpu int64) bool {
	if len(sizes) == 1 {
		return assign(nodes, pods, sizes[0], cpu)
	}
	if pods == 0 {
		return true
	}
	if len(nodes) == 0 {
		return false
	}
	n := nodes[0]
	for c := 0; c <= pods && int64(c)*cpu <= n.freeMilliCPU; c++ {
		for big := 0; big <= c; big++ {
			if big*sizes[0]+(c-big)*sizes[1] <= n.freeGPUs && assignSizes(nodes[1:], pods-c, sizes, cpu) {
				return true
			}
		}
	}
	return false
}

// assign tries every count of pods on the first node, recursively.
func assign(nodes []bfNode, pods, gpus int, cpu int64) bool {
	if pods == 0 {
		return true
	}
	if len(nodes) == 0 {
		return false
	}
	for c := 0; c <= pods; c++ {
		if c*gpus > nodes[0].freeGPUs || int64(c)*cpu > nodes[0].freeMilliCPU {
			break
		}
		if assign(nodes[1:], pods-c, gpus, cpu) {
			return true
		}
	}
	return false
}

// TestRandomVsBruteForce: on small random clusters a homogeneous gang is
// placed iff brute force finds a placement, and every placement is valid.
func TestRandomVsBruteForce(t *testing.T) {
	testRandom(t, 1, 6, false)
}

// TestRandomAlternativesVsBruteForce is TestRandomVsBruteForce for gangs
// whose pods ask for GPUs with prioritized alternatives, on up to 8 nodes.
func TestRandomAlternativesVsBruteForce(t *testing.T) {
	testRandom(t, 3, 8, true)
}

func testRandom(t *testing.T, seed uint64, maxNodes int, alternatives bool) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 2))
	cases := 400
	if testing.Short() {
		cases = 100
	}
	placed := 0
	var slowest time.Duration
	for i := range cases {
		sc, nodes := randomCase(r, maxNodes, alternatives)
		b, snap := buildCompared(ctx, t, sc)
		start := time.Now()
		d, u, err := placement.Place(ctx, b.Config, snap, b.Gangs[0])
		slowest = max(slowest, time.Since(start))
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		want := bruteForce(sc.Gangs[0], nodes)
		if got := d != nil; got != want {
			t.Fatalf("case %d: placed = %v, brute force %v\nscenario: %+v\nunschedulable: %+v", i, got, want, sc, u)
		}
		if u != nil {
			if err := checkLargestFree(u, sc, nodes); err != nil {
				t.Fatalf("case %d: %v\nscenario: %+v\nmessage: %s", i, err, sc, u.Message)
			}
		}
		if d != nil {
			placed++
			if err := placementtest.NewChecker(b.Input).Check(b.Gangs[0], d); err != nil {
				t.Fatalf("case %d: invalid decision: %v\nscenario: %+v", i, err, sc)
			}
		}
	}
	t.Logf("%d of %d random gangs placed; slowest Place %v", placed, cases, slowest)
}

// checkLargestFree: a refusal's "largest free" at the NVLink-domain level
// is the most free GPUs any domain has, never a smaller one.
func checkLargestFree(u *placement.Unschedulable, sc scenario.Scenario, nodes []bfNode) error {
	free := map[string]int{}
	for _, n := range nodes {
		free[n.domain] += n.freeGPUs
	}
	most := 0
	for _, f := range free {
		most = max(most, f)
	}
	for _, l := range u.Levels {
		if l.TopologyKey == topology.TopologyKeyNVLinkDomain && l.Best != nil && l.Best.FreeDevices != most {
			return fmt.Errorf("largest free reported %d in %s, but a domain has %d", l.Best.FreeDevices, l.Best.ID, most)
		}
	}
	return nil
}
