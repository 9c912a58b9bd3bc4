package placement_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// randomSegmentCase builds a small random cluster of NVLink domains (1-4
// nodes of 1-4 GPUs, random GPU and cpu load, some tainted, some with
// device taints on all GPUs of some nodes, some without a rack label) and one segmented gang: segments of 1-3 identical pods in
// one NVLink domain or one rack, the gang in one rack or anywhere, minCount
// sometimes below its size.
func randomSegmentCase(r *rand.Rand, maxNodes int) (scenario.Scenario, []bfNode) {
	taint := v1.Taint{Key: "maint", Value: "x", Effect: v1.TaintEffectNoSchedule}
	sc := scenario.Scenario{Levels: []string{"rack"}}
	var nodes []bfNode
	total := 1 + r.IntN(maxNodes)
	for di := 0; total > 0; di++ {
		n := 1 + r.IntN(min(total, 4))
		total -= n
		d := scenario.DomainSpec{ID: fmt.Sprintf("d%d", di), Nodes: n, GPUsPerNode: 1 + r.IntN(4), CPU: "8", Labels: map[string]string{}}
		rack := ""
		if r.IntN(6) > 0 {
			rack = fmt.Sprintf("r%d", r.IntN(2))
			d.Labels["rack"] = rack
		}
		if r.IntN(6) == 0 {
			d.Taints = []v1.Taint{taint}
		}
		if r.IntN(3) == 0 { // unhealthy trays: the counts do not see device taints
			d.DeviceTaint = "gpufabric.dev/nvlink-degraded"
			for i := range n {
				if r.IntN(2) == 0 {
					d.TaintedNodes = append(d.TaintedNodes, i)
				}
			}
		}
		sc.Domains = append(sc.Domains, d)
		for i := range n {
			bn := bfNode{domain: d.ID, rack: rack, freeGPUs: d.GPUsPerNode, freeMilliCPU: 8000, tainted: d.Taints != nil}
			if slices.Contains(d.TaintedNodes, i) {
				bn.freeGPUs = 0 // and the load below takes none of them
			}
			loadCPU := r.IntN(6)
			load := scenario.LoadSpec{Node: scenario.NodeName(d.ID, i), CPU: fmt.Sprintf("%d", loadCPU)}
			bn.freeMilliCPU -= 1000 * int64(loadCPU)
			for g := range d.GPUsPerNode {
				if r.IntN(3) == 0 && bn.freeGPUs > 0 {
					load.GPUs = append(load.GPUs, g)
					bn.freeGPUs--
				}
			}
			sc.Load = append(sc.Load, load)
			nodes = append(nodes, bn)
		}
	}
	size := 1 + r.IntN(3)
	segments := 1 + r.IntN(3)
	g := scenario.GangSpec{Name: "g", Pods: size * segments, GPUsPerPod: int64(1 + r.IntN(2)), CPU: fmt.Sprintf("%d", 1+r.IntN(2)),
		SegmentSize: size, SegmentTopologyKey: topology.TopologyKeyNVLinkDomain}
	if r.IntN(3) == 0 {
		g.SegmentTopologyKey = "rack"
	} else if r.IntN(2) == 0 {
		g.TopologyKey = "rack"
	}
	if r.IntN(3) == 0 {
		g.MinCount = 1 + r.IntN(g.Pods)
	}
	if r.IntN(2) == 0 {
		g.Tolerations = []v1.Toleration{{Key: "maint", Operator: v1.TolerationOpExists}}
	}
	sc.Gangs = []scenario.GangSpec{g}
	return sc, nodes
}

// bruteForceSegments reports whether some domain of the gang's level holds
// at least ⌈minCount/size⌉ whole segments: per domain of the segment level
// inside it, the most segments its nodes take (every split of the pods
// over them), summed; the domains of the segment level answer
// independently, their nodes being disjoint.
func bruteForceSegments(g scenario.GangSpec, nodes []bfNode) bool {
	cpu := 1000 * int64(g.CPU[0]-'0')
	segments := g.Pods / g.SegmentSize
	need := segments
	if g.MinCount > 0 {
		need = (g.MinCount + g.SegmentSize - 1) / g.SegmentSize
	}
	groups := map[string]map[string][]bfNode{} // gang domain → segment domain → nodes
	for _, n := range nodes {
		if n.tainted && g.Tolerations == nil {
			continue
		}
		outer, inner := "cluster", n.domain
		if g.TopologyKey == "rack" {
			outer = n.rack
		}
		if g.SegmentTopologyKey == "rack" {
			inner = n.rack
		}
		if outer == "" || inner == "" {
			continue // no domain of that level
		}
		if groups[outer] == nil {
			groups[outer] = map[string][]bfNode{}
		}
		groups[outer][inner] = append(groups[outer][inner], n)
	}
	for _, bins := range groups {
		held := 0
		for _, bin := range bins {
			k := 0
			for k < segments && assign(bin, (k+1)*g.SegmentSize, int(g.GPUsPerPod), cpu) {
				k++
			}
			held += k
		}
		if held >= need {
			return true
		}
	}
	return false
}

// TestRandomSegmentsVsBruteForce: on small random clusters a segmented
// gang is placed iff brute force finds enough whole segments in one
// domain, and every placement is valid (placementtest checks that each
// placed segment is whole and in one domain of its level).
func TestRandomSegmentsVsBruteForce(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(25, 2))
	cases := 500
	if testing.Short() {
		cases = 150
	}
	placed := 0
	for i := range cases {
		sc, nodes := randomSegmentCase(r, 10)
		b, snap := buildCompared(ctx, t, sc)
		d, u, err := placement.Place(ctx, b.Config, snap, b.Gangs[0])
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		want := bruteForceSegments(sc.Gangs[0], nodes)
		if got := d != nil; got != want {
			t.Fatalf("case %d: placed = %v, brute force %v\nscenario: %+v\nunschedulable: %+v", i, got, want, sc, u)
		}
		if d != nil {
			placed++
			if err := placementtest.NewChecker(b.Input).Check(b.Gangs[0], d); err != nil {
				t.Fatalf("case %d: invalid decision: %v\nscenario: %+v", i, err, sc)
			}
		}
	}
	t.Logf("%d of %d random segmented gangs placed", placed, cases)
}
