package devices

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// API limits for one ResourceSlice.
const (
	maxDevicesPerSlice         = resourceapi.ResourceSliceMaxDevices
	maxTaintedDevicesPerSlice  = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	maxStringAttributeValueLen = topology.MaxAttributeValueLength
	maxCounterSetsPerSlice     = resourceapi.ResourceSliceMaxCounterSets
)

// DriverResources returns the node's devices as one pool named after the
// node: GPUs first (by minor), then NICs. Rule: a slice holds at most 128
// devices, or 64 once one of its devices has a taint; a pool always has at
// least one (possibly empty) slice.
//
// A MIG-enabled GPU is never published whole: with MIGPartitions its
// partitions are (each consuming the GPU's memory-slice counters), and the
// GPU's counter set goes into slices of their own after the device slices
// (the API allows devices or counter sets in a slice, and 8 sets per slice).
func (inv *Inventory) DriverResources() *resourceslice.DriverResources {
	devs := make([]resourceapi.Device, 0, len(inv.GPUs)+len(inv.NICs))
	var counters []resourceapi.CounterSet
	for _, g := range inv.GPUs {
		switch {
		case !g.MIGEnabled:
			devs = append(devs, gpuDevice(inv.DriverVersion, g))
		case inv.MIGMode == MIGPartitions && len(g.MIG) > 0:
			for _, p := range g.MIG {
				devs = append(devs, migDevice(inv.DriverVersion, g, p))
			}
			counters = append(counters, migCounterSet(g))
		}
	}
	for _, n := range inv.NICs {
		devs = append(devs, nicDevice(n))
	}
	slices := splitSlices(devs)
	for len(counters) > 0 {
		n := min(len(counters), maxCounterSetsPerSlice)
		slices = append(slices, resourceslice.Slice{SharedCounters: counters[:n]})
		counters = counters[n:]
	}
	return &resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{inv.NodeName: {Slices: slices}},
	}
}

// splitSlices packs devices in order into as few slices as the limits
// allow: 128 devices, or 64 once one has a taint or consumes counters.
func splitSlices(devs []resourceapi.Device) []resourceslice.Slice {
	out := []resourceslice.Slice{{}}
	advanced := false
	for _, d := range devs {
		cur := &out[len(out)-1]
		adv := len(d.Taints) > 0 || len(d.ConsumesCounters) > 0
		withAdvanced := advanced || adv
		limit := maxDevicesPerSlice
		if withAdvanced {
			limit = maxTaintedDevicesPerSlice
		}
		if len(cur.Devices)+1 > limit {
			out = append(out, resourceslice.Slice{})
			cur = &out[len(out)-1]
			withAdvanced = adv
		}
		cur.Devices = append(cur.Devices, d)
		advanced = withAdvanced
	}
	return out
}

// ResourceSlices renders a node's DriverResources as the ResourceSlice
// objects a publisher would create, with deterministic names
// "<node>-<driver>-<pool index>-<slice index>". Use it where a test, a
// benchmark or the discover command needs the API objects.
func ResourceSlices(nodeName string, dr *resourceslice.DriverResources) []resourceapi.ResourceSlice {
	var out []resourceapi.ResourceSlice
	names := slices.Sorted(maps.Keys(dr.Pools))
	for pi, poolName := range names {
		pool := dr.Pools[poolName]
		for si, s := range pool.Slices {
			out = append(out, resourceapi.ResourceSlice{
				TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d-%d", nodeName, topology.DriverName, pi, si)},
				Spec: resourceapi.ResourceSliceSpec{
					Driver:   topology.DriverName,
					NodeName: &nodeName,
					Pool: resourceapi.ResourcePool{
						Name:               poolName,
						Generation:         pool.Generation,
						ResourceSliceCount: int64(len(pool.Slices)),
					},
					Devices:        s.Devices,
					SharedCounters: s.SharedCounters,
				},
			})
		}
	}
	return out
}

