package devices_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufabric/gpufabric/pkg/devices"
)

// TestMissingHCAKeepsRails discovers an 8-rail HGX node, then the same node
// with the HCA of rail 2 not enumerated (the kernel names the later HCAs
// one lower): the rails paired with the GPUs behind each HCA's PCIe switch
// keep every HCA and every GPU on its cabled rail even at a first
// discovery, and so does the rail map of the first discovery; positional
// numbering (what a node whose HCAs do not pair with GPUs gets) would shift
// rails 3..7 down.
func TestMissingHCAKeepsRails(t *testing.T) {
	const group = "nodeGroups:\n- name: h\n  gpus: {model: H100}\n  nvlink: {kind: nvswitch}\n  hcas: {count: 8}\n"
	discover := func(fabric string, opts ...devices.Option) *devices.Inventory {
		t.Helper()
		_, inv := discoverNode(t, fabric, "h", opts...)
		return inv
	}
	// rails: HCA (by its port GUID) -> rail, GPU -> rail.
	rails := func(inv *devices.Inventory) (map[string]int, []int) {
		nics := map[string]int{}
		for _, n := range inv.NICs {
			nics[n.PortGUID] = n.Rail
		}
		var gpus []int
		for _, g := range inv.GPUs {
			gpus = append(gpus, g.IBRail)
		}
		return nics, gpus
	}
	healthy := discover(group)
	wantNICs, wantGPUs := rails(healthy)
	delete(wantNICs, healthy.NICs[2].PortGUID)
	wantGPUs[2] = 0 // its own HCA is gone: the nearest is the lowest rail on its NUMA node

	broken := group + "faults:\n- node: h\n  sysfs: {rail: 2, break: missing}\n"
	if healthy.NICs[3].IBDevice != "mlx5_3" || healthy.NICs[3].Rail != 3 {
		t.Fatalf("healthy node: mlx5_3 on rail %d; the fabric does not pair HCAs with GPUs", healthy.NICs[3].Rail)
	}
	first := discover(broken)
	nics, gpus := rails(first)
	if diff := cmp.Diff(wantNICs, nics); diff != "" {
		t.Errorf("HCA rails at a first discovery (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantGPUs, gpus); diff != "" {
		t.Errorf("GPU rails at a first discovery (-want +got):\n%s", diff)
	}
	withMap := discover(broken, devices.WithRailMap(healthy.Rails))
	nics, gpus = rails(withMap)
	if diff := cmp.Diff(wantNICs, nics); diff != "" {
		t.Errorf("HCA rails with the map (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantGPUs, gpus); diff != "" {
		t.Errorf("GPU rails with the map (-want +got):\n%s", diff)
	}
	if withMap.NICs[2].IBDevice != "mlx5_2" || withMap.NICs[2].Rail != 3 {
		t.Errorf("the kernel's mlx5_2 is now rail 3's card: got %s on rail %d", withMap.NICs[2].IBDevice, withMap.NICs[2].Rail)
	}
	if diff := cmp.Diff(healthy.Rails, withMap.Rails, cmpopts.IgnoreFields(devices.RailSlot{}, "IBDevice")); diff != "" {
		t.Errorf("the map must keep rail 2's slot (-healthy +broken):\n%s", diff)
	}
}
