package extended

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

const gpu = v1.ResourceName("nvidia.com/gpu")

// TestResources: the DRA-backed names leave the node requests (a nil
// Resources changes nothing); a node whose allocatable has one is named
// by DevicePluginServes; Note names each resource once, with the first
// pod asking for it, and is empty without any.
func TestResources(t *testing.T) {
	r := &Resources{Pod: "p-0", Names: []v1.ResourceName{gpu}, Classes: []string{"gpu.gpufabric.dev"}, Counts: []int64{8}}
	req := index.ResList{v1.ResourceCPU: 1000, gpu: 8}
	if got := r.Without(req); len(got) != 1 || got[v1.ResourceCPU] != 1000 {
		t.Errorf("Without = %v, want cpu only", got)
	}
	var none *Resources
	if got := none.Without(index.ResList{gpu: 8}); got[gpu] != 8 || NamesOf(none) != nil {
		t.Errorf("nil Resources changed the requests: %v", got)
	}
	if why := DevicePluginServes(index.ResList{gpu: 8}, r.Names); why != CheckDevicePlugin+" (nvidia.com/gpu)" {
		t.Errorf("DevicePluginServes = %q", why)
	}
	if why := DevicePluginServes(index.ResList{gpu: 0, v1.ResourceCPU: 4}, r.Names); why != "" {
		t.Errorf("DevicePluginServes on a node without the resource = %q", why)
	}
	other := &Resources{Pod: "p-1", Names: r.Names, Classes: r.Classes, Counts: []int64{4}}
	note := Note([]*Resources{nil, r, other})
	if !strings.HasPrefix(note, "\nnvidia.com/gpu is served through DRA by DeviceClass gpu.gpufabric.dev (pod p-0 asks 8): ") || strings.Count(note, "nvidia.com/gpu") != 1 {
		t.Errorf("Note = %q", note)
	}
	if note := Note([]*Resources{nil}); note != "" {
		t.Errorf("Note without resources = %q", note)
	}
}
