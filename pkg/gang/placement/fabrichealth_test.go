package placement_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestLargeGangsAvoidSickFabric: domain "a" (4 nodes × 4 GPUs) fits a
// 16-GPU gang exactly, "b" (5 × 4) with 4 GPUs to spare; every node of "a"
// has a NIC tainted fabric-errors. Best fit alone picks "a"; a gang of at
// least LargeGangGPUs picks "b" and says why, a smaller gang still picks
// "a", and a large gang that only "a" has room for goes there and says so.
func TestLargeGangsAvoidSickFabric(t *testing.T) {
	sick := scenario.DomainSpec{ID: "a", Nodes: 4, GPUsPerNode: 4, NICsPerNode: 1, NICTaint: topology.TaintFabricErrors, TaintedNICs: []int{0}}
	healthy := scenario.DomainSpec{ID: "b", Nodes: 5, GPUsPerNode: 4, NICsPerNode: 1}
	for _, tc := range []struct {
		name     string
		large    int
		pods     int
		load     []scenario.LoadSpec
		want     string
		wantNote string
	}{
		{"large gang avoids the sick domain", 16, 4, nil, "b", "chose b, whose devices report no link errors, over 1 better-fitting"},
		{"small gang does not care", 16, 2, nil, "a", ""},
		{"off: best fit only", 0, 4, nil, "a", ""},
		{"only the sick domain has room", 16, 4, []scenario.LoadSpec{{Node: "b-n00", GPUs: []int{0, 1, 2, 3}}, {Node: "b-n01", GPUs: []int{0, 1}}}, "a", "only domains with link errors or degraded links had room; a has 4 such devices"},
		{"healthy domain best fit anyway: no note", 12, 3, []scenario.LoadSpec{{Node: "b-n00", GPUs: []int{0, 1, 2, 3}}, {Node: "b-n01", GPUs: []int{0, 1, 2, 3}}}, "b", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := scenario.Build(scenario.Scenario{
				Domains: []scenario.DomainSpec{sick, healthy},
				Load:    tc.load,
				Gangs:   []scenario.GangSpec{{Name: "g", Pods: tc.pods, GPUsPerPod: 4, TopologyKey: topology.TopologyKeyNVLinkDomain}},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
			if err != nil {
				t.Fatal(err)
			}
			cfg := b.Config
			cfg.LargeGangGPUs = tc.large
			d, u, err := placement.Place(ctx, cfg, snap, b.Gangs[0])
			if err != nil || d == nil {
				t.Fatalf("Place: %v, unschedulable %v", err, u)
			}
			if d.Domain != tc.want {
				t.Errorf("placed in %s, want %s", d.Domain, tc.want)
			}
			if (tc.wantNote == "") != (d.FabricHealth == "") || !strings.Contains(d.FabricHealth, tc.wantNote) {
				t.Errorf("FabricHealth %q, want %q", d.FabricHealth, tc.wantNote)
			}
		})
	}
}
