package index

import (
	"context"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
)

// Single-class calls skip the allocator's class CEL.
//
// The structured allocator evaluates each DeviceClass selector (CEL) on every
// candidate device of every call, and that evaluation is most of the garbage
// a placement makes (the GC tail of BenchmarkGang64x8). The engine already
// knows, per slice and class, which devices match (sliceMatches, cached
// across snapshots by the MatchCache). When every request of a call uses one
// class, the allocator gets the slices trimmed to that class's matching
// devices and the classes without selectors: it can only pick devices of the
// class, exactly as before, and evaluates no class CEL. Requests' own
// selectors, constraints, configs, taints and counters are untouched.
// Calls whose requests use several classes keep the plain path: without
// selectors one class's request could take another class's device.

// trimmedClasses is the class lister with every class's selectors removed
// (configs and the rest kept). Built once per snapshot; safe for concurrent
// use.
type trimmedClasses struct {
	once sync.Once
	l    classLister
}

func (m *matcher) withoutSelectors() classLister {
	m.trimmed.once.Do(func() {
		out := make([]*resourceapi.DeviceClass, 0, len(m.classes.sorted))
		for _, c := range m.classes.sorted {
			c = c.DeepCopy()
			c.Spec.Selectors = nil
			out = append(out, c)
		}
		m.trimmed.l = newClassLister(out)
	})
	return m.trimmed.l
}

// trimSlices returns the slices with only the devices matching class. A
// slice keeps its pool fields (and stays even when empty), so the allocator
// still sees complete pools. Copies are cached on the node (node-local
// slices) or on the cluster slice.
func (m *matcher) trimSlices(ctx context.Context, ns *NodeState, cluster []*clusterSlice, class string) ([]*resourceapi.ResourceSlice, error) {
	out := make([]*resourceapi.ResourceSlice, 0, len(ns.slices)+len(cluster))
	if ns.trimmed == nil {
		ns.trimmed = map[string][]*resourceapi.ResourceSlice{}
	}
	local, ok := ns.trimmed[class]
	if !ok {
		for _, sl := range ns.slices {
			t, err := m.trimSlice(ctx, sl, class)
			if err != nil {
				return nil, err
			}
			local = append(local, t)
		}
		ns.trimmed[class] = local
	}
	out = append(out, local...)
	for _, cs := range cluster {
		if cs.trimmed == nil {
			cs.trimmed = map[string]*resourceapi.ResourceSlice{}
		}
		t, ok := cs.trimmed[class]
		if !ok {
			var err error
			if t, err = m.trimSlice(ctx, cs.slice, class); err != nil {
				return nil, err
			}
			cs.trimmed[class] = t
		}
		out = append(out, t)
	}
	return out, nil
}

func (m *matcher) trimSlice(ctx context.Context, sl *resourceapi.ResourceSlice, class string) (*resourceapi.ResourceSlice, error) {
	matches, err := m.sliceMatches(ctx, sl, class)
	if err != nil {
		return nil, err
	}
	keep := 0
	for _, ok := range matches {
		if ok {
			keep++
		}
	}
	if keep == len(sl.Spec.Devices) {
		return sl, nil
	}
	t := *sl // shallow: only Spec.Devices is replaced
	t.Spec.Devices = make([]resourceapi.Device, 0, keep)
	for i, ok := range matches {
		if ok {
			t.Spec.Devices = append(t.Spec.Devices, sl.Spec.Devices[i])
		}
	}
	return &t, nil
}
