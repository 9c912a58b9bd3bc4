package topology

import (
	"slices"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
)

// GPU is one GPU device as published in a node-local pool.
type GPU struct {
	Pool         string
	Device       string
	NVLinkDomain string
	// IBRail is the rail of the nearest HCA; HasIBRail says whether the
	// device carries the attribute.
	IBRail    int64
	HasIBRail bool
}

// NodeGPUInfo summarizes the GPUs of one node.
type NodeGPUInfo struct {
	// Devices sorted by pool, then device name.
	Devices []GPU
	// Domains are the distinct nvlinkDomain values of the GPUs, sorted.
	Domains []string
	// NVLinkDomain is Domains[0], or "" when no GPU has the attribute.
	NVLinkDomain string
}

// NodeGPUs reads the GPUs of driver gpufabric.dev from node-local pools
// (spec.nodeName set), keyed by node name. For each pool only slices of its
// newest generation count.
func NodeGPUs(resourceSlices []*resourceapi.ResourceSlice) map[string]NodeGPUInfo {
	type poolKey struct{ node, pool string }
	newest := map[poolKey]int64{}
	for _, s := range resourceSlices {
		if !isNodeLocal(s) {
			continue
		}
		k := poolKey{*s.Spec.NodeName, s.Spec.Pool.Name}
		if g, ok := newest[k]; !ok || s.Spec.Pool.Generation > g {
			newest[k] = s.Spec.Pool.Generation
		}
	}
	out := map[string]NodeGPUInfo{}
	for _, s := range resourceSlices {
		if !isNodeLocal(s) || newest[poolKey{*s.Spec.NodeName, s.Spec.Pool.Name}] != s.Spec.Pool.Generation {
			continue
		}
		info := out[*s.Spec.NodeName]
		for i := range s.Spec.Devices {
			if gpu, ok := gpuFromDevice(s.Spec.Pool.Name, &s.Spec.Devices[i]); ok {
				info.Devices = append(info.Devices, gpu)
			}
		}
		out[*s.Spec.NodeName] = info
	}
	for node, info := range out {
		sort.Slice(info.Devices, func(i, j int) bool {
			a, b := info.Devices[i], info.Devices[j]
			if a.Pool != b.Pool {
				return a.Pool < b.Pool
			}
			return a.Device < b.Device
		})
		for _, g := range info.Devices {
			if g.NVLinkDomain != "" && !slices.Contains(info.Domains, g.NVLinkDomain) {
				info.Domains = append(info.Domains, g.NVLinkDomain)
			}
		}
		sort.Strings(info.Domains)
		if len(info.Domains) > 0 {
			info.NVLinkDomain = info.Domains[0]
		}
		out[node] = info
	}
	return out
}

func isNodeLocal(s *resourceapi.ResourceSlice) bool {
	return s.Spec.Driver == DriverName && s.Spec.NodeName != nil && *s.Spec.NodeName != ""
}

func gpuFromDevice(pool string, d *resourceapi.Device) (GPU, bool) {
	if t := d.Attributes[AttrType]; t.StringValue == nil || *t.StringValue != DeviceTypeGPU {
		return GPU{}, false
	}
	gpu := GPU{Pool: pool, Device: d.Name}
	if v := d.Attributes[AttrNVLinkDomain]; v.StringValue != nil {
		gpu.NVLinkDomain = *v.StringValue
	}
	if v := d.Attributes[AttrIBRail]; v.IntValue != nil {
		gpu.IBRail, gpu.HasIBRail = *v.IntValue, true
	}
	return gpu, true
}

// DeviceIBRail returns a device's ibRail attribute, accepting both the
// unqualified and the driver-qualified spelling.
func DeviceIBRail(d *resourceapi.Device) (int64, bool) {
	for _, name := range []resourceapi.QualifiedName{AttrIBRail, resourceapi.QualifiedName(Qualified(AttrIBRail))} {
		if v, ok := d.Attributes[name]; ok && v.IntValue != nil {
			return *v.IntValue, true
		}
	}
	return 0, false
}
