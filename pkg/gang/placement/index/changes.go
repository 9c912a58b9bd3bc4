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
// touched nodes from the cache. While a Mark is open, Rollback undoes it
// (rollback.go).
func (s *Snapshot) Assume(ctx context.Context, holder string, pods []PlacedPod, allocations []*resourceapi.AllocationResult) error {
	return s.assumeRecorded(ctx, holder, pods, allocations)
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

// Mark is a point in a snapshot's Assume calls that Rollback returns to:
// a search over several gangs (a CompositePodGroup's children) assumes a
// child's decision to place its siblings on what is left, and rolls back
// the ones that lead nowhere.
type Mark struct{ at int }

// assumed is what one Assume call changed, to be undone.
type assumed struct {
	pods []assumedPod
	// devices: node-local devices it marked allocated (new ones only);
	// cluster: how long each cluster-level pool's list was before.
	devices []assumedDevice
	cluster map[poolID]int
	// holders: the cluster-level devices' holders before ("" for none).
	holders map[structured.DeviceID]string
	nodes   []*NodeState // touched, sorted by name
}

type assumedPod struct {
	ns  *NodeState
	req ResList
	// anti: the anti-affinity lists it appended to, with their length
	// before.
	anti []antiAppend
}

type assumedDevice struct {
	ns *NodeState
	id structured.DeviceID
}

// Mark returns the point to roll back to; from now until every mark is
// released or rolled back, Assume records what it changes. Marks nest.
func (s *Snapshot) Mark() Mark {
	s.marks++
	return Mark{at: len(s.undo)}
}

// Release keeps what was assumed since m and ends m's recording (the
// changes stay, as after any Assume).
func (s *Snapshot) Release(m Mark) {
	s.endMark(m)
}

// Rollback undoes every Assume since m, newest first, and ends m: the
// snapshot answers as it did at m (free counts, level indexes, anti
// terms, holders).
func (s *Snapshot) Rollback(ctx context.Context, m Mark) error {
	if m.at > len(s.undo) || s.marks == 0 {
		return fmt.Errorf("rollback to a mark that is gone (%d of %d changes, %d marks)", m.at, len(s.undo), s.marks)
	}
	for len(s.undo) > m.at {
		a := s.undo[len(s.undo)-1]
		s.undo = s.undo[:len(s.undo)-1]
		if err := s.undoOne(ctx, a); err != nil {
			return err
		}
	}
	s.endMark(m)
	return nil
}

// endMark ends a mark; the changes since it stay recorded while an outer
// mark is open (its Rollback undoes them too).
func (s *Snapshot) endMark(Mark) {
	if s.marks > 0 {
		s.marks--
	}
	if s.marks == 0 {
		s.undo = nil
	}
}

// undoOne reverses one Assume call.
func (s *Snapshot) undoOne(ctx context.Context, a *assumed) error {
	return s.moveLevels(ctx, a.nodes, func() {
		for i := len(a.pods) - 1; i >= 0; i-- {
			p := a.pods[i]
			p.ns.requested.Add(p.req, -1)
			p.ns.pods--
			p.ns.boundPods = p.ns.boundPods[:len(p.ns.boundPods)-1]
			s.anti.undo(p.anti)
		}
		for _, d := range a.devices {
			d.ns.allocated.Delete(d.id)
			d.ns.dirty()
		}
		for pid, n := range a.cluster {
			if n == 0 {
				delete(s.clusterAllocated, pid)
			} else {
				s.clusterAllocated[pid] = s.clusterAllocated[pid][:n]
			}
		}
		for id, who := range a.holders {
			if who == "" {
				delete(s.holder, id)
			} else {
				s.holder[id] = who
			}
		}
	})
}

// moveLevels runs change and moves every level index by the change of the
// nodes' free devices.
func (s *Snapshot) moveLevels(ctx context.Context, nodes []*NodeState, change func()) error {
	indexes := s.levels.sorted()
	before := make([]map[string]int, len(nodes))
	for i, ns := range nodes {
		before[i] = map[string]int{}
		for _, li := range indexes {
			f, err := s.FreeDevices(ctx, ns, li.class)
			if err != nil {
				return err
			}
			before[i][li.class] = f
		}
	}
	change()
	for _, li := range indexes {
		for i, ns := range nodes {
			f, err := s.FreeDevices(ctx, ns, li.class)
			if err != nil {
				return err
			}
			li.update(ns.node.Name, before[i][li.class], f)
		}
	}
	return nil
}

// assumeRecorded is Assume's change, recorded for Rollback when a mark
// is open.
func (s *Snapshot) assumeRecorded(ctx context.Context, holder string, pods []PlacedPod, allocations []*resourceapi.AllocationResult) error {
	var rec *assumed
	if s.marks > 0 {
		rec = &assumed{cluster: map[poolID]int{}, holders: map[structured.DeviceID]string{}}
	}
	touched := map[*NodeState]bool{}
	for _, pp := range pods {
		if ns := s.byName[pp.Node]; ns != nil {
			touched[ns] = true
		}
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
	err := s.moveLevels(ctx, nodes, func() {
		for _, pp := range pods {
			s.assumePod(rec, pp)
		}
		for _, a := range allocations {
			s.assumeAllocation(rec, holder, a)
		}
	})
	if rec != nil {
		rec.nodes = nodes
		s.undo = append(s.undo, rec)
	}
	return err
}

// assumePod adds a placed pod to its node (and rec, when recording).
func (s *Snapshot) assumePod(rec *assumed, pp PlacedPod) {
	ns := s.byName[pp.Node]
	if ns == nil {
		return
	}
	req := PodRequests(pp.Pod)
	ns.addPod(req)
	ns.boundPods = append(ns.boundPods, pp.Pod)
	appended := s.anti.add(pp.Pod, ns.node)
	s.globalTouched = s.globalTouched || hasAntiAffinity(pp.Pod)
	if rec != nil {
		rec.pods = append(rec.pods, assumedPod{ns: ns, req: req, anti: appended})
	}
}

// assumeAllocation marks an allocation's devices in use, held by holder
// (and notes in rec what it changed, when recording).
func (s *Snapshot) assumeAllocation(rec *assumed, holder string, a *resourceapi.AllocationResult) {
	if rec != nil {
		for _, r := range a.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			pid := poolID{r.Driver, r.Pool}
			if ns := s.poolNode[pid]; ns != nil {
				if !ns.allocated.Has(id) {
					rec.devices = append(rec.devices, assumedDevice{ns: ns, id: id})
				}
				continue
			}
			if _, ok := rec.cluster[pid]; !ok {
				rec.cluster[pid] = len(s.clusterAllocated[pid])
			}
			if _, ok := rec.holders[id]; !ok {
				rec.holders[id] = s.holder[id]
			}
		}
	}
	s.markAllocated(a)
	s.recordHolders(holder, a)
}
