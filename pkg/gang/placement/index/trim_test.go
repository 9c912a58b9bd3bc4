package index_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// TestClassesStayApart: a node whose one slice holds 4 GPUs and 4 NICs.
// Single-class calls see slices trimmed to the class and classes without
// selectors (trim.go); a call with both classes keeps the selectors. Either
// way no request may get a device of the other class.
func TestClassesStayApart(t *testing.T) {
	const node = "n0"
	slice := scenario.GPUSlice(node, []scenario.GPU{{NVLinkDomain: "d", Kind: topology.DomainKindNVSwitch, Rail: 0}, {NVLinkDomain: "d", Kind: topology.DomainKindNVSwitch, Rail: 1}, {NVLinkDomain: "d", Kind: topology.DomainKindNVSwitch, Rail: 2}, {NVLinkDomain: "d", Kind: topology.DomainKindNVSwitch, Rail: 3}})
	for i := range 4 {
		// NICs first in the slice, so a class-blind first fit would take them.
		nic := resourceapi.Device{Name: topology.NICDeviceName("mlx5_" + string(rune('0'+i))), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			topology.AttrType: {StringValue: ptr(topology.DeviceTypeNIC)},
		}}
		slice.Spec.Devices = append([]resourceapi.Device{nic}, slice.Spec.Devices...)
	}
	classes := scenario.DeviceClasses() // gpu, nic and fabric-domain
	mixed := scenario.GPUClaim("mixed", 2)
	mixed.Spec.Devices.Requests = append(mixed.Spec.Devices.Requests, resourceapi.DeviceRequest{
		Name: "nics", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: topology.NICDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2},
	})
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  map[string]string // request → device name prefix
	}{
		{"gpus only", scenario.GPUClaim("gpus", 4), map[string]string{"req": "gpu-"}},
		{"nics only", scenario.Claim("nics", topology.NICDeviceClass, 3), map[string]string{"req": "nic-"}},
		{"gpus and nics", mixed, map[string]string{"req": "gpu-", "nics": "nic-"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			snap, err := index.NewSnapshot(ctx, index.Config{}, index.SnapshotInput{
				Nodes: []*corev1.Node{scenario.Node(node, "64", "512Gi", nil)}, ResourceSlices: []*resourceapi.ResourceSlice{slice},
				DeviceClasses: classes, ResourceClaims: []*resourceapi.ResourceClaim{tc.claim},
			})
			if err != nil {
				t.Fatal(err)
			}
			pod := scenario.Pod("p", "1", "1Gi", tc.claim.Name)
			g, err := placement.NewPodGang(pod, func(_, name string) (*resourceapi.ResourceClaim, error) { return tc.claim, nil })
			if err != nil {
				t.Fatal(err)
			}
			d, u, err := placement.Place(ctx, placement.Config{}, snap, g)
			if err != nil || u != nil {
				t.Fatalf("place: err %v, unschedulable %+v", err, u)
			}
			for _, r := range d.Claims[0].Allocation.Devices.Results {
				if !strings.HasPrefix(r.Device, tc.want[r.Request]) {
					t.Errorf("request %s got %s, want a %s* device", r.Request, r.Device, tc.want[r.Request])
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
