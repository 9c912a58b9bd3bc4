package index

import (
	"context"
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

// classLister serves DeviceClasses to the allocator from the snapshot.
type classLister struct {
	byName map[string]*resourceapi.DeviceClass
	sorted []*resourceapi.DeviceClass
}

func newClassLister(classes []*resourceapi.DeviceClass) classLister {
	l := classLister{byName: make(map[string]*resourceapi.DeviceClass, len(classes))}
	for _, c := range classes {
		l.byName[c.Name] = c
		l.sorted = append(l.sorted, c)
	}
	sort.Slice(l.sorted, func(i, j int) bool { return l.sorted[i].Name < l.sorted[j].Name })
	return l
}

func (l classLister) List() ([]*resourceapi.DeviceClass, error) { return l.sorted, nil }

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c := l.byName[name]; c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("device class %s not found", name)
}

// matcher evaluates the snapshot's DeviceClasses on devices: CEL compiled
// once per snapshot, matches of whole slices kept in the MatchCache across
// snapshots, and the classes without selectors for trimmed calls
// (trim.go).
type matcher struct {
	classes classLister
	trimmed trimmedClasses
	cel     *cel.Cache
	cache   *MatchCache // nil: none
}

// classMatches evaluates a DeviceClass's selectors on one device.
func (m *matcher) classMatches(ctx context.Context, className, driver string, dev *resourceapi.Device) (bool, error) {
	class, err := m.classes.Get(className)
	if err != nil {
		return false, err
	}
	for _, sel := range class.Spec.Selectors {
		if sel.CEL == nil {
			continue
		}
		prog := m.cel.GetOrCompile(sel.CEL.Expression)
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

// sliceMatches returns, per device of the slice, whether it matches the
// class, through the MatchCache when there is one.
func (m *matcher) sliceMatches(ctx context.Context, sl *resourceapi.ResourceSlice, className string) ([]bool, error) {
	class, err := m.classes.Get(className)
	if err != nil {
		return nil, err
	}
	k := matchKey{slice: sl.UID, sliceRV: sl.ResourceVersion, sliceName: sl.Name, class: className, classRV: class.ResourceVersion}
	if m.cache != nil {
		if v, ok := m.cache.get(k); ok && len(v) == len(sl.Spec.Devices) {
			return v, nil
		}
	}
	out := make([]bool, len(sl.Spec.Devices))
	for i := range sl.Spec.Devices {
		if out[i], err = m.classMatches(ctx, className, sl.Spec.Driver, &sl.Spec.Devices[i]); err != nil {
			return nil, err
		}
	}
	if m.cache != nil {
		m.cache.put(k, out)
	}
	return out, nil
}

// hasClass reports whether the cluster-level slice has a device of the
// class, cached on the slice.
func (cs *clusterSlice) hasClass(ctx context.Context, m *matcher, class string) (bool, error) {
	if v, ok := cs.classes[class]; ok {
		return v, nil
	}
	matches, err := m.sliceMatches(ctx, cs.slice, class)
	if err != nil {
		return false, err
	}
	found := false
	for _, ok := range matches {
		found = found || ok
	}
	cs.classes[class] = found
	return found, nil
}
