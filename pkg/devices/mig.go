package devices

import (
	"fmt"
	"slices"
	"strings"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// MIGMode says how MIG-enabled GPUs are published. A GPU in MIG mode
// cannot run a job as a whole GPU, so it is never published whole.
type MIGMode string

const (
	// MIGPartitions publishes every GPU instance profile at every
	// placement as a device that consumes the GPU's memory-slice counters
	// (partitionable devices): the scheduler allocates partitions that do
	// not overlap, and prepare creates the GPU instance.
	MIGPartitions MIGMode = "partitions"
	// MIGExclude publishes nothing for a MIG-enabled GPU (a Node event
	// says so), for nodes whose MIG layout another tool manages.
	MIGExclude MIGMode = "exclude"
)

// WithMIG sets how MIG-enabled GPUs are published (default MIGPartitions).
func WithMIG(m MIGMode) Option {
	return func(o *options) { o.mig = m }
}

// MIGPartition is one GPU instance a MIG-enabled GPU can host: a profile
// at one placement, with the full compute instance of that profile.
type MIGPartition struct {
	// Name is the published device name, topology.MIGDeviceName.
	Name string
	// Profile is NVIDIA's name, "1g.10gb", "1g.10gb+me".
	Profile     string
	GIProfileID int
	CIProfileID int
	// Start and Size are the placement, in memory slices.
	Start, Size     int
	MemoryBytes     uint64
	Multiprocessors int
}

// fullCIProfile is the compute instance profile that spans a GPU instance
// of that many slices.
func fullCIProfile(slices uint32) (int, bool) {
	id, ok := map[uint32]int{
		1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
		3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
		6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE, 7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
		8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE,
	}[slices]
	return id, ok
}

// maxMIGPartitionsPerGPU bounds what a driver may report (an H100 has 31).
const maxMIGPartitionsPerGPU = 64

// readMIGPartitions lists every GPU instance profile the GPU supports at
// every possible placement, sorted by start, then size, then name. A
// profile NVML does not support is skipped; any other error fails the
// GPU's partitions (the caller taints it).
func readMIGPartitions(devlib nvdev.Interface, dev nvdev.Device, minor int) ([]MIGPartition, error) {
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("get memory info: %w", ret)
	}
	var out []MIGPartition
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := dev.GetGpuInstanceProfileInfo(id)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("get gpu instance profile %d: %w", id, ret)
		}
		ci, ok := fullCIProfile(info.SliceCount)
		if !ok || info.MemorySizeMB == 0 {
			continue
		}
		profile, err := devlib.NewMigProfile(id, ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, info.MemorySizeMB, mem.Total)
		if err != nil {
			continue // a profile go-nvlib cannot name
		}
		placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("get placements of profile %s: %w", profile, ret)
		}
		for _, p := range placements {
			if p.Size == 0 || p.Start+p.Size > 32 {
				return nil, fmt.Errorf("profile %s: placement %d+%d outside 32 memory slices", profile, p.Start, p.Size)
			}
			out = append(out, MIGPartition{
				Name:    topology.MIGDeviceName(minor, profile.String(), int(p.Start)),
				Profile: profile.String(), GIProfileID: id, CIProfileID: ci,
				Start: int(p.Start), Size: int(p.Size),
				MemoryBytes: info.MemorySizeMB << 20, Multiprocessors: int(info.MultiprocessorCount),
			})
		}
		if len(out) > maxMIGPartitionsPerGPU {
			return nil, fmt.Errorf("more than %d MIG partitions", maxMIGPartitionsPerGPU)
		}
	}
	slices.SortFunc(out, func(a, b MIGPartition) int {
		if a.Start != b.Start {
			return a.Start - b.Start
		}
		if a.Size != b.Size {
			return a.Size - b.Size
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// memorySlices is the number of memory slices the partitions cover.
func memorySlices(parts []MIGPartition) int {
	n := 0
	for _, p := range parts {
		n = max(n, p.Start+p.Size)
	}
	return n
}

func memorySliceCounter(i int) string { return fmt.Sprintf("memory-slice-%d", i) }

// migCounterSet is the GPU's counter set: one counter per memory slice.
func migCounterSet(g GPU) resourceapi.CounterSet {
	cs := resourceapi.CounterSet{Name: topology.MIGCounterSetName(g.Minor), Counters: map[string]resourceapi.Counter{}}
	for i := range memorySlices(g.MIG) {
		cs.Counters[memorySliceCounter(i)] = resourceapi.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
	}
	return cs
}

// migDevice is one partition as a device: the parent's identity and
// taints, the profile, and the memory slices it consumes.
func migDevice(driverVersion string, g GPU, p MIGPartition) resourceapi.Device {
	a := attributes{}
	a.str(topology.AttrType, topology.DeviceTypeMIG)
	a.str(topology.AttrParentUUID, g.UUID)
	a.str(topology.AttrParentDevice, g.Name)
	a.str(topology.AttrProductName, g.ProductName)
	a.str(topology.AttrArchitecture, g.Architecture)
	a.version(topology.AttrCUDAComputeCapability, g.CUDAComputeCapability)
	a.version(topology.AttrDriverVersion, driverVersion)
	a.int(topology.AttrIndex, int64(g.Index))
	a.str(topology.AttrMIGProfile, p.Profile)
	a.int(topology.AttrMIGStart, int64(p.Start))
	if g.IBRail != NoRail {
		a.int(topology.AttrIBRail, int64(g.IBRail))
		a.str(topology.AttrIBDevice, g.IBDevice)
	}
	a.pci(g.PCI)
	used := map[string]resourceapi.Counter{}
	for s := p.Start; s < p.Start+p.Size; s++ {
		used[memorySliceCounter(s)] = resourceapi.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
	}
	return resourceapi.Device{
		Name:       p.Name,
		Attributes: a,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			topology.CapacityMemory:     {Value: *resource.NewQuantity(int64(p.MemoryBytes), resource.BinarySI)},
			topology.CapacityMultiprocs: {Value: *resource.NewQuantity(int64(p.Multiprocessors), resource.DecimalSI)},
		},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: topology.MIGCounterSetName(g.Minor), Counters: used}},
		Taints:           g.Taints,
	}
}
