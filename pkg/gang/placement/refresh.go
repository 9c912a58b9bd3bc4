package placement

import (
	"context"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
)

// refreshNode replaces a node's state with the cache's: node object, bound
// pods and allocated devices of the pools it owns in this snapshot. Its
// device index (slices are unchanged between rebuilds) is kept, and every
// level index moves the node's domain by the change of its free devices.
func (s *Snapshot) refreshNode(ctx context.Context, cn *cacheNode, pools map[poolID]map[structured.DeviceID]int) error {
	old := s.byName[cn.node.Name]
	ns := newNodeState(cn.node)
	ns.idx, ns.slices, ns.devs, ns.trimmed = old.idx, old.slices, old.devs, old.trimmed
	for _, p := range sortedByUID(cn.pods) {
		ns.addPod(podRequests(p))
		ns.boundPods = append(ns.boundPods, p)
	}
	for _, sl := range ns.slices {
		pid := poolID{sl.Spec.Driver, sl.Spec.Pool.Name}
		if owner := s.poolNode[pid]; owner != old && owner != ns {
			continue
		}
		s.poolNode[pid] = ns
		for id := range pools[pid] {
			ns.allocated.Insert(id)
		}
	}
	s.nodes[ns.idx], s.byName[ns.node.Name] = ns, ns
	for _, li := range s.levels {
		if li.class == "" {
			continue
		}
		before, err := s.freeDevices(ctx, old, li.class)
		if err != nil {
			return fmt.Errorf("node %s: %w", ns.node.Name, err)
		}
		after, err := s.freeDevices(ctx, ns, li.class)
		if err != nil {
			return fmt.Errorf("node %s: %w", ns.node.Name, err)
		}
		li.update(ns.node.Name, before, after)
	}
	return nil
}

// sortedByUID returns a map's objects ordered by UID, so that re-indexing
// is deterministic.
func sortedByUID[T any](m map[types.UID]T) []T {
	out := make([]T, 0, len(m))
	for _, uid := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[uid])
	}
	return out
}

// reindexGlobal rebuilds what the snapshot keeps across nodes from the
// claims holding devices of cluster-level pools and the bound pods with
// anti-affinity.
func (s *Snapshot) reindexGlobal(claims map[types.UID]*resourceapi.ResourceClaim, anti map[types.UID]*v1.Pod) {
	s.clusterAllocated = map[poolID][]structured.DeviceID{}
	s.holder = nil
	for _, c := range sortedByUID(claims) {
		for _, r := range c.Status.Allocation.Devices.Results {
			pid := poolID{r.Driver, r.Pool}
			if s.poolNode[pid] != nil {
				continue
			}
			if r.AdminAccess == nil || !*r.AdminAccess {
				s.clusterAllocated[pid] = append(s.clusterAllocated[pid], structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
			}
		}
		s.recordHolders(claimHolder(c), c.Status.Allocation)
	}
	s.antiIndex, s.antiWarnings = nil, nil
	for _, p := range sortedByUID(anti) {
		if ns := s.byName[p.Spec.NodeName]; ns != nil {
			s.indexAnti(p, ns.node)
		}
	}
}
