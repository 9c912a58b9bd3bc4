package index

import (
	"maps"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// gpuIndex is the Cache's view of the GPUs that node-local slices of
// driver topology.DriverName publish, for FreeGPUs. It is rebuilt from the
// cache's slices (topology.NodeGPUs) on the first FreeGPUs after such a
// slice was added, changed or deleted, and kept otherwise.
type gpuIndex struct {
	stale bool
	// domains: the NVLink domain of each published GPU that has one, by
	// device; one entry per node publishing it (a pool name two nodes
	// publish gives two).
	domains map[structured.DeviceID][]string
	// total: the published GPUs per NVLink domain; held: those of them an
	// allocated claim holds (kept up to date by countDevices while the
	// index is not stale).
	total, held map[string]int
}

// isGPUSlice reports whether topology.NodeGPUs reads sl: a node-local slice
// of driver topology.DriverName.
func isGPUSlice(sl *resourceapi.ResourceSlice) bool {
	return sl != nil && sl.Spec.Driver == topology.DriverName && sliceNodeName(sl) != ""
}

// noteSlice marks the GPU index stale when the slice named name, as the
// cache has it, or its replacement sl (nil on delete) is one NodeGPUs
// reads. Callers hold c.mu and call it before changing the slice.
func (c *Cache) noteSlice(name string, sl *resourceapi.ResourceSlice) {
	if isGPUSlice(sl) {
		c.gpus.stale = true
		return
	}
	if n, ok := c.sliceNode[name]; ok && c.nodes[n] != nil && isGPUSlice(c.nodes[n].slices[name]) {
		c.gpus.stale = true
	}
}

// refreshGPUs rebuilds the GPU index when it is stale (or was never
// built). Callers hold c.mu.
func (c *Cache) refreshGPUs() {
	if c.gpus.domains != nil && !c.gpus.stale {
		return
	}
	var gpuSlices []*resourceapi.ResourceSlice
	for _, cn := range c.nodes {
		for _, sl := range cn.slices {
			if isGPUSlice(sl) {
				gpuSlices = append(gpuSlices, sl)
			}
		}
	}
	gpus := topology.NodeGPUs(gpuSlices)
	n := 0
	for _, info := range gpus {
		n += len(info.Devices)
	}
	c.gpus = gpuIndex{domains: make(map[structured.DeviceID][]string, n), total: map[string]int{}, held: map[string]int{}}
	for _, info := range gpus {
		for _, g := range info.Devices {
			if g.NVLinkDomain == "" {
				continue
			}
			id := structured.MakeDeviceID(topology.DriverName, g.Pool, g.Device)
			c.gpus.domains[id] = append(c.gpus.domains[id], g.NVLinkDomain)
			c.gpus.total[g.NVLinkDomain]++
		}
	}
	for pid, devs := range c.pools {
		if pid.driver != topology.DriverName {
			continue
		}
		for id := range devs {
			c.holdGPU(id, 1)
		}
	}
}

// holdGPU counts a device that allocated claims started (delta 1) or
// stopped (delta -1) holding in the held GPUs of its domains. While the
// index is stale it does nothing: refreshGPUs recounts. Callers hold c.mu.
func (c *Cache) holdGPU(id structured.DeviceID, delta int) {
	if c.gpus.stale || c.gpus.domains == nil {
		return
	}
	for _, d := range c.gpus.domains[id] {
		c.gpus.held[d] += delta
	}
}

// FreeGPUs counts, per NVLink domain, the GPUs of driver
// topology.DriverName that are free. Rules:
//   - a GPU is a device of a node-local slice of that driver with the type
//     gpu and an nvlinkDomain attribute, in the newest generation of its
//     pool (topology.NodeGPUs); a device a pool name publishes on two
//     nodes counts once per node;
//   - it is not free when an allocated claim the cache holds has it (a
//     result with admin access takes nothing), or when it is in extra (the
//     caller's devices not shown yet, e.g. assumed decisions; duplicates,
//     devices already held and devices that are no GPU change nothing);
//   - every domain with a GPU appears, with 0 when none is free.
//
// Cost: in proportion to the domains and extra (the held GPUs per domain
// are kept as claims change); the first call after a GPU slice changed
// also reads every slice and allocated device. Safe for concurrent use.
func (c *Cache) FreeGPUs(extra []structured.DeviceID) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshGPUs()
	free := maps.Clone(c.gpus.total)
	for d, n := range c.gpus.held {
		free[d] -= n
	}
	take := func(id structured.DeviceID) {
		for _, d := range c.gpus.domains[id] {
			free[d]--
		}
	}
	var taken map[structured.DeviceID]bool
	for _, id := range extra {
		if taken[id] || c.pools[poolID{id.Driver.String(), id.Pool.String()}][id] > 0 {
			continue
		}
		if taken == nil {
			taken = map[structured.DeviceID]bool{}
		}
		taken[id] = true
		take(id)
	}
	return free
}
