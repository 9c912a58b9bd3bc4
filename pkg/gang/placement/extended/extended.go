// Package extended is a leaf of the placement engine: what it knows of a
// member's extended resources backed by DRA (KEP-5004), which
// pkg/gang/extres finds before a gang is placed. Pure.
//
// Rules: the engine does not count such resources against a node's
// allocatable (the member's special claim asks for their devices), and
// refuses a node whose allocatable has one (a device plugin serves it
// there; gpufabric-scheduler serves a DeviceClass's extended resource
// through DRA only). See docs/design/extended-resources.md.
package extended

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// CheckDevicePlugin counts nodes whose allocatable has an extended
// resource that a member gets through DRA.
const CheckDevicePlugin = "extended resource served by a device plugin"

// Resources are one member's extended resources backed by DRA: a
// DeviceClass names them in spec.extendedResourceName, or they are its
// implicit deviceclass.resource.kubernetes.io/<class>.
type Resources struct {
	// Pod is the member's pod name (for messages).
	Pod string
	// Names are the pod's extended resources that DeviceClasses back,
	// sorted; Classes the class of each, Counts what the pod requests of
	// each (for messages).
	Names   []v1.ResourceName
	Classes []string
	Counts  []int64
	// Claim is the pod's special claim; the member's claims hold it too.
	Claim *resourceapi.ResourceClaim
	// Status is what the commit writes into the pod's
	// status.extendedResourceClaimStatus before it binds the pod.
	Status v1.PodExtendedResourceClaimStatus
}

// Without drops r's resources from a member's node requests (r may be
// nil).
func (r *Resources) Without(req index.ResList) index.ResList {
	if r != nil {
		for _, name := range r.Names {
			delete(req, name)
		}
	}
	return req
}

// NamesOf returns r's Names, nil for a nil r.
func NamesOf(r *Resources) []v1.ResourceName {
	if r == nil {
		return nil
	}
	return r.Names
}

// DevicePluginServes returns CheckDevicePlugin with the resource when a
// node's allocatable has one of names, "" otherwise.
func DevicePluginServes(allocatable index.ResList, names []v1.ResourceName) string {
	for _, name := range names {
		if allocatable[name] > 0 {
			return CheckDevicePlugin + " (" + string(name) + ")"
		}
	}
	return ""
}

// Note is the line a refusal adds for the members' extended resources
// backed by DRA, once per resource: "\nnvidia.com/gpu is served through
// DRA by DeviceClass gpu.gpufabric.dev (pod p-0 asks 16): each pod's
// devices come from its own claim (<pod>-extended-resources-…), all of
// one node". rs has one entry per member, nil for those without; "" when
// none has any.
func Note(rs []*Resources) string {
	var lines []string
	var seen []v1.ResourceName
	for _, r := range rs {
		for j, name := range NamesOf(r) {
			if slices.Contains(seen, name) {
				continue
			}
			seen = append(seen, name)
			lines = append(lines, fmt.Sprintf("%s is served through DRA by DeviceClass %s (pod %s asks %d)", name, r.Classes[j], r.Pod, r.Counts[j]))
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return "\n" + strings.Join(lines, "; ") + ": each pod's devices come from its own claim (<pod>-extended-resources-…), all of one node"
}
