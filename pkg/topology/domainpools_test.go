package topology

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
)

func TestFabricDomainPools(t *testing.T) {
	tainted := gpuSlice("b-1", 1, "dom-b", "dom-b")
	tainted.Spec.Devices[1].Taints = []resourceapi.DeviceTaint{{Key: TaintNVLinkDegraded, Value: "2 of 18 links down", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	other := gpuSlice("c-0", 1, "dom-c")
	other.Spec.Driver = "other.example.com"

	type poolView struct {
		Name, Domain      string
		Nodes             []string
		GPUs, Healthy     int
		Channels          int
		SelectorValues    []string
		FirstChannelCount int64
	}
	tests := []struct {
		name     string
		slices   []*resourceapi.ResourceSlice
		hostname func(string) string
		want     []poolView
	}{
		{
			name:   "no slices, no pools",
			slices: nil,
			want:   []poolView{},
		},
		{
			name: "one pool per domain, tainted GPUs not healthy, other drivers and old generations ignored",
			slices: []*resourceapi.ResourceSlice{
				gpuSlice("a-0", 1, "dom-a", "dom-a"), gpuSlice("a-1", 1, "dom-a", "dom-a"),
				gpuSlice("b-0", 1, "dom-b", "dom-b"), tainted,
				gpuSlice("b-0", 0, "dom-old"), other,
			},
			want: []poolView{
				{Name: "fabric-domain.dom-a", Domain: "dom-a", Nodes: []string{"a-0", "a-1"}, GPUs: 4, Healthy: 4, Channels: 3, SelectorValues: []string{"a-0", "a-1"}, FirstChannelCount: 4},
				{Name: "fabric-domain.dom-b", Domain: "dom-b", Nodes: []string{"b-0", "b-1"}, GPUs: 4, Healthy: 3, Channels: 3, SelectorValues: []string{"b-0", "b-1"}, FirstChannelCount: 3},
			},
		},
		{
			name:     "selector uses hostname labels where nodes have them",
			slices:   []*resourceapi.ResourceSlice{gpuSlice("a-0", 1, "dom-a"), gpuSlice("a-1", 1, "dom-a")},
			hostname: func(n string) string { return map[string]string{"a-1": "host-a1"}[n] },
			want: []poolView{
				{Name: "fabric-domain.dom-a", Domain: "dom-a", Nodes: []string{"a-0", "a-1"}, GPUs: 2, Healthy: 2, Channels: 3, SelectorValues: []string{"a-0", "host-a1"}, FirstChannelCount: 2},
			},
		},
		{
			name:   "node without GPUs has no domain",
			slices: []*resourceapi.ResourceSlice{gpuSlice("n-0", 1)},
			want:   []poolView{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := []poolView{}
			for _, p := range FabricDomainPools(tc.slices, tc.hostname, 3) {
				got = append(got, poolView{
					Name: p.Name, Domain: p.Domain, Nodes: p.Nodes, GPUs: p.GPUs, Healthy: p.HealthyGPUs,
					Channels: len(p.Devices), SelectorValues: p.NodeSelector.NodeSelectorTerms[0].MatchExpressions[0].Values,
					FirstChannelCount: *p.Devices[0].Attributes[AttrGPUCount].IntValue,
				})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pools (-want +got):\n%s", diff)
			}
		})
	}
}
