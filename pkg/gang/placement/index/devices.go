package index

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Unbounded stands for "no count bound": FreeDevices reports it when a
// cluster-level pool has devices of the class.
const Unbounded = 1 << 30

// Matching returns the node-local devices that match a class, sorted.
// Callers must not modify the slice.
func (s *Snapshot) Matching(ctx context.Context, ns *NodeState, class string) ([]structured.DeviceID, error) {
	d := ns.devices()
	if ids, ok := d.match[class]; ok {
		return ids, nil
	}
	ids := []structured.DeviceID{}
	for _, sl := range ns.slices {
		m, err := s.match.sliceMatches(ctx, sl, class)
		if err != nil {
			return nil, err
		}
		for i := range sl.Spec.Devices {
			id := structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, sl.Spec.Devices[i].Name)
			if m[i] && d.byID[id] == &sl.Spec.Devices[i] {
				ids = append(ids, id)
			}
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	d.match[class] = ids
	return ids, nil
}

// FreeDevices counts the node's free devices matching a class. When some
// cluster-level slice has a device of the class, the count is no bound and
// FreeDevices reports Unbounded.
func (s *Snapshot) FreeDevices(ctx context.Context, ns *NodeState, class string) (int, error) {
	if v, ok := ns.free[class]; ok {
		return v, nil
	}
	inCluster, err := s.ClassInCluster(ctx, class)
	if err != nil {
		return 0, err
	}
	free := Unbounded
	if !inCluster {
		ids, err := s.Matching(ctx, ns, class)
		if err != nil {
			return 0, err
		}
		free = 0
		for _, id := range ids {
			if !ns.allocated.Has(id) {
				free++
			}
		}
	}
	ns.free[class] = free
	return free, nil
}

// freeOn is FreeDevices by node name (freeCounter).
func (s *Snapshot) freeOn(ctx context.Context, node, class string) (int, error) {
	return s.FreeDevices(ctx, s.byName[node], class)
}

// ClassInCluster reports whether a cluster-level slice has a device of the
// class: then node counts bound nothing, the allocator decides.
func (s *Snapshot) ClassInCluster(ctx context.Context, class string) (bool, error) {
	for _, cs := range s.clusterSlices {
		ok, err := cs.hasClass(ctx, s.match, class)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// clusterSlicesFor returns the cluster-level slices that reach the node and
// hold a device of one of the classes.
func (s *Snapshot) clusterSlicesFor(ctx context.Context, ns *NodeState, classes []string) ([]*clusterSlice, error) {
	var out []*clusterSlice
	for _, cs := range s.clusterSlices {
		use := false
		for _, c := range classes {
			ok, err := cs.hasClass(ctx, s.match, c)
			if err != nil {
				return nil, err
			}
			use = use || ok
		}
		if use && (cs.selector == nil || cs.selector.Match(ns.node)) {
			out = append(out, cs)
		}
	}
	return out, nil
}

// ClusterSliceNames names, sorted, the cluster-level slices that reach the
// node and hold a device of one of the classes: what an Allocate call for
// those classes sees besides the node's own slices.
func (s *Snapshot) ClusterSliceNames(ctx context.Context, ns *NodeState, classes []string) ([]string, error) {
	cluster, err := s.clusterSlicesFor(ctx, ns, classes)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(cluster))
	for i, cs := range cluster {
		names[i] = cs.slice.Name
	}
	return names, nil
}

// InFlight is the devices a placement holds before it is written, by pool:
// Allocate counts them as allocated.
type InFlight map[poolID][]structured.DeviceID

// Add adds the devices of allocation results (admin access takes none).
func (f InFlight) Add(results []resourceapi.AllocationResult) {
	for _, r := range results {
		for _, d := range r.Devices.Results {
			if d.AdminAccess != nil && *d.AdminAccess {
				continue
			}
			pid := poolID{d.Driver, d.Pool}
			f[pid] = append(f[pid], structured.MakeDeviceID(d.Driver, d.Pool, d.Device))
		}
	}
}

// Clone returns a copy that Add does not share.
func (f InFlight) Clone() InFlight {
	out := make(InFlight, len(f))
	for pid, ids := range f {
		out[pid] = slices.Clone(ids)
	}
	return out
}

// OnNode returns the devices in flight of the node's local pools.
func (f InFlight) OnNode(ns *NodeState) sets.Set[structured.DeviceID] {
	taken := sets.New[structured.DeviceID]()
	for _, sl := range ns.slices {
		taken.Insert(f[poolID{sl.Spec.Driver, sl.Spec.Pool.Name}]...)
	}
	return taken
}

// Allocation is the answer of one Allocate call.
type Allocation struct {
	// Results has one result per claim; nil when the claims do not fit
	// on the node (refused, or TimedOut).
	Results []resourceapi.AllocationResult
	// TimedOut: the call ran out of Config.AllocateTimeout.
	TimedOut bool
	// Took is how long the allocator ran; End is when it returned, by the
	// index's clock (the engine reads no clock: it compares End with its
	// budget's deadline).
	Took time.Duration
	End  time.Time
}

// Allocate runs the structured allocator for claims on one node, seeing
// only the node's slices and the cluster-level slices that reach it and
// hold a device of one of classes (the claims' classes), with the devices
// in flight counted as allocated. A call whose requests use one class sees
// the slices trimmed to that class (trim.go). An error means bad input or
// a cancelled ctx; claims that do not fit give Results nil.
func (s *Snapshot) Allocate(ctx context.Context, ns *NodeState, claims []*resourceapi.ResourceClaim, classes []string, inflight InFlight) (Allocation, error) {
	cluster, err := s.clusterSlicesFor(ctx, ns, classes)
	if err != nil {
		return Allocation{}, err
	}
	sl, classLister, err := s.allocatorInput(ctx, ns, cluster, classes)
	if err != nil {
		return Allocation{}, err
	}
	alloc, err := structured.NewAllocator(ctx, *s.cfg.Features, s.allocatedFor(ns, cluster, inflight), classLister, sl, s.match.cel)
	if err != nil {
		return Allocation{}, fmt.Errorf("new allocator: %w", err)
	}
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.AllocateTimeout)
	defer cancel()
	start := time.Now()
	res, err := alloc.Allocate(callCtx, ns.node, claims)
	end := time.Now()
	took := end.Sub(start)
	switch {
	case err == nil:
		return Allocation{Results: res, Took: took, End: end}, nil
	case ctx.Err() != nil:
		return Allocation{}, fmt.Errorf("allocate on node %s: %w", ns.node.Name, ctx.Err())
	case callCtx.Err() != nil:
		return Allocation{TimedOut: true, Took: took, End: end}, nil
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return Allocation{Took: took, End: end}, nil
	default:
		return Allocation{}, fmt.Errorf("allocate on node %s: %w", ns.node.Name, err)
	}
}

// allocatorInput is what one Allocate call sees: the node's slices and the
// cluster slices that matter, trimmed to the class when the call uses one
// class (see trim.go).
func (s *Snapshot) allocatorInput(ctx context.Context, ns *NodeState, cluster []*clusterSlice, classes []string) ([]*resourceapi.ResourceSlice, structured.DeviceClassLister, error) {
	if len(classes) == 1 {
		sl, err := s.match.trimSlices(ctx, ns, cluster, classes[0])
		return sl, s.match.withoutSelectors(), err
	}
	sl := make([]*resourceapi.ResourceSlice, 0, len(ns.slices)+len(cluster))
	sl = append(sl, ns.slices...)
	for _, cs := range cluster {
		sl = append(sl, cs.slice)
	}
	return sl, s.match.classes, nil
}

// allocatedFor returns the allocated state for one Allocate call on ns with
// the given cluster slices: only devices of pools the call can see, plus
// the devices in flight.
func (s *Snapshot) allocatedFor(ns *NodeState, cluster []*clusterSlice, inflight InFlight) structured.AllocatedState {
	set := sets.New[structured.DeviceID]()
	set = set.Union(ns.allocated)
	seen := map[poolID]bool{}
	add := func(pid poolID) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		set.Insert(s.clusterAllocated[pid]...)
		set.Insert(inflight[pid]...)
	}
	for _, sl := range ns.slices {
		add(poolID{sl.Spec.Driver, sl.Spec.Pool.Name})
	}
	for _, cs := range cluster {
		add(poolID{cs.slice.Spec.Driver, cs.slice.Spec.Pool.Name})
	}
	return structured.AllocatedState{
		AllocatedDevices:         set,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}

// FreeDeviceKey names a node's free devices by content: every device not
// allocated and not in shared, without its name, plus the shape of the
// node's pools. Two nodes with the same key give the same answer to the
// same Allocate call. It is "" when that cannot be told from the node's
// own devices: a cluster-level pool of the classes reaches the node, or a
// device shares counters or allows several allocations.
func (s *Snapshot) FreeDeviceKey(ctx context.Context, ns *NodeState, classes []string, shared sets.Set[structured.DeviceID]) (string, error) {
	cluster, err := s.clusterSlicesFor(ctx, ns, classes)
	if err != nil || len(cluster) > 0 {
		return "", err
	}
	newest := map[poolID]int64{}
	for _, sl := range ns.slices {
		if len(sl.Spec.SharedCounters) > 0 {
			return "", nil
		}
		pid := poolID{sl.Spec.Driver, sl.Spec.Pool.Name}
		newest[pid] = max(newest[pid], sl.Spec.Pool.Generation)
	}
	var parts []string
	for _, sl := range ns.slices {
		// Pool shape: the allocator refuses incomplete pools.
		parts = append(parts, fmt.Sprintf("slice %s %v %d", sl.Spec.Driver, newest[poolID{sl.Spec.Driver, sl.Spec.Pool.Name}] == sl.Spec.Pool.Generation, sl.Spec.Pool.ResourceSliceCount))
	}
	d := ns.devices()
	for _, id := range d.ids {
		if ns.allocated.Has(id) || shared.Has(id) {
			continue
		}
		sig, err := d.signature(id)
		if err != nil || sig == "" {
			return "", err
		}
		parts = append(parts, sig)
	}
	sort.Strings(parts)
	return strings.Join(parts, "\x00"), nil
}

// TaintedFree returns the taint keys (NoSchedule or NoExecute) of a node's
// free devices of a class, and how many such devices there are; none when
// a cluster-level pool has devices of the class.
func (s *Snapshot) TaintedFree(ctx context.Context, ns *NodeState, class string) ([]string, int, error) {
	inCluster, err := s.ClassInCluster(ctx, class)
	if err != nil || inCluster {
		return nil, 0, err
	}
	ids, err := s.Matching(ctx, ns, class)
	if err != nil {
		return nil, 0, err
	}
	devs := ns.devices()
	keys := map[string]bool{}
	n := 0
	for _, id := range ids {
		if ns.allocated.Has(id) {
			continue
		}
		tainted := false
		for _, t := range devs.byID[id].Taints {
			if t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute {
				keys[t.Key] = true
				tainted = true
			}
		}
		if tainted {
			n++
		}
	}
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, n, nil
}

// PoolUse returns the devices of a cluster-level pool of the gpufabric
// driver and who holds the allocated ones ("namespace/consumer", sorted).
func (s *Snapshot) PoolUse(pool string) (int, []string) {
	total := 0
	for _, cs := range s.clusterSlices {
		if cs.slice.Spec.Pool.Name == pool && cs.slice.Spec.Driver == topology.DriverName {
			total += len(cs.slice.Spec.Devices)
		}
	}
	var users []string
	for _, id := range s.clusterAllocated[poolID{topology.DriverName, pool}] {
		users = append(users, s.holder[id])
	}
	sort.Strings(users)
	return total, users
}

// ShapeKey names the node's devices by shape: for every device of its local
// pools (newest generation; free or not), its driver, its attribute names
// with their value types, its capacity names and whether it has taints,
// counted per shape; then the cluster-level slices of the classes that
// reach the node, by name. Cached per node for the device part.
func (s *Snapshot) ShapeKey(ctx context.Context, ns *NodeState, classes []string) (string, error) {
	d := ns.devices()
	if d.shape == "" {
		counts := map[string]int{}
		for _, id := range d.ids {
			counts[d.drv[id]+"\x01"+deviceShape(d.byID[id])]++
		}
		parts := make([]string, 0, len(counts))
		for sh, n := range counts {
			parts = append(parts, strconv.Itoa(n)+"\x02"+sh)
		}
		sort.Strings(parts)
		d.shape = "devices\x00" + strings.Join(parts, "\x00")
	}
	names, err := s.ClusterSliceNames(ctx, ns, classes)
	if err != nil || len(names) == 0 {
		return d.shape, err
	}
	return d.shape + "\x00cluster\x00" + strings.Join(names, "\x00"), nil
}
