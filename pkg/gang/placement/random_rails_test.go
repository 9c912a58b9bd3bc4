package placement_test

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// rNode is a node as the rail brute force sees it: the rail of each GPU
// and whether it is free, the free NICs by rail, and free cpu.
type rNode struct {
	domain   string
	gpuRail  []int64
	gpuFree  []bool
	nicFree  map[int64]int
	milliCPU int64
}

// randomRailCase builds a small random cluster for a gang that requires
// rail alignment: at most maxNodes nodes in random NVLink domains, each
// domain with 1 or 2 GPUs per IB rail (at most 8 GPUs, the rails a random
// choice of 0..7 in a random GPU order), half of them with one NIC per
// rail; random busy GPUs, NICs and cpu. The gang has 1 to 6 pods asking 1
// to 4 GPUs, half of the time 1 or 2 NICs (at most as many as GPUs; in the
// GPU claim or a claim of its own), in one NVLink domain or anywhere.
func randomRailCase(r *rand.Rand, maxNodes int) (scenario.Scenario, []rNode) {
	sc := scenario.Scenario{}
	var nodes []rNode
	total := 1 + r.IntN(maxNodes)
	for di := 0; total > 0; di++ {
		n := 1 + r.IntN(total)
		total -= n
		perRail := 1 + r.IntN(2)
		railIDs := r.Perm(8)[:1+r.IntN(8/perRail)]
		var rails []int64
		for _, id := range railIDs {
			for range perRail {
				rails = append(rails, int64(id))
			}
		}
		r.Shuffle(len(rails), func(i, j int) { rails[i], rails[j] = rails[j], rails[i] })
		d := scenario.DomainSpec{ID: fmt.Sprintf("d%d", di), Nodes: n, GPUsPerNode: len(rails), Rails: rails, CPU: "8"}
		if r.IntN(2) == 0 {
			d.NICsPerNode = len(railIDs)
			for _, id := range railIDs {
				d.NICRails = append(d.NICRails, int64(id))
			}
		}
		sc.Domains = append(sc.Domains, d)
		for i := range n {
			rn := rNode{domain: d.ID, gpuRail: rails, gpuFree: make([]bool, len(rails)), nicFree: map[int64]int{}}
			load := scenario.LoadSpec{Node: scenario.NodeName(d.ID, i), CPU: fmt.Sprint(r.IntN(5))}
			rn.milliCPU = 8000 - 1000*int64(load.CPU[0]-'0')
			for g := range rails {
				if rn.gpuFree[g] = r.IntN(3) != 0; !rn.gpuFree[g] {
					load.GPUs = append(load.GPUs, g)
				}
			}
			for k, rail := range d.NICRails {
				if r.IntN(3) == 0 {
					load.NICs = append(load.NICs, k)
				} else {
					rn.nicFree[rail]++
				}
			}
			sc.Load = append(sc.Load, load)
			nodes = append(nodes, rn)
		}
	}
	g := scenario.GangSpec{Name: "g", Pods: 1 + r.IntN(6), GPUsPerPod: int64(1 + r.IntN(4)), CPU: fmt.Sprint(1 + r.IntN(3)),
		RailAlignment: topology.RailAlignmentRequired}
	if r.IntN(2) == 0 { // NICs ≤ GPUs: the GPUs lead (the main class)
		g.NICsPerPod, g.SeparateNICClaim = min(int64(1+r.IntN(2)), g.GPUsPerPod), r.IntN(2) == 0
	}
	if r.IntN(2) == 0 {
		g.TopologyKey = topology.TopologyKeyNVLinkDomain
	}
	sc.Gangs = []scenario.GangSpec{g}
	return sc, nodes
}

// railBruteForce reports whether the gang fits with every member on one
// set of rails R: for some group of nodes (an NVLink domain, or the
// cluster without a topology key) and some R, the members that fit on
// its nodes add up to the gang, where members fit on a node when each
// takes free GPUs whose rails are exactly R, NICs on rails of R, and cpu
// (maxRailMembers, by enumeration of the GPUs they take).
func railBruteForce(g scenario.GangSpec, nodes []rNode) bool {
	groups := map[string][]rNode{}
	for _, n := range nodes {
		key := "cluster"
		if g.TopologyKey != "" {
			key = n.domain
		}
		groups[key] = append(groups[key], n)
	}
	cpu := 1000 * int64(g.CPU[0]-'0')
	for _, group := range groups {
		for rails := 1; rails < 1<<8; rails++ {
			fit := 0
			for _, n := range group {
				fit += maxRailMembers(n, rails, int(g.GPUsPerPod), int(g.NICsPerPod), cpu)
			}
			if fit >= g.Pods {
				return true
			}
		}
	}
	return false
}

