package extres

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// Classes maps extended resource names to the DeviceClasses that back
// them, by kube-scheduler 1.37's rules (KEP-5004):
//   - every class backs its implicit name
//     deviceclass.resource.kubernetes.io/<class name>;
//   - a class with spec.extendedResourceName backs that name too; when
//     several classes name the same resource, the newest
//     (creationTimestamp) wins, ties going to the lower name.
//
// Unlike kube-scheduler's cache, which applies class events in the order
// they arrive, Classes is built from the whole list at once, so the same
// classes always give the same mapping (docs/design/extended-resources.md).
type Classes map[v1.ResourceName]*resourceapi.DeviceClass

// NewClasses maps the names the classes back. Pure.
func NewClasses(list []*resourceapi.DeviceClass) Classes {
	out := make(Classes, 2*len(list))
	for _, dc := range list {
		out[v1.ResourceName(resourceapi.ResourceDeviceClassPrefix+dc.Name)] = dc
	}
	for _, dc := range list {
		if dc.Spec.ExtendedResourceName == nil || *dc.Spec.ExtendedResourceName == "" {
			continue
		}
		name := v1.ResourceName(*dc.Spec.ExtendedResourceName)
		if cur := out[name]; cur == nil || newer(dc, cur) {
			out[name] = dc
		}
	}
	return out
}

// newer reports whether a wins over b for one extended resource name.
func newer(a, b *resourceapi.DeviceClass) bool {
	ta, tb := a.CreationTimestamp.UnixNano(), b.CreationTimestamp.UnixNano()
	if ta != tb {
		return ta > tb
	}
	return a.Name < b.Name
}

// For returns the class that backs name, nil when none does or name is
// not one DRA may back.
func (c Classes) For(name v1.ResourceName) *resourceapi.DeviceClass {
	if !draExtendedName(name) {
		return nil
	}
	return c[name]
}

// draExtendedName reports whether a resource name may be backed by DRA:
// an extended resource name (domain-qualified, not in kubernetes.io, not
// a quota's requests.* name) or an implicit class name
// (deviceclass.resource.kubernetes.io/<class>), as kube-scheduler's
// IsDRAExtendedResourceName says.
func draExtendedName(name v1.ResourceName) bool {
	s := string(name)
	if strings.HasPrefix(s, resourceapi.ResourceDeviceClassPrefix) {
		return true
	}
	return strings.Contains(s, "/") && !strings.Contains(s, v1.ResourceDefaultNamespacePrefix) && !strings.HasPrefix(s, v1.DefaultResourceRequestsPrefix)
}
