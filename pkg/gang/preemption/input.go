package preemption

import (
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// WithoutNodes returns in without the named nodes, their pods and their
// node-local ResourceSlices: a gang placed on the result cannot use them.
// Claims are kept (an allocation on a pool that is gone marks nothing).
func WithoutNodes(in index.SnapshotInput, nodes sets.Set[string]) index.SnapshotInput {
	if nodes.Len() == 0 {
		return in
	}
	out := in
	out.Nodes = filter(in.Nodes, func(n *v1.Node) bool { return !nodes.Has(n.Name) })
	out.Pods = filter(in.Pods, func(p *v1.Pod) bool { return !nodes.Has(p.Spec.NodeName) })
	out.ResourceSlices = filter(in.ResourceSlices, func(s *resourceapi.ResourceSlice) bool {
		return s.Spec.NodeName == nil || !nodes.Has(*s.Spec.NodeName)
	})
	return out
}

// restrict returns the part of in that a placement on nodes sees: those
// nodes, their pods, their node-local slices plus every slice that is not
// node-local, and the claims allocated on those slices' pools.
func restrict(in index.SnapshotInput, nodes sets.Set[string]) index.SnapshotInput {
	out := index.SnapshotInput{DeviceClasses: in.DeviceClasses}
	out.Nodes = filter(in.Nodes, func(n *v1.Node) bool { return nodes.Has(n.Name) })
	out.Pods = filter(in.Pods, func(p *v1.Pod) bool { return nodes.Has(p.Spec.NodeName) })
	pools := sets.New[string]()
	out.ResourceSlices = filter(in.ResourceSlices, func(s *resourceapi.ResourceSlice) bool {
		keep := s.Spec.NodeName == nil || *s.Spec.NodeName == "" || nodes.Has(*s.Spec.NodeName)
		if keep {
			pools.Insert(s.Spec.Driver + "/" + s.Spec.Pool.Name)
		}
		return keep
	})
	out.ResourceClaims = filter(in.ResourceClaims, func(c *resourceapi.ResourceClaim) bool {
		if c.Status.Allocation == nil {
			return false
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if pools.Has(r.Driver + "/" + r.Pool) {
				return true
			}
		}
		return false
	})
	return out
}

// without returns in less the pods and claims of the given units.
func without(in index.SnapshotInput, units []*Unit) index.SnapshotInput {
	if len(units) == 0 {
		return in
	}
	pods, claims := sets.New[types.UID](), sets.New[types.UID]()
	for _, u := range units {
		for _, p := range u.Pods {
			pods.Insert(p.UID)
		}
		claims.Insert(u.Claims...)
	}
	out := in
	out.Pods = filter(in.Pods, func(p *v1.Pod) bool { return !pods.Has(p.UID) })
	out.ResourceClaims = filter(in.ResourceClaims, func(c *resourceapi.ResourceClaim) bool { return !claims.Has(c.UID) })
	return out
}

func filter[T any](in []T, keep func(T) bool) []T {
	out := make([]T, 0, len(in))
	for _, x := range in {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}
