package devices_test

import (
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/mock"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

const migFabric = `nodeGroups:
- name: h
  gpus: {model: H100, count: 2}
  nvlink: {kind: nvswitch}
faults:
- node: h
  migEnabled: {gpus: [1]}
`

func migNode(t *testing.T, opts ...devices.Option) (*mock.Backend, *devices.Inventory) {
	t.Helper()
	return discoverNode(t, migFabric, "h", opts...)
}

// discoverNode builds node of a fabric file's text in a temp dir and runs
// discovery on it.
func discoverNode(t *testing.T, fabric, node string, opts ...devices.Option) (*mock.Backend, *devices.Inventory) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	f, err := mock.Parse("fabric.yaml", []byte(fabric))
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Backend(node, filepath.Join(t.TempDir(), node))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := devices.Discover(ctx, b, node, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b, inv
}

// TestMIGPublication: a MIG-enabled GPU is published as its partitions,
// each consuming the memory slices of its placement from the GPU's counter
// set (in a slice of its own); the GPU itself is not published; with
// MIGExclude nothing of it is, and MIGExcluded names it.
func TestMIGPublication(t *testing.T) {
	_, inv := migNode(t)
	dr := inv.DriverResources()
	pool := dr.Pools["h"]
	devs := map[string]resourceapi.Device{}
	var sets []resourceapi.CounterSet
	for _, s := range pool.Slices {
		if len(s.SharedCounters) > 0 && len(s.Devices) > 0 {
			t.Errorf("a slice holds both devices and counter sets")
		}
		sets = append(sets, s.SharedCounters...)
		for _, d := range s.Devices {
			devs[d.Name] = d
		}
	}
	if _, ok := devs["gpu-1"]; ok {
		t.Error("the MIG-enabled gpu-1 is published whole")
	}
	if _, ok := devs["gpu-0"]; !ok {
		t.Error("gpu-0 (no MIG) is not published")
	}
	if len(sets) != 1 || sets[0].Name != "gpu-1-mig" || len(sets[0].Counters) != 7 {
		t.Fatalf("counter sets = %+v, want gpu-1-mig with 7 memory slices", sets)
	}
	d, ok := devs["gpu-1-mig-3g-40gb-4"]
	if !ok {
		t.Fatalf("no 3g.40gb partition at slice 4; devices: %d", len(devs))
	}
	consumed := slices.Sorted(maps.Keys(d.ConsumesCounters[0].Counters))
	if diff := cmp.Diff([]string{"memory-slice-4", "memory-slice-5", "memory-slice-6"}, consumed); diff != "" || d.ConsumesCounters[0].CounterSet != "gpu-1-mig" {
		t.Errorf("3g.40gb at 4 consumes %v of %s (-want +got):\n%s", consumed, d.ConsumesCounters[0].CounterSet, diff)
	}
	if v := d.Attributes[topology.AttrType].StringValue; v == nil || *v != topology.DeviceTypeMIG {
		t.Errorf("partition type = %v", v)
	}
	if _, ok := d.Attributes[topology.AttrNVLinkDomain]; ok {
		t.Error("a MIG partition has no NVLink, but publishes an nvlinkDomain")
	}
	if len(inv.MIGExcluded()) != 0 {
		t.Errorf("excluded in partitions mode: %v", inv.MIGExcluded())
	}

	_, excl := migNode(t, devices.WithMIG(devices.MIGExclude))
	for _, s := range excl.DriverResources().Pools["h"].Slices {
		for _, d := range s.Devices {
			if strings.HasPrefix(d.Name, "gpu-1") {
				t.Errorf("MIGExclude published %s", d.Name)
			}
		}
		if len(s.SharedCounters) > 0 {
			t.Error("MIGExclude published counters")
		}
	}
	if x := excl.MIGExcluded(); len(x) != 1 || x[0].Name != "gpu-1" {
		t.Errorf("MIGExcluded = %v, want gpu-1", x)
	}
}

// TestMIGManager creates and destroys partitions on the mock driver: a
// create is idempotent, an overlapping one is refused by the driver, a
// destroyed one frees its slices, a second destroy is a no-op.
func TestMIGManager(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, inv := migNode(t)
	m := devices.NewMIGManager(b.NVML(), b.ProcRoot())
	gpu, small := inv.MIGPartition("gpu-1-mig-1g-10gb-4")
	_, big := inv.MIGPartition("gpu-1-mig-3g-40gb-4")
	if small == nil || big == nil {
		t.Fatal("partitions not found")
	}
	first, err := m.Create(ctx, *gpu, *small)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first.UUID, "MIG-") || len(first.Caps) != 2 || first.Caps[0].Major != 510 ||
		!strings.HasPrefix(first.Caps[0].Path, "/dev/nvidia-caps/nvidia-cap") {
		t.Errorf("instance = %+v, want a MIG UUID and two nvidia-caps nodes of major 510", first)
	}
	again, err := m.Create(ctx, *gpu, *small)
	if err != nil || !cmp.Equal(first, again) {
		t.Errorf("second create = %+v, %v; want the same instance", again, err)
	}
	if _, err := m.Create(ctx, *gpu, *big); !errors.Is(err, nvml.ERROR_INSUFFICIENT_RESOURCES) {
		t.Errorf("overlapping create: %v, want ERROR_INSUFFICIENT_RESOURCES", err)
	}
	for range 2 {
		if err := m.Destroy(ctx, *gpu, *small); err != nil {
			t.Fatalf("destroy: %v", err)
		}
	}
	if _, err := m.Create(ctx, *gpu, *big); err != nil {
		t.Errorf("create after the overlap was destroyed: %v", err)
	}
	g0 := inv.GPUs[0]
	if _, err := m.Create(ctx, g0, *small); err == nil {
		t.Error("a partition on a GPU without MIG mode was created")
	}
}
