package inspect

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

func TestBuildNodes(t *testing.T) {
	b := scenario()
	b.taint("b-1", "nic-mlx5-3", topology.TaintPortDown, "port-1-DOWN", resourceapi.DeviceTaintEffectNoSchedule)
	b.taint("b-1", "gpu-2", topology.TaintNVLinkDegraded, "2-of-18-nvlinks-down", resourceapi.DeviceTaintEffectNoSchedule)
	got, err := BuildNodes(b.c, testLevels)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Nodes) != 4 || got.OtherNodes != 1 || cmp.Diff(testLevels.Levels, got.Levels) != "" {
		t.Fatalf("nodes %d, other %d, levels %v; want 4 nodes, the CPU node counted apart, the levels", len(got.Nodes), got.OtherNodes, got.Levels)
	}
	nics := func() []NICInfo {
		var out []NICInfo
		for i := range int64(4) {
			out = append(out, NICInfo{Name: "nic-mlx5-" + string(rune('0'+i)), Rail: ptr.To(i), PortState: "ACTIVE", RateGbps: 400})
		}
		return out
	}
	want := NodeInfo{
		Name: "b-1", NVLinkDomain: "dom-b", Levels: []string{"rack-2", "leaf-1"},
		GPUs:     GPUCounts{Total: 4, Used: 1, Tainted: 2, Free: 1},
		Models:   []string{"NVIDIA GB200"},
		GPURails: []int64{0, 1, 2, 3},
		NICs:     nics(),
		DeviceTaints: []DeviceTaint{
			{Key: topology.TaintNVLinkDegraded, Value: "2-of-18-nvlinks-down", Effect: "NoSchedule", Devices: []string{"gpu-2", "gpu-3"}},
			{Key: topology.TaintPortDown, Value: "port-1-DOWN", Effect: "NoSchedule", Devices: []string{"nic-mlx5-3"}},
		},
		NodeTaints: []string{"example.com/maintenance=planned:PreferNoSchedule"},
	}
	if diff := cmp.Diff(want, got.Nodes[3]); diff != "" {
		t.Errorf("node b-1 (-want +got):\n%s", diff)
	}
	if a0 := got.Nodes[0]; a0.Name != "a-0" || a0.GPUs != (GPUCounts{Total: 4, Used: 4}) || a0.DeviceTaints != nil {
		t.Errorf("node a-0: %+v, want 4 used GPUs, no taints", a0)
	}
}

func TestBuildNodesWithoutRails(t *testing.T) {
	b := newBuilder().node("h-0", "nvswitch.h-0", 2, nil)
	for i := range b.c.Slices[0].Spec.Devices {
		delete(b.c.Slices[0].Spec.Devices[i].Attributes, topology.AttrIBRail)
	}
	// The qualified spelling of ibRail is read too.
	b.c.Slices[0].Spec.Devices[3].Attributes[resourceapi.QualifiedName(topology.Qualified(topology.AttrIBRail))] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(5))}
	got, err := BuildNodes(b.c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := got.Nodes[0]
	if n.GPURails != nil || n.NICs[0].Rail != nil || n.NICs[1].Rail == nil || *n.NICs[1].Rail != 5 {
		t.Errorf("rails: GPUs %v, NICs %+v; want none on GPUs, rail 5 on the second NIC only", n.GPURails, n.NICs)
	}
}
