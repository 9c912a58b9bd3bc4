package placement_test

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// hNode is a node as the heterogeneous brute force sees it: free GPUs per
// NUMA node (the first half of its GPUs are on NUMA 0, the rest on 1).
type hNode struct {
	bfNode
	numa [2]int
}

// randomHeteroCase builds a small random cluster (at most maxNodes nodes
// with 2, 4, 6 or 8 GPUs on two NUMA nodes, random GPU and cpu load,
// taints, fabric channels) and one heterogeneous gang: up to 6 pods asking
// 1..4 GPUs each, some all on one NUMA node (matchAttribute), sometimes a
// minCount below the gang's size.
func randomHeteroCase(r *rand.Rand, maxNodes int) (scenario.Scenario, []hNode) {
	taint := v1.Taint{Key: "maint", Value: "x", Effect: v1.TaintEffectNoSchedule}
	sc := scenario.Scenario{Levels: []string{"rack"}}
	var nodes []hNode
	total := 1 + r.IntN(maxNodes)
	for di := 0; total > 0; di++ {
		n := 1 + r.IntN(total)
		total -= n
		gpus := 2 * (1 + r.IntN(4))
		d := scenario.DomainSpec{
			ID: fmt.Sprintf("d%d", di), Nodes: n, GPUsPerNode: gpus, CPU: "8",
			Labels: map[string]string{"rack": fmt.Sprintf("r%d", r.IntN(2))}, Channels: r.IntN(2),
		}
		for g := range gpus {
			d.NUMA = append(d.NUMA, int64(2*g/gpus))
		}
		if r.IntN(5) == 0 {
			d.Taints = []v1.Taint{taint}
		}
		sc.Domains = append(sc.Domains, d)
		for i := range n {
			hn := hNode{bfNode: bfNode{domain: d.ID, rack: d.Labels["rack"], freeGPUs: gpus, freeMilliCPU: 8000, tainted: d.Taints != nil, channels: d.Channels}}
			hn.numa = [2]int{gpus / 2, gpus / 2}
			loadCPU := r.IntN(5)
			load := scenario.LoadSpec{Node: scenario.NodeName(d.ID, i), CPU: fmt.Sprintf("%d", loadCPU)}
			hn.freeMilliCPU -= 1000 * int64(loadCPU)
			for g := range gpus {
				if r.IntN(3) == 0 {
					load.GPUs = append(load.GPUs, g)
					hn.numa[2*g/gpus]--
				}
			}
			hn.freeGPUs = hn.numa[0] + hn.numa[1]
			sc.Load = append(sc.Load, load)
			nodes = append(nodes, hn)
		}
	}
	g := scenario.GangSpec{Name: "g", CPU: fmt.Sprintf("%d", 1+r.IntN(3)), FabricClaim: r.IntN(4) == 0}
	g.PodGPUs = randomPods(r)
	randomHeteroGang(r, &g)
	if r.IntN(2) == 0 {
		g.PodGPUs, g.TopologyKey = packedPods(r, nodes), topology.TopologyKeyNVLinkDomain
		g.MinCount = min(g.MinCount, len(g.PodGPUs))
	}
	sc.Gangs = []scenario.GangSpec{g}
	return sc, nodes
}

// randomPods draws 1 to 6 pods asking 1..4 GPUs, a quarter of them 2..4
// GPUs on one NUMA node.
func randomPods(r *rand.Rand) []scenario.PodGPUSpec {
	var out []scenario.PodGPUSpec
	for range 1 + r.IntN(6) {
		pg := scenario.PodGPUSpec{GPUs: int64(1 + r.IntN(4))}
		if r.IntN(4) == 0 {
			pg = scenario.PodGPUSpec{GPUs: int64(2 + r.IntN(3)), SameNUMA: true}
		}
		out = append(out, pg)
	}
	return out
}

