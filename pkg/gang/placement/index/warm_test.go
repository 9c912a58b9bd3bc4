package index_test

import (
	"context"
	"errors"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestWarm checks that Warm builds every level index of a class ahead of
// Place (the first gang builds none), that snapshots Cache.Update derives
// keep them, that it changes no decision, and that it skips unknown
// classes and stops when its context is done.
func TestWarm(t *testing.T) {
	ctx := context.Background()
	specs := []scenario.GangSpec{
		{Name: "small", Pods: 3, GPUsPerPod: 1},
		{Name: "rack", Pods: 6, GPUsPerPod: 4, TopologyKey: "rack"},
		{Name: "big", Pods: 24, GPUsPerPod: 8},
	}
	sc := scenario.HGXScenario(256, 3)
	built, err := scenario.Build(sc)
	if err != nil {
		t.Fatal(err)
	}
	cache := index.NewCache(built.Config.Index)
	placementtest.FeedCache(cache, built.Input)
	warmed, err := cache.Update(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := warmed.LevelIndexes(); got != 0 {
		t.Fatalf("a new snapshot has %d level indexes, want 0", got)
	}
	n, err := warmed.Warm(ctx, []string{"no-such-class", topology.GPUDeviceClass})
	if err != nil || n != 1 {
		t.Fatalf("Warm = %d, %v; want 1 class, no error", n, err)
	}
	levels := len(warmed.Tree().Levels)
	if got := warmed.LevelIndexes(); got != levels {
		t.Fatalf("after Warm: %d level indexes, want one per tree level (%d)", got, levels)
	}
	// A node changes; the derived snapshot keeps the indexes.
	cache.SetNode(built.Input.Nodes[0].DeepCopy())
	if warmed, err = cache.Update(ctx, warmed); err != nil {
		t.Fatal(err)
	}
	cold, err := index.NewSnapshot(ctx, built.Config.Index, built.Input)
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range specs {
		g1, _, err := scenario.BuildGang(spec)
		if err != nil {
			t.Fatal(err)
		}
		g2, _, _ := scenario.BuildGang(spec)
		d1, u1, err1 := placement.Place(ctx, built.Config, warmed, g1)
		d2, u2, err2 := placement.Place(ctx, built.Config, cold, g2)
		if err1 != nil || err2 != nil || d1 == nil || d2 == nil {
			t.Fatalf("%s: place: %v %v / %v %v", spec.Name, err1, u1, err2, u2)
		}
		if diff := cmp.Diff(d2, d1, cmpopts.IgnoreFields(placement.Stats{}, "MaxAllocate")); diff != "" {
			t.Fatalf("%s: decision differs (-cold +warmed):\n%s", spec.Name, diff)
		}
		if got := warmed.LevelIndexes(); got != levels {
			t.Fatalf("%s: Place on the warmed snapshot built level indexes: %d, want %d", spec.Name, got, levels)
		}
	}
	if cold.LevelIndexes() == 0 {
		t.Fatal("Place on the cold snapshot built no level index: the check above proves nothing")
	}

	stopped, err := index.NewSnapshot(ctx, built.Config.Index, built.Input)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if n, err := stopped.Warm(cctx, []string{topology.GPUDeviceClass}); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Warm with a done context = %d, %v; want 0 and context.Canceled", n, err)
	}
}
