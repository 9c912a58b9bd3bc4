package placement

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// channelsWithoutGPUs returns why a decision may not stand, "" when it
// may: a fabric-domain channel (a device of a topology.IsFabricDomainPool
// pool) goes only to a gang that uses a GPU of that channel's domain, one
// of its members' own claims allocating a GPU (or MIG partition) on a node
// the channel's node selector selects. A domain has few channels
// (--domain-channels, 8 by default) and a gang without GPUs there has no
// use for IMEX in it: without this rule, GPU-less pods could take all of a
// domain's channels and keep every GPU gang out of it.
func channelsWithoutGPUs(s *index.Snapshot, d *Decision) (string, error) {
	nodeOf := make(map[string]string, len(d.Pods))
	for _, p := range d.Pods {
		nodeOf[p.Name] = p.Node
	}
	var gpuNodes []*index.NodeState
	for _, c := range d.Claims {
		if !c.Shared && allocatesGPU(c.Allocation) {
			if ns := s.Node(nodeOf[c.Pod]); ns != nil {
				gpuNodes = append(gpuNodes, ns)
			}
		}
	}
	for _, c := range d.Claims {
		pool, ok := channelPool(c.Allocation)
		if !ok {
			continue
		}
		sel := c.Allocation.NodeSelector
		used := false
		for _, ns := range gpuNodes {
			if sel == nil {
				used = true
				break
			}
			m, err := nodeaffinity.NewNodeSelector(sel)
			if err != nil {
				return "", fmt.Errorf("claim %s/%s: node selector: %w", c.Namespace, c.Name, err)
			}
			if m.Match(ns.Node()) {
				used = true
				break
			}
		}
		if !used {
			return fmt.Sprintf("claim %s/%s asks for a fabric-domain channel (%s), but no member of the gang uses a GPU of that NVLink domain: "+
				"a domain's channels go only to gangs that use its GPUs", c.Namespace, c.Name, pool), nil
		}
	}
	return "", nil
}

// allocatesGPU reports whether an allocation holds a GPU or MIG partition
// of driver gpufabric.dev (admin access holds none).
func allocatesGPU(a resourceapi.AllocationResult) bool {
	for _, r := range a.Devices.Results {
		if r.Driver == topology.DriverName && !topology.IsFabricDomainPool(r.Pool) && topology.IsGPUDeviceName(r.Device) &&
			(r.AdminAccess == nil || !*r.AdminAccess) {
			return true
		}
	}
	return false
}

// channelPool returns the fabric-domain pool of an allocation's first
// channel, if it has one.
func channelPool(a resourceapi.AllocationResult) (string, bool) {
	for _, r := range a.Devices.Results {
		if r.Driver == topology.DriverName && topology.IsFabricDomainPool(r.Pool) {
			return r.Pool, true
		}
	}
	return "", false
}