// packedPods cuts the free GPUs of the largest domain's nodes into pods (at
// most 6; a pod on one NUMA node when it fits in one's GPUs left, half the
// time) and
// shuffles them; the gang is kept in one NVLink domain. When the pods
// cover the domain, the gang fits it exactly by GPUs, so rank order and
// first fit dead-end often.
func packedPods(r *rand.Rand, nodes []hNode) []scenario.PodGPUSpec {
	size := map[string]int{}
	largest := nodes[0].domain
	for _, n := range nodes {
		if size[n.domain]++; size[n.domain] > size[largest] {
			largest = n.domain
		}
	}
	var out []scenario.PodGPUSpec
	for _, n := range nodes {
		if n.domain != largest {
			continue
		}
		numa := n.numa
		for free := n.freeGPUs; free > 0 && len(out) < 6; {
			k := 1 + r.IntN(free)
			pg := scenario.PodGPUSpec{GPUs: int64(k)}
			if side := r.IntN(2); k > 1 && numa[side] >= k {
				pg.SameNUMA, numa[side] = true, numa[side]-k
			} else {
				numa[0], numa[1] = takeAny(numa, k)
			}
			out = append(out, pg)
			free -= k
		}
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	if len(out) == 0 {
		out = []scenario.PodGPUSpec{{GPUs: 1}}
	}
	return out
}

// takeAny takes k GPUs from the NUMA nodes, the first one first.
func takeAny(numa [2]int, k int) (int, int) {
	a := min(numa[0], k)
	return numa[0] - a, numa[1] - (k - a)
}

// randomHeteroGang sets the gang's minCount (a quarter of the time),
// topology key and tolerations.
func randomHeteroGang(r *rand.Rand, g *scenario.GangSpec) {
	if r.IntN(4) == 0 {
		g.MinCount = 1 + r.IntN(len(g.PodGPUs))
	}
	switch r.IntN(4) {
	case 0, 1:
		g.TopologyKey = topology.TopologyKeyNVLinkDomain
	case 2:
		g.TopologyKey = "rack"
	}
	if r.IntN(2) == 0 {
		g.Tolerations = []v1.Toleration{{Key: "maint", Operator: v1.TolerationOpExists}}
	}
}

// heteroBruteForce enumerates every assignment of the gang's pods to the
// nodes of each possible domain (a pod may be left out while at least
// minCount are placed) and reports whether one fits.
func heteroBruteForce(g scenario.GangSpec, nodes []hNode) bool {
	groups := map[string][]hNode{}
	for _, n := range nodes {
		if group, ok := groupOf(g, n.bfNode); ok {
			groups[group] = append(groups[group], n)
		}
	}
	need := len(g.PodGPUs)
	if g.MinCount > 0 {
		need = g.MinCount
	}
	cpu := 1000 * int64(g.CPU[0]-'0')
	for _, members := range groups {
		on := make([][]scenario.PodGPUSpec, len(members))
		if assignHetero(g.PodGPUs, members, on, len(g.PodGPUs)-need, cpu) {
			return true
		}
	}
	return false
}

// assignHetero puts the first pod on every node where it fits with the
// pods already there (or leaves it out while skips last), recursively.
func assignHetero(pods []scenario.PodGPUSpec, nodes []hNode, on [][]scenario.PodGPUSpec, skips int, cpu int64) bool {
	if len(pods) == 0 {
		return true
	}
	for i, n := range nodes {
		with := append(on[i][:len(on[i]):len(on[i])], pods[0])
		if int64(len(with))*cpu > n.freeMilliCPU || !fitsNUMA(n, with) {
			continue
		}
		prev := on[i]
		on[i] = with
		if assignHetero(pods[1:], nodes, on, skips, cpu) {
			return true
		}
		on[i] = prev
	}
	return skips > 0 && assignHetero(pods[1:], nodes, on, skips-1, cpu)
}

// fitsNUMA: the pods fit on the node when the same-NUMA pods can be spread
// over its NUMA nodes within their free GPUs and all pods within the
// node's free GPUs (the others take any GPU left).
func fitsNUMA(n hNode, pods []scenario.PodGPUSpec) bool {
	var numa []int
	total := 0
	for _, p := range pods {
		total += int(p.GPUs)
		if p.SameNUMA {
			numa = append(numa, int(p.GPUs))
		}
	}
	if total > n.freeGPUs {
		return false
	}
	for mask := range 1 << len(numa) {
		var used [2]int
		for j, k := range numa {
			used[mask>>j&1] += k
		}
		if used[0] <= n.numa[0] && used[1] <= n.numa[1] {
			return true
		}
	}
	return false
}

// heteroTally sums up TestRandomHeterogeneousVsBruteForce.
type heteroTally struct {
	cases, feasible, placed, needed, searched, cutoffs, calls int
	slowest, slowestCPU                                       time.Duration
}

func (h heteroTally) String() string {
	return fmt.Sprintf("%d of %d random heterogeneous gangs feasible, %d placed (%d of them not by the greedy fill alone; %d ran the search, %d budget cutoffs); slowest Place %v wall, %v thread CPU; most Allocate calls %d",
		h.feasible, h.cases, h.placed, h.needed, h.searched, h.cutoffs, h.slowest, h.slowestCPU, h.calls)
}

// TestRandomHeterogeneousVsBruteForce: on random clusters of up to 8
// nodes, a heterogeneous gang (GPU counts differ per pod, some pods need
// their GPUs on one NUMA node) is placed iff brute force finds a placement,
// every placement is valid (placementtest.Checker checks the NUMA
// constraints too), and no search runs out of budget (a cutoff fails the
// test even where the answer agrees).
func TestRandomHeterogeneousVsBruteForce(t *testing.T) {
	runtime.LockOSThread() // threadCPU measures this thread
	defer runtime.UnlockOSThread()
	r := rand.New(rand.NewPCG(5, 2))
	h := heteroTally{cases: 400}
	if testing.Short() {
		h.cases = 100
	}
	for i := range h.cases {
		sc, nodes := randomHeteroCase(r, 8)
		if err := h.run(t, sc, nodes); err != nil {
			t.Errorf("case %d: %v\nscenario: %+v", i, err, sc)
		}
	}
	if h.cutoffs > 0 {
		t.Errorf("%d searches ran out of budget", h.cutoffs)
	}
	t.Log(h)
}

// run places one case's gang, compares with brute force and counts.
func (h *heteroTally) run(t *testing.T, sc scenario.Scenario, nodes []hNode) error {
	ctx := context.Background()
	b, err := scenario.Build(sc)
	if err != nil {
		t.Fatal(err)
	}
	// A loaded machine can stretch a call past the default 100 ms timeout,
	// which counts as "does not fit": not what this tests.
	b.Config.Index.AllocateTimeout = time.Second
	snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	start, cpu := time.Now(), threadCPU()
	d, u, err := placement.Place(ctx, b.Config, snap, b.Gangs[0])
	h.slowest, h.slowestCPU = max(h.slowest, time.Since(start)), max(h.slowestCPU, threadCPU()-cpu)
	if err != nil {
		t.Fatal(err)
	}
	st := statsOf(d, u)
	h.calls, h.cutoffs = max(h.calls, st.AllocateCalls), h.cutoffs+st.SearchCutoffs
	if st.Searches > 0 {
		h.searched++
	}
	want := heteroBruteForce(sc.Gangs[0], nodes)
	if want {
		h.feasible++
	}
	if got := d != nil; got != want {
		return fmt.Errorf("placed = %v, brute force %v (searches %d, budget cutoffs %d)\nunschedulable: %+v", got, want, st.Searches, st.SearchCutoffs, u)
	}
	if d == nil {
		return nil
	}
	h.placed++
	if !placedGreedy(ctx, t, b) {
		h.needed++
	}
	if err := placementtest.NewChecker(b.Input).Check(b.Gangs[0], d); err != nil {
		return fmt.Errorf("invalid decision: %w", err)
	}
	return nil
}

func statsOf(d *placement.Decision, u *placement.Unschedulable) placement.Stats {
	if d != nil {
		return d.Stats
	}
	return u.Stats
}

// placedGreedy reports whether the engine without the search places the
// gang too.
func placedGreedy(ctx context.Context, t *testing.T, b *scenario.Built) bool {
	t.Helper()
	snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.Config
	placement.GreedyOnly(&cfg)
	d, _, err := placement.Place(ctx, cfg, snap, b.Gangs[0])
	if err != nil {
		t.Fatal(err)
	}
	return d != nil
}
