package placement_test

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// searchBenchCase is a heterogeneous gang that dead-ends the greedy fill
// on a cluster of nodes with 8 GPUs on two NUMA nodes (4 + 4), in one
// NVLink domain.
type searchBenchCase struct {
	name string
	// load returns the busy GPUs of node i; pods the gang for n nodes.
	load func(i int) []int
	pods func(n int) []scenario.PodGPUSpec
}

var searchBenchCases = []searchBenchCase{
	{
		// Bin packing: nodes with 5 and 6 free GPUs in turn, members
		// [3, 3, 5] repeated: the only placement puts 3 + 3 on every
		// 6-node and 5 on every 5-node (no GPU left).
		name: "binpack",
		load: func(i int) []int { return []int{0, 1, 2}[:3-i%2] },
		pods: func(n int) []scenario.PodGPUSpec {
			var out []scenario.PodGPUSpec
			for range n / 2 {
				out = append(out, scenario.PodGPUSpec{GPUs: 3}, scenario.PodGPUSpec{GPUs: 3}, scenario.PodGPUSpec{GPUs: 5})
			}
			return out
		},
	},
	{
		// NUMA: every node has 4 free GPUs on NUMA 0 and 2 on NUMA 1;
		// members [2 GPUs, 4 GPUs on one NUMA node] repeated, one pair
		// per node: first fit gives the 2 the NUMA 0 GPUs.
		name: "numa",
		load: func(int) []int { return []int{4, 5} },
		pods: func(n int) []scenario.PodGPUSpec {
			var out []scenario.PodGPUSpec
			for range n {
				out = append(out, scenario.PodGPUSpec{GPUs: 2}, scenario.PodGPUSpec{GPUs: 4, SameNUMA: true})
			}
			return out
		},
	},
}

func (c searchBenchCase) build(b *testing.B, nodes int) *scenario.Built {
	b.Helper()
	sc := scenario.Scenario{Domains: []scenario.DomainSpec{{ID: "a", Nodes: nodes, GPUsPerNode: 8, NUMA: []int64{0, 0, 0, 0, 1, 1, 1, 1}}}}
	for i := range nodes {
		sc.Load = append(sc.Load, scenario.LoadSpec{Node: scenario.NodeName("a", i), GPUs: c.load(i)})
	}
	sc.Gangs = []scenario.GangSpec{{Name: "g", TopologyKey: topology.TopologyKeyNVLinkDomain, PodGPUs: c.pods(nodes)}}
	built, err := scenario.Build(sc)
	if err != nil {
		b.Fatal(err)
	}
	// On a loaded machine a call can exceed the default 100 ms timeout,
	// which counts as "does not fit" and derails the placement.
	built.Config.Index.AllocateTimeout = time.Second
	return built
}

// BenchmarkSearch places heterogeneous gangs that only the search places
// (checked: the greedy fill alone refuses them) on 64 to 512 nodes, and
// reports Place's time with the allocator calls and search steps it took.
//
//	go test ./pkg/gang/placement -run '^$' -bench Search -benchtime 20x
func BenchmarkSearch(b *testing.B) {
	ctx := context.Background()
	for _, c := range searchBenchCases {
		for _, nodes := range []int{64, 512} {
			b.Run(fmt.Sprintf("%s/nodes=%d", c.name, nodes), func(b *testing.B) {
				built := c.build(b, nodes)
				if d := placeGreedy(ctx, b, built); d != nil {
					b.Fatal("the greedy fill places the gang: the benchmark does not exercise the search")
				}
				snap, err := index.NewSnapshot(ctx, built.Config.Index, built.Input)
				if err != nil {
					b.Fatal(err)
				}
				var st placement.Stats
				var slowest time.Duration
				for b.Loop() {
					start := time.Now()
					d, u, err := placement.Place(ctx, built.Config, snap, built.Gangs[0])
					if err != nil || d == nil {
						b.Fatalf("place: %v %+v", err, u)
					}
					st, slowest = d.Stats, max(slowest, time.Since(start))
				}
				b.ReportMetric(float64(len(built.Gangs[0].Members)), "pods")
				b.ReportMetric(float64(st.AllocateCalls), "allocate-calls")
				b.ReportMetric(float64(st.SearchCalls), "search-calls")
				b.ReportMetric(float64(slowest.Microseconds())/1000, "max-ms")
			})
		}
	}
}

// placeGreedy places the gang with the search turned off.
func placeGreedy(ctx context.Context, b *testing.B, built *scenario.Built) *placement.Decision {
	b.Helper()
	snap, err := index.NewSnapshot(ctx, built.Config.Index, built.Input)
	if err != nil {
		b.Fatal(err)
	}
	cfg := built.Config
	placement.GreedyOnly(&cfg)
	d, _, err := placement.Place(ctx, cfg, snap, built.Gangs[0])
	if err != nil {
		b.Fatal(err)
	}
	return d
}
