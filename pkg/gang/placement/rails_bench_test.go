package placement_test

import (
	"context"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"slices"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// fragmentRails replaces the bench cluster's load
// (scenario.HGXScenario: HGX nodes, GPU i on rail i, 16 nodes per
// rack, 8 racks per leaf) so that
// every node has 4 free GPUs: in each leaf, the nodes in name order
// 0..104 have rails k..k+3 (mod 8) free for k = their position mod 7 (15
// nodes per set), and the last 23 have rails 1, 3, 5 and 7, the one set
// where 16 pods fit. A greedy fill of a leaf uses the first 16 nodes,
// whose most used rail sets have room for 15 pods each.
func fragmentRails(sc *scenario.Scenario) {
	for i := range sc.Load {
		rack, node := i/16, i%16
		j := (rack%8)*16 + node
		free := []int{1, 3, 5, 7}
		if j < 105 {
			k := j % 7
			free = []int{k, (k + 1) % 8, (k + 2) % 8, (k + 3) % 8}
		}
		sc.Load[i].GPUs = nil
		for g := range 8 {
			if !slices.Contains(free, g) {
				sc.Load[i].GPUs = append(sc.Load[i].GPUs, g)
			}
		}
	}
}

// BenchmarkRailRequired places a gang of 16 pods x 4 GPUs that requires
// rail alignment in one IB leaf (128 nodes) of the 5,000-node bench
// cluster, with the rail-set search and with the old rule (the four most
// used rail sets of the first fill; placement.OldRails) in the same run:
// on the bench cluster's random load ("random": the first fill is not
// aligned, 0-8 busy GPUs per node) and on fragmented rails
// (fragmentRails), where the old rule refuses every leaf. Reports p50/p99
// of Place (wall; this machine's thread CPU clock ticks in 4 ms, too
// coarse here), allocator calls, rail sets verified, and whether the gang
// was placed (the last decision checked by placementtest.Checker).
func BenchmarkRailRequired(b *testing.B) {
	for _, load := range []string{"random", "fragmented"} {
		for _, rule := range []string{"search", "old"} {
			b.Run(load+"/"+rule, func(b *testing.B) { benchRails(b, load == "fragmented", rule == "old") })
		}
	}
}

func benchRails(b *testing.B, fragmented, old bool) {
	ctx := context.Background()
	sc := scenario.HGXScenario(5000, 1)
	if fragmented {
		fragmentRails(&sc)
	}
	sc.Gangs = []scenario.GangSpec{{Name: "rails", Pods: 16, GPUsPerPod: 4, TopologyKey: "leaf", RailAlignment: topology.RailAlignmentRequired}}
	built, err := scenario.Build(sc)
	if err != nil {
		b.Fatal(err)
	}
	snap, err := index.NewSnapshot(ctx, built.Config.Index, built.Input)
	if err != nil {
		b.Fatal(err)
	}
	cfg := built.Config
	if old {
		placement.OldRails(&cfg)
	}
	g := built.Gangs[0]
	if _, _, err := placement.Place(ctx, cfg, snap, g); err != nil { // warm-up: class matching
		b.Fatal(err)
	}
	var lat []time.Duration
	var stats placement.Stats
	var last *placement.Decision
	for b.Loop() {
		t0 := time.Now()
		d, u, err := placement.Place(ctx, cfg, snap, g)
		lat = append(lat, time.Since(t0))
		switch {
		case err != nil:
			b.Fatal(err)
		case d != nil:
			stats, last = d.Stats, d
		default:
			stats, last = u.Stats, nil
		}
	}
	b.StopTimer()
	placed := 0.0
	if last != nil {
		if err := placementtest.NewChecker(built.Input).Check(g, last); err != nil {
			b.Fatalf("invalid decision: %v", err)
		}
		placed = 1
	}
	slices.Sort(lat)
	b.ReportMetric(percentile(lat, 0.5), "p50-ms")
	b.ReportMetric(percentile(lat, 0.99), "p99-ms")
	b.ReportMetric(float64(stats.AllocateCalls), "allocate-calls")
	b.ReportMetric(float64(stats.RailRefills), "rail-refills")
	b.ReportMetric(placed, "placed")
}
