package topology

import resourceapi "k8s.io/api/resource/v1"

// FabricSick reports whether a published device says its links are in
// trouble: a positive fabricErrors attribute, or a taint of
// TaintNVLinkDegraded, TaintFabricErrors or TaintPortDown (any effect).
// The scheduler ranks domains with such devices worse for large gangs
// (docs/design/health.md, "Sick fabric").
func FabricSick(d *resourceapi.Device) bool {
	if a, ok := d.Attributes[AttrFabricErrors]; ok && a.IntValue != nil && *a.IntValue > 0 {
		return true
	}
	for _, t := range d.Taints {
		switch t.Key {
		case TaintNVLinkDegraded, TaintFabricErrors, TaintPortDown:
			return true
		}
	}
	return false
}