// maxRailMembers is the most members that fit on a node using exactly the
// rails (a bit mask): GPU subsets enumerated, memoized on the free GPUs.
func maxRailMembers(n rNode, rails, gpus, nics int, cpu int64) int {
	nicRoom := 0
	for rail, c := range n.nicFree {
		if rails&(1<<rail) != 0 {
			nicRoom += c
		}
	}
	free := 0
	for i, f := range n.gpuFree {
		if f {
			free |= 1 << i
		}
	}
	memo := map[int]int{}
	var best func(free, placed int) int
	best = func(free, placed int) int {
		if v, ok := memo[free]; ok {
			return v
		}
		most := 0
		if int64(placed+1)*cpu <= n.milliCPU && (placed+1)*nics <= nicRoom {
			for sub := free; sub > 0; sub = (sub - 1) & free {
				if bits.OnesCount(uint(sub)) != gpus || railMask(n, sub) != rails {
					continue
				}
				most = max(most, 1+best(free&^sub, placed+1))
			}
		}
		memo[free] = most
		return most
	}
	return best(free, 0)
}

func railMask(n rNode, gpus int) int {
	m := 0
	for i, rail := range n.gpuRail {
		if gpus&(1<<i) != 0 {
			m |= 1 << rail
		}
	}
	return m
}

// TestRandomRailsVsBruteForce: on small random clusters with 1 or 2 GPUs
// per IB rail, random load and NICs, a gang requiring rail alignment is
// placed iff brute force finds an aligned placement, every placement is
// valid (placementtest.Checker: one rail set, NICs on their GPUs' rails),
// and no rail search runs out of its budget. It also counts the feasible
// gangs that the old rule (four most used rail sets, NICs by first fit)
// leaves unplaced or misplaced.
func TestRandomRailsVsBruteForce(t *testing.T) {
	ctx := context.Background()
	runtime.LockOSThread() // threadCPU measures this thread
	defer runtime.UnlockOSThread()
	r := rand.New(rand.NewPCG(5, 2))
	cases := 400
	if testing.Short() {
		cases = 100
	}
	feasible, refilled, oldMissed, maxCalls := 0, 0, 0, 0
	var slowest, slowestCPU time.Duration
	for i := range cases {
		sc, nodes := randomRailCase(r, 6)
		want := railBruteForce(sc.Gangs[0], nodes)
		b, err := scenario.Build(sc)
		if err != nil {
			t.Fatal(err)
		}
		for _, old := range []bool{false, true} {
			snap := comparedSnapshot(ctx, t, b)
			cfg := b.Config
			if old {
				placement.OldRails(&cfg)
			}
			start, cpu := time.Now(), threadCPU()
			d, u, err := placement.Place(ctx, cfg, snap, b.Gangs[0])
			wall, cpu := time.Since(start), threadCPU()-cpu
			if err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
			var bad error
			if d != nil {
				bad = placementtest.NewChecker(b.Input).Check(b.Gangs[0], d)
			}
			if old {
				if want && (d == nil || bad != nil) {
					oldMissed++
				}
				continue
			}
			slowest, slowestCPU = max(slowest, wall), max(slowestCPU, cpu)
			if got := d != nil; got != want {
				t.Fatalf("case %d: placed = %v, brute force %v\nscenario: %+v\nunschedulable: %+v", i, got, want, sc, u)
			}
			stats := placement.Stats{}
			if d != nil {
				stats = d.Stats
				feasible++
			} else {
				stats = u.Stats
			}
			if bad != nil {
				t.Fatalf("case %d: invalid decision: %v\nscenario: %+v", i, bad, sc)
			}
			if stats.RailCutoffs > 0 || stats.SearchCutoffs > 0 {
				t.Fatalf("case %d: rail cutoffs %d, search cutoffs %d\nscenario: %+v", i, stats.RailCutoffs, stats.SearchCutoffs, sc)
			}
			if d != nil && d.Stats.RailRefills > 0 {
				refilled++
			}
			maxCalls = max(maxCalls, stats.AllocateCalls)
		}
	}
	t.Logf("%d of %d gangs placed (brute force agrees), %d of them by a rail refill; the old rule misses %d; most Allocate calls %d; slowest Place %v wall, %v thread CPU",
		feasible, cases, refilled, oldMissed, maxCalls, slowest, slowestCPU)
}
