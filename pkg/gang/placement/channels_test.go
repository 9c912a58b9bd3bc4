package placement_test

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestChannelOnlyForGPUUsers: a pod of its own (no PodGroup) asking for a
// fabric-domain channel in its own claim gets one only when it also uses a
// GPU of that domain; a GPU-less pod is refused and says why, so GPU-less
// pods cannot take a domain's channels (the golden scenario
// channels-gpuless covers a PodGroup's shared claim).
func TestChannelOnlyForGPUUsers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		claims  []*resourceapi.ResourceClaim
		wantErr string // "" : placed with a channel
	}{
		{name: "channel without a GPU", claims: []*resourceapi.ResourceClaim{scenario.Claim("ch", topology.FabricDomainDeviceClass, 1)},
			wantErr: "no member of the gang uses a GPU of that NVLink domain"},
		{name: "channel and a NIC, no GPU", claims: []*resourceapi.ResourceClaim{scenario.Claim("ch", topology.FabricDomainDeviceClass, 1), scenario.NICClaim("nic", 1)},
			wantErr: "no member of the gang uses a GPU of that NVLink domain"},
		{name: "channel and a GPU", claims: []*resourceapi.ResourceClaim{scenario.Claim("ch", topology.FabricDomainDeviceClass, 1), scenario.GPUClaim("gpu", 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := scenario.Build(scenario.Scenario{Domains: []scenario.DomainSpec{{ID: "a", Nodes: 2, GPUsPerNode: 4, NICsPerNode: 2, Channels: 2}}})
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]*resourceapi.ResourceClaim{}
			var names []string
			for _, c := range tc.claims {
				byName[c.Name] = c
				names = append(names, c.Name)
			}
			g, err := placement.NewPodGang(scenario.Pod("p", "1", "1Gi", names...), func(_, name string) (*resourceapi.ResourceClaim, error) {
				return byName[name], nil
			})
			if err != nil {
				t.Fatal(err)
			}
			snap, err := index.NewSnapshot(t.Context(), b.Config.Index, b.Input)
			if err != nil {
				t.Fatal(err)
			}
			d, u, err := placement.Place(t.Context(), b.Config, snap, g)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" {
				if d != nil || u == nil || !strings.Contains(u.Message, tc.wantErr) {
					t.Fatalf("decision %+v, refusal %+v; want refused with %q", d, u, tc.wantErr)
				}
				return
			}
			if d == nil {
				t.Fatalf("refused: %s", u.Message)
			}
			channels := 0
			for _, c := range d.Claims {
				for _, r := range c.Allocation.Devices.Results {
					if topology.IsFabricDomainPool(r.Pool) {
						channels++
					}
				}
			}
			if channels != 1 {
				t.Errorf("%d channels allocated, want 1", channels)
			}
		})
	}
}
