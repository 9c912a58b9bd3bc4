package index

import (
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// What an Allocate call costs, as the engine's cost model sees it
// (docs/design/cost.md).
//
// Rules: the structured allocator evaluates a claim's CEL selectors on the
// candidate devices of the node it is given; what one evaluation costs
// depends on the expression and on the shape of the device (which
// attributes it has and their types, the lengths of strings aside), not on
// the device's name or values. ShapeKey names that shape for a whole node:
// two nodes with the same key give the same claims the same work, so a
// call that ran out of Config.AllocateTimeout on one is expected to run out
// on the other. It is a cost equivalence, not an answer equivalence
// (FreeDeviceKey is that): it says nothing about whether the claims fit.
// ShapeKey is in devices.go, AllocatorKey in snapshot.go.

// deviceShape is one device's shape: attribute names and value types,
// capacity names, and whether it is tainted or shares counters.
func deviceShape(dev *resourceapi.Device) string {
	var parts []string
	for name, a := range dev.Attributes {
		parts = append(parts, "a:"+string(name)+":"+attributeType(a))
	}
	for name := range dev.Capacity {
		parts = append(parts, "c:"+string(name))
	}
	slices.Sort(parts)
	if len(dev.Taints) > 0 {
		parts = append(parts, "tainted")
	}
	if len(dev.ConsumesCounters) > 0 {
		parts = append(parts, "counters")
	}
	return strings.Join(parts, ",")
}

func attributeType(a resourceapi.DeviceAttribute) string {
	switch {
	case a.IntValue != nil:
		return "int"
	case a.BoolValue != nil:
		return "bool"
	case a.StringValue != nil:
		return "string"
	case a.VersionValue != nil:
		return "version"
	}
	return "other"
}
