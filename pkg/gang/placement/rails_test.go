package placement_test

import (
	"context"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// railOutcomes places a scenario's gangs in order (assuming each
// decision) and returns, per gang, "placed", "refused" or "invalid" (the
// checker rejected the decision); old turns the rail search off
// (placement.OldRails).
func railOutcomes(t *testing.T, file string, old bool) map[string]string {
	t.Helper()
	ctx := context.Background()
	b, err := scenario.Build(readScenario(t, file))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.Config
	if old {
		placement.OldRails(&cfg)
	}
	checker := placementtest.NewChecker(b.Input)
	out := map[string]string{}
	for _, g := range b.Gangs {
		d, _, err := placement.Place(ctx, cfg, snap, g)
		switch {
		case err != nil:
			t.Fatalf("gang %s: %v", g.Name, err)
		case d == nil:
			out[g.Name] = "refused"
			continue
		case checker.Check(g, d) != nil:
			out[g.Name] = "invalid"
		default:
			out[g.Name] = "placed"
		}
		if err := placement.Assume(ctx, snap, g, d); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestRailsAgainstOldRule: the rail scenarios with rail alignment as it
// was (the four most used rail sets of the first fill, NICs placed by
// first fit) and as it is. The old rule refuses the gangs whose aligned
// rail set the first fill did not use (or needs a GPU on every rail), and
// puts NICs off their GPUs' rails, which the checker rejects; the search
// places every gang that can be aligned.
func TestRailsAgainstOldRule(t *testing.T) {
	tests := []struct {
		file     string
		old, now map[string]string
	}{
		{
			file: "testdata/scenarios/rail-search.yaml",
			old:  map[string]string{"fifth-set": "refused", "cover": "refused", "second-set": "placed", "alternatives": "refused"},
			now:  map[string]string{"fifth-set": "placed", "cover": "placed", "second-set": "placed", "alternatives": "placed"},
		},
		{
			file: "testdata/scenarios/rail-nics.yaml",
			old: map[string]string{"one-claim": "invalid", "two-claims": "invalid", "fewer-nics": "invalid", "fallback": "placed",
				"search": "invalid", "required": "invalid", "taints": "invalid", "taints-refused": "invalid"},
			now: map[string]string{"one-claim": "placed", "two-claims": "placed", "fewer-nics": "placed", "fallback": "placed",
				"search": "placed", "required": "refused", "taints": "placed", "taints-refused": "refused"},
		},
		{
			file: "testdata/scenarios/rail-refusal.yaml",
			old:  map[string]string{"required": "refused", "preferred": "placed"},
			now:  map[string]string{"required": "refused", "preferred": "placed"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			if diff := cmp.Diff(tc.old, railOutcomes(t, tc.file, true)); diff != "" {
				t.Errorf("old rule (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.now, railOutcomes(t, tc.file, false)); diff != "" {
				t.Errorf("rail search (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSplitRequestsRenamedBack: on nodes with 2 GPUs per rail, a gang of
// members asking 2 GPUs and a NIC in one claim, with a claim config and a
// matchAttribute constraint naming the GPU request, needs the GPU request
// split for rails {0, 1} (a GPU on each). The decision names only the
// claim's own requests, the config once, and every member has a GPU on
// both rails and its NIC on one of them.
func TestSplitRequestsRenamedBack(t *testing.T) {
	ctx := context.Background()
	sc := scenario.Scenario{
		Domains: []scenario.DomainSpec{{ID: "m", Nodes: 2, GPUsPerNode: 8, Rails: []int64{0, 0, 1, 1, 2, 2, 3, 3}, NUMA: make([]int64, 8), NICsPerNode: 4}},
		Load:    []scenario.LoadSpec{{Node: "m-n00", GPUs: []int{3, 4, 5, 6, 7}}, {Node: "m-n01", GPUs: []int{1, 3, 4, 5, 6, 7}}},
		Gangs: []scenario.GangSpec{{Name: "g", Pods: 2, GPUsPerPod: 2, NICsPerPod: 1,
			TopologyKey: topology.TopologyKeyNVLinkDomain, RailAlignment: topology.RailAlignmentRequired}},
	}
	b, err := scenario.Build(sc)
	if err != nil {
		t.Fatal(err)
	}
	g := b.Gangs[0]
	for _, m := range g.Members {
		c := m.Claims[0]
		c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"req"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: topology.DriverName, Parameters: runtimeRaw(`{"a":1}`)}}}}
		c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"req"}, MatchAttribute: ptr(resourceapi.FullyQualifiedName("resource.kubernetes.io/numaNode"))}}
	}
	snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
	if err != nil {
		t.Fatal(err)
	}
	d, u, err := placement.Place(ctx, b.Config, snap, g)
	if err != nil || d == nil {
		t.Fatalf("place: %v %+v", err, u)
	}
	if err := placementtest.NewChecker(b.Input).Check(g, d); err != nil {
		t.Fatalf("invalid decision: %v", err)
	}
	type got struct {
		Requests []string
		Devices  []string
		Config   [][]string
	}
	var gots []got
	for _, c := range d.Claims {
		var o got
		for _, r := range c.Allocation.Devices.Results {
			o.Requests, o.Devices = append(o.Requests, r.Request), append(o.Devices, r.Device)
		}
		for _, cfg := range c.Allocation.Devices.Config {
			o.Config = append(o.Config, cfg.Requests)
		}
		gots = append(gots, o)
	}
	want := []got{
		{Requests: []string{"req", "req", "nics"}, Devices: []string{"gpu-0", "gpu-2", "nic-mlx5-0"}, Config: [][]string{{"req"}}},
		{Requests: []string{"req", "req", "nics"}, Devices: []string{"gpu-0", "gpu-2", "nic-mlx5-0"}, Config: [][]string{{"req"}}},
	}
	if diff := cmp.Diff(want, gots); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
	if d.Score.RailSets != 1 || d.Stats.RailRefills == 0 {
		t.Errorf("rail sets %d, refills %d: want an aligned refill", d.Score.RailSets, d.Stats.RailRefills)
	}
}

func runtimeRaw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }

func ptr[T any](v T) *T { return &v }

// TestGangRailsLimitsMembers: Gang.Rails (a coupled role's rail set)
// keeps every member's devices on the set, with a device on every rail of
// it for a member that asks as many (its request split and renamed back:
// the decision names only the claim's own requests), and refuses a gang
// that has no room on the set.
func TestGangRailsLimitsMembers(t *testing.T) {
	hgx := scenario.DomainSpec{ID: "a", Nodes: 2, GPUsPerNode: 8, NICsPerNode: 8}
	twoPerRail := scenario.DomainSpec{ID: "m", Nodes: 2, GPUsPerNode: 8, Rails: []int64{0, 0, 1, 1, 2, 2, 3, 3}, NICsPerNode: 4}
	tests := map[string]struct {
		domain  scenario.DomainSpec
		load    []scenario.LoadSpec
		gang    scenario.GangSpec
		rails   []int64
		refused bool
		// devices: per member, its devices (by name, in result order).
		devices [][]string
	}{
		"four GPUs and NICs on rails 4-7": {domain: hgx, gang: scenario.GangSpec{Pods: 2, GPUsPerPod: 4, NICsPerPod: 4}, rails: []int64{4, 5, 6, 7},
			devices: [][]string{
				{"gpu-4", "gpu-5", "gpu-6", "gpu-7", "nic-mlx5-4", "nic-mlx5-5", "nic-mlx5-6", "nic-mlx5-7"},
				{"gpu-4", "gpu-5", "gpu-6", "gpu-7", "nic-mlx5-4", "nic-mlx5-5", "nic-mlx5-6", "nic-mlx5-7"}}},
		"a GPU on each rail where a rail has two": {domain: twoPerRail, gang: scenario.GangSpec{Pods: 2, GPUsPerPod: 2}, rails: []int64{1, 3},
			devices: [][]string{{"gpu-2", "gpu-6"}, {"gpu-3", "gpu-7"}}},
		"fewer GPUs than rails: on one rail of the set": {domain: hgx, gang: scenario.GangSpec{Pods: 2, GPUsPerPod: 1}, rails: []int64{5, 6},
			load:    []scenario.LoadSpec{{Node: "a-n00", GPUs: []int{5}}},
			devices: [][]string{{"gpu-6"}, {"gpu-6"}}},
		"no room on the set": {domain: hgx, gang: scenario.GangSpec{Pods: 2, GPUsPerPod: 4}, rails: []int64{2, 3, 4, 5},
			load:    []scenario.LoadSpec{{Node: "a-n00", GPUs: []int{3}}},
			refused: true},
		"more GPUs than the set has devices on a node": {domain: hgx, gang: scenario.GangSpec{Pods: 1, GPUsPerPod: 4}, rails: []int64{0, 1}, refused: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			gs := tc.gang
			gs.Name, gs.TopologyKey, gs.RailAlignment = "g", topology.TopologyKeyNVLinkDomain, topology.RailAlignmentRequired
			b, err := scenario.Build(scenario.Scenario{Domains: []scenario.DomainSpec{tc.domain}, Load: tc.load, Gangs: []scenario.GangSpec{gs}})
			if err != nil {
				t.Fatal(err)
			}
			g := b.Gangs[0]
			g.Rails = tc.rails
			snap, err := index.NewSnapshot(ctx, b.Config.Index, b.Input)
			if err != nil {
				t.Fatal(err)
			}
			d, u, err := placement.Place(ctx, b.Config, snap, g)
			if err != nil {
				t.Fatal(err)
			}
			if tc.refused {
				if d != nil {
					t.Fatalf("placed %+v, want refused", d.Pods)
				}
				return
			}
			if d == nil {
				t.Fatalf("refused: %s", u.Message)
			}
			if err := placementtest.NewChecker(b.Input).Check(g, d); err != nil {
				t.Fatalf("invalid decision: %v", err)
			}
			var got [][]string
			for _, p := range d.Pods {
				var devs []string
				for _, c := range d.Claims {
					if c.Pod != p.Name {
						continue
					}
					for _, r := range c.Allocation.Devices.Results {
						if r.Request != "req" && r.Request != "nics" {
							t.Errorf("%s: result for request %q, not one of the claim's own", p.Name, r.Request)
						}
						devs = append(devs, r.Device)
					}
				}
				got = append(got, devs)
			}
			if diff := cmp.Diff(tc.devices, got); diff != "" {
				t.Errorf("devices per member (-want +got):\n%s", diff)
			}
		})
	}
}