func gpuDevice(driverVersion string, g GPU) resourceapi.Device {
	a := attributes{}
	a.str(topology.AttrType, topology.DeviceTypeGPU)
	a.str(topology.AttrUUID, g.UUID)
	a.str(topology.AttrProductName, g.ProductName)
	a.str(topology.AttrArchitecture, g.Architecture)
	a.version(topology.AttrCUDAComputeCapability, g.CUDAComputeCapability)
	a.version(topology.AttrDriverVersion, driverVersion)
	a.int(topology.AttrIndex, int64(g.Index))
	a.boolean(topology.AttrMIGEnabled, g.MIGEnabled)
	a.str(topology.AttrNVLinkDomain, g.NVLink.Domain)
	a.str(topology.AttrNVLinkDomainKind, string(g.NVLink.Kind))
	if g.IBRail != NoRail {
		a.int(topology.AttrIBRail, int64(g.IBRail))
		a.str(topology.AttrIBDevice, g.IBDevice)
	}
	a.pci(g.PCI)
	a.optInt(topology.AttrFabricErrors, g.FabricErrors)
	d := resourceapi.Device{Name: g.Name, Attributes: a, Taints: g.Taints}
	if g.MemoryBytes > 0 {
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			topology.CapacityMemory: {Value: *resource.NewQuantity(int64(g.MemoryBytes), resource.BinarySI)},
		}
	}
	return d
}

func nicDevice(n NIC) resourceapi.Device {
	a := attributes{}
	a.str(topology.AttrType, topology.DeviceTypeNIC)
	a.int(topology.AttrIBRail, int64(n.Rail))
	a.str(topology.AttrIBDevice, n.IBDevice)
	a.str(topology.AttrLinkLayer, n.LinkLayer)
	if n.RateGbps > 0 {
		a.int(topology.AttrRateGbps, int64(n.RateGbps))
	}
	a.str(topology.AttrPortState, n.PortState)
	a.str(topology.AttrNodeGUID, n.NodeGUID)
	a.pci(n.PCI)
	a.optInt(topology.AttrFabricErrors, n.FabricErrors)
	return resourceapi.Device{Name: n.Name, Attributes: a, Taints: n.Taints}
}

// attributes builds a device's attribute map. Rule: empty strings and
// unparsable versions are left out rather than published empty; strings
// are made valid UTF-8 (invalid bytes become '?') and cut to the API's 64
// bytes at a character boundary, so that JSON cannot lengthen them.
type attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute

func (a attributes) str(name resourceapi.QualifiedName, v string) {
	v = strings.ToValidUTF8(v, "?")
	if len(v) > maxStringAttributeValueLen {
		cut := maxStringAttributeValueLen
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut--
		}
		v = v[:cut]
	}
	if v == "" {
		return
	}
	a[name] = resourceapi.DeviceAttribute{StringValue: &v}
}

func (a attributes) int(name resourceapi.QualifiedName, v int64) {
	a[name] = resourceapi.DeviceAttribute{IntValue: &v}
}

// optInt adds an int attribute when v is set.
func (a attributes) optInt(name resourceapi.QualifiedName, v *int64) {
	if v != nil {
		a.int(name, *v)
	}
}

func (a attributes) boolean(name resourceapi.QualifiedName, v bool) {
	a[name] = resourceapi.DeviceAttribute{BoolValue: &v}
}

func (a attributes) version(name resourceapi.QualifiedName, v string) {
	if s, ok := semver(v); ok {
		a[name] = resourceapi.DeviceAttribute{VersionValue: &s}
	}
}

// pci adds the standard pciBusID, pcieRoot and numaNode attributes.
func (a attributes) pci(p PCIInfo) {
	if attr, err := deviceattribute.GetPCIBusIDAttribute(p.BusID); err == nil {
		a[attr.Name] = attr.Value
	}
	if p.Root != "" {
		root := p.Root
		a[deviceattribute.StandardDeviceAttributePCIeRoot] = resourceapi.DeviceAttribute{StringValue: &root}
	}
	if p.NUMANode != nil {
		if attr, err := deviceattribute.GetNUMANodeAttribute(*p.NUMANode, deviceattribute.ScalarAttribute); err == nil {
			a[attr.Name] = attr.Value
		}
	}
}

// semver turns a dotted version ("9.0", "560.28.03") into semantic version
// form ("9.0.0", "560.28.3"): numeric parts only, leading zeros dropped,
// padded or cut to three parts.
func semver(v string) (string, bool) {
	if v == "" {
		return "", false
	}
	parts := strings.Split(v, ".")
	nums := []int{0, 0, 0}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return "", false
		}
		if i < len(nums) {
			nums[i] = n
		}
	}
	return fmt.Sprintf("%d.%d.%d", nums[0], nums[1], nums[2]), true
}
