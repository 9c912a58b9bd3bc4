package placement

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// nodeDevices indexes the devices of a node's local pools (newest
// generation of each pool).
type nodeDevices struct {
	byID  map[structured.DeviceID]*resourceapi.Device
	ids   []structured.DeviceID // sorted by pool, then device
	drv   map[structured.DeviceID]string
	match map[string][]structured.DeviceID // class → matching devices
	sig   map[structured.DeviceID]string   // content signatures (searchmemo.go)
}

func (s *Snapshot) devicesOf(ns *nodeState) *nodeDevices {
	if ns.devs != nil {
		return ns.devs
	}
	newest := map[poolID]int64{}
	for _, sl := range ns.slices {
		pid := poolID{sl.Spec.Driver, sl.Spec.Pool.Name}
		if g, ok := newest[pid]; !ok || sl.Spec.Pool.Generation > g {
			newest[pid] = sl.Spec.Pool.Generation
		}
	}
	d := &nodeDevices{byID: map[structured.DeviceID]*resourceapi.Device{}, drv: map[structured.DeviceID]string{}, match: map[string][]structured.DeviceID{}}
	for _, sl := range ns.slices {
		if newest[poolID{sl.Spec.Driver, sl.Spec.Pool.Name}] != sl.Spec.Pool.Generation {
			continue
		}
		for i := range sl.Spec.Devices {
			dev := &sl.Spec.Devices[i]
			id := structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, dev.Name)
			d.byID[id] = dev
			d.drv[id] = sl.Spec.Driver
			d.ids = append(d.ids, id)
		}
	}
	sort.Slice(d.ids, func(i, j int) bool { return d.ids[i].String() < d.ids[j].String() })
	ns.devs = d
	return d
}

// classMatches evaluates a DeviceClass's selectors on one device.
func (s *Snapshot) classMatches(ctx context.Context, className, driver string, dev *resourceapi.Device) (bool, error) {
	class, err := s.classes.Get(className)
	if err != nil {
		return false, err
	}
	for _, sel := range class.Spec.Selectors {
		if sel.CEL == nil {
			continue
		}
		prog := s.celCache.GetOrCompile(sel.CEL.Expression)
		if prog.Error != nil {
			return false, fmt.Errorf("device class %s: %w", className, prog.Error)
		}
		ok, _, err := prog.DeviceMatches(ctx, cel.Device{Driver: driver, AllowMultipleAllocations: dev.AllowMultipleAllocations, Attributes: dev.Attributes, Capacity: dev.Capacity})
		if err != nil {
			return false, fmt.Errorf("device class %s: %w", className, err)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// matching returns the node-local devices that match a class.
func (s *Snapshot) matching(ctx context.Context, ns *nodeState, class string) ([]structured.DeviceID, error) {
	d := s.devicesOf(ns)
	if ids, ok := d.match[class]; ok {
		return ids, nil
	}
	ids := []structured.DeviceID{}
	for _, sl := range ns.slices {
		m, err := s.sliceMatches(ctx, sl, class)
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

// freeDevices counts the node's free devices matching a class. When some
// cluster-level slice has a device of the class, the count is no bound and
// freeDevices reports a large number.
func (s *Snapshot) freeDevices(ctx context.Context, ns *nodeState, class string) (int, error) {
	if v, ok := ns.free[class]; ok {
		return v, nil
	}
	inCluster, err := s.classInCluster(ctx, class)
	if err != nil {
		return 0, err
	}
	free := unbounded
	if !inCluster {
		ids, err := s.matching(ctx, ns, class)
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

// unbounded stands for "no count bound".
const unbounded = 1 << 30

func (s *Snapshot) classInCluster(ctx context.Context, class string) (bool, error) {
	for _, cs := range s.clusterSlices {
		ok, err := s.clusterHasClass(ctx, cs, class)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

func (s *Snapshot) clusterHasClass(ctx context.Context, cs *clusterSlice, class string) (bool, error) {
	if v, ok := cs.classes[class]; ok {
		return v, nil
	}
	m, err := s.sliceMatches(ctx, cs.slice, class)
	if err != nil {
		return false, err
	}
	found := false
	for _, ok := range m {
		found = found || ok
	}
	cs.classes[class] = found
	return found, nil
}

// clusterSlicesFor returns the cluster-level slices that reach the node and
// hold a device of one of the classes.
func (s *Snapshot) clusterSlicesFor(ctx context.Context, ns *nodeState, classes []string) ([]*clusterSlice, error) {
	var out []*clusterSlice
	for _, cs := range s.clusterSlices {
		use := false
		for _, c := range classes {
			ok, err := s.clusterHasClass(ctx, cs, c)
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

// allocate runs the structured allocator for claims on one node, seeing
// only the node's slices and the cluster slices that matter, with the
// gang's in-flight devices marked as allocated. It returns nil and the
// failed check when the claims do not fit.
func (s *Snapshot) allocate(ctx context.Context, ns *nodeState, claims []*resourceapi.ResourceClaim, classes []string, inflight map[poolID][]structured.DeviceID, st *Stats) ([]resourceapi.AllocationResult, string, error) {
	cluster, err := s.clusterSlicesFor(ctx, ns, classes)
	if err != nil {
		return nil, "", err
	}
	sl, classLister, err := s.allocatorInput(ctx, ns, cluster, classes)
	if err != nil {
		return nil, "", err
	}
	alloc, err := structured.NewAllocator(ctx, *s.cfg.Features, s.allocatedFor(ns, cluster, inflight), classLister, sl, s.celCache)
	if err != nil {
		return nil, "", fmt.Errorf("new allocator: %w", err)
	}
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.AllocateTimeout)
	defer cancel()
	start := time.Now()
	res, err := alloc.Allocate(callCtx, ns.node, claims)
	st.record(time.Since(start))
	switch {
	case err == nil && res == nil:
		return nil, CheckAllocator, nil
	case err == nil:
		return res, "", nil
	case ctx.Err() != nil:
		return nil, "", fmt.Errorf("allocate on node %s: %w", ns.node.Name, ctx.Err())
	case callCtx.Err() != nil:
		return nil, CheckAllocatorTime, nil
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return nil, CheckAllocator, nil
	default:
		return nil, "", fmt.Errorf("allocate on node %s: %w", ns.node.Name, err)
	}
}

// allocatorInput is what one Allocate call sees: the node's slices and the
// cluster slices that matter, trimmed to the class when the call uses one
// class (see trim.go).
func (s *Snapshot) allocatorInput(ctx context.Context, ns *nodeState, cluster []*clusterSlice, classes []string) ([]*resourceapi.ResourceSlice, structured.DeviceClassLister, error) {
	if len(classes) == 1 {
		sl, err := s.trimSlices(ctx, ns, cluster, classes[0])
		return sl, s.classesWithoutSelectors(), err
	}
	sl := make([]*resourceapi.ResourceSlice, 0, len(ns.slices)+len(cluster))
	sl = append(sl, ns.slices...)
	for _, cs := range cluster {
		sl = append(sl, cs.slice)
	}
	return sl, s.classes, nil
}

// claimClasses returns the sorted class names the claims' requests use.
func claimClasses(claims []*resourceapi.ResourceClaim) []string {
	set := map[string]bool{}
	for _, c := range claims {
		for _, r := range c.Spec.Devices.Requests {
			if r.Exactly != nil {
				set[r.Exactly.DeviceClassName] = true
			}
			for _, sub := range r.FirstAvailable {
				set[sub.DeviceClassName] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}
