package index

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
)

// PlacedPod is a pod of a placement and the node it goes to.
type PlacedPod struct {
	Pod  *v1.Pod
	Node string
}

// Assume adds a placement to the snapshot: its pods use their nodes'
// resources (and their anti-affinity terms apply) and the allocations'
// devices are in use, held by holder ("namespace/name", for explanations),
// so the next placement sees them. It verifies nothing. A pod whose node is
// not in the snapshot (deleted since) is skipped: it holds nothing there.
// Level indexes move the touched nodes' domains; Cache.Update re-reads the
// touched nodes from the cache.
func (s *Snapshot) Assume(ctx context.Context, holder string, pods []PlacedPod, allocations []*resourceapi.AllocationResult) error {
	touched := map[*NodeState]bool{}
	for _, pp := range pods {
		ns := s.byName[pp.Node]
		if ns == nil {
			continue
		}
		ns.addPod(PodRequests(pp.Pod))
		ns.boundPods = append(ns.boundPods, pp.Pod)
		s.anti.add(pp.Pod, ns.node)
		touched[ns] = true
		s.globalTouched = s.globalTouched || hasAntiAffinity(pp.Pod)
	}
	for _, a := range allocations {
		for _, r := range a.Devices.Results {
			if ns := s.poolNode[poolID{r.Driver, r.Pool}]; ns != nil {
				touched[ns] = true
			} else {
				s.globalTouched = true
			}
		}
	}
	nodes := make([]*NodeState, 0, len(touched))
	for ns := range touched {
		nodes = append(nodes, ns)
		s.touched[ns.node.Name] = true
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].node.Name < nodes[j].node.Name })
	indexes := s.levels.sorted()
	before := map[*NodeState]map[string]int{}
	for _, ns := range nodes {
		before[ns] = map[string]int{}
		for _, li := range indexes {
			f, err := s.FreeDevices(ctx, ns, li.class)
			if err != nil {
				return err
			}
			before[ns][li.class] = f
		}
	}
	for _, a := range allocations {
		s.markAllocated(a)
		s.recordHolders(holder, a)
	}
	for _, li := range indexes {
		for _, ns := range nodes {
			f, err := s.FreeDevices(ctx, ns, li.class)
			if err != nil {
				return err
			}
			li.update(ns.node.Name, before[ns][li.class], f)
		}
	}
	return nil
}

// refreshNode replaces a node's state with the cache's: node object, bound
// pods and allocated devices of the pools it owns in this snapshot. Its
// device index (slices are unchanged between rebuilds) is kept, and every
// level index moves the node's domain by the change of its free devices.
func (s *Snapshot) refreshNode(ctx context.Context, cn *cacheNode, pools map[poolID]map[structured.DeviceID]int) error {
	old := s.byName[cn.node.Name]
	ns := newNodeState(cn.node)
	ns.idx, ns.slices, ns.devs, ns.trimmed = old.idx, old.slices, old.devs, old.trimmed
	for _, p := range sortedByUID(cn.pods) {
		ns.addPod(PodRequests(p))
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
	for _, li := range s.levels.sorted() {
		before, err := s.FreeDevices(ctx, old, li.class)
		if err != nil {
			return fmt.Errorf("node %s: %w", ns.node.Name, err)
		}
		after, err := s.FreeDevices(ctx, ns, li.class)
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
	s.anti = antiIndex{}
	for _, p := range sortedByUID(anti) {
		if ns := s.byName[p.Spec.NodeName]; ns != nil {
			s.anti.add(p, ns.node)
		}
	}
}

// claimHolder names who holds a claim's devices: "namespace/consumer".
func claimHolder(c *resourceapi.ResourceClaim) string {
	for _, r := range c.Status.ReservedFor {
		return c.Namespace + "/" + r.Name
	}
	return c.Namespace + "/" + c.Name
}

// recordHolders notes, for cluster-level devices, who holds them.
func (s *Snapshot) recordHolders(who string, a *resourceapi.AllocationResult) {
	for _, r := range a.Devices.Results {
		if s.poolNode[poolID{r.Driver, r.Pool}] == nil {
			if s.holder == nil {
				s.holder = map[structured.DeviceID]string{}
			}
			s.holder[structured.MakeDeviceID(r.Driver, r.Pool, r.Device)] = who
		}
	}
}
