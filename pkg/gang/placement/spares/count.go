package spares

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// NodeGPUs is what makes a node a spare: its GPUs, those held (GPUs and
// MIG partitions allocated), and whether it can take a pod at all.
type NodeGPUs struct {
	GPUs, Held int
	// Usable: not cordoned, no failing taint on the node or a GPU.
	Usable bool
}

// WhollyFree reports whether the node is a spare candidate.
func (n NodeGPUs) WhollyFree() bool { return n.GPUs > 0 && n.Held == 0 && n.Usable }

// UsableNode reports whether a node can take pods: not cordoned, and no
// NoSchedule or NoExecute taint whose key is the node lifecycle's
// (node.kubernetes.io/, node.cloudprovider.kubernetes.io/) or gpufabric's.
func UsableNode(n *v1.Node) bool {
	if n == nil || n.Spec.Unschedulable {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect != v1.TaintEffectNoSchedule && t.Effect != v1.TaintEffectNoExecute {
			continue
		}
		for _, p := range []string{"node.kubernetes.io/", "node.cloudprovider.kubernetes.io/", topology.DriverName + "/"} {
			if strings.HasPrefix(t.Key, p) {
				return false
			}
		}
	}
	return true
}

// AddDevice counts one device of driver gpufabric.dev: a GPU (held when
// allocated; a NoSchedule/NoExecute device taint makes the node unusable),
// or a MIG partition (held when allocated); others change nothing.
func (n *NodeGPUs) AddDevice(d *resourceapi.Device, allocated bool) {
	if d == nil {
		return
	}
	t := d.Attributes[topology.AttrType].StringValue
	switch {
	case t == nil:
	case *t == topology.DeviceTypeGPU:
		n.GPUs++
		if allocated {
			n.Held++
		}
		for _, taint := range d.Taints {
			if taint.Effect == resourceapi.DeviceTaintEffectNoSchedule || taint.Effect == resourceapi.DeviceTaintEffectNoExecute {
				n.Usable = false
			}
		}
	case *t == topology.DeviceTypeMIG && allocated:
		n.Held++
	}
}

// OfSnapshotNode counts a node of a placement snapshot.
func OfSnapshotNode(ns *index.NodeState) NodeGPUs {
	if ns == nil {
		return NodeGPUs{}
	}
	n := NodeGPUs{Usable: UsableNode(ns.Node())}
	for _, id := range ns.DeviceIDs() {
		if id.Driver.String() == topology.DriverName {
			n.AddDevice(ns.Device(id), ns.Allocated(id))
		}
	}
	return n
}

// Domain is one spare domain's count.
type Domain struct {
	ID string
	// Free are its wholly free nodes, Kept the last PerDomain of them
	// (sorted by name, as the domain's nodes).
	Free, Kept []string
	// KeptGPUs are the kept nodes' GPUs.
	KeptGPUs int
	// Missing is PerDomain less the kept nodes: the spares replacements
	// (or gangs placed before the setting) use.
	Missing int
}

// CountDomain counts one domain's spares with perDomain kept.
func CountDomain(d *topology.Domain, perDomain int, gpus func(node string) NodeGPUs) Domain {
	out := Domain{ID: d.ID}
	byNode := map[string]int{}
	for _, n := range d.Nodes {
		if g := gpus(n); g.WhollyFree() {
			out.Free = append(out.Free, n)
			byNode[n] = g.GPUs
		}
	}
	out.Kept = out.Free[max(0, len(out.Free)-perDomain):]
	for _, n := range out.Kept {
		out.KeptGPUs += byNode[n]
	}
	out.Missing = perDomain - len(out.Kept)
	return out
}

// Count counts the spares of every domain of the level that has a GPU, in
// the level's order (by id).
func Count(l *topology.Level, perDomain int, gpus func(node string) NodeGPUs) []Domain {
	if l == nil || perDomain <= 0 {
		return nil
	}
	var out []Domain
	for _, d := range l.Domains {
		if d.GPUs > 0 {
			out = append(out, CountDomain(d, perDomain, gpus))
		}
	}
	return out
}
