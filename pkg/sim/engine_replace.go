package sim

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// hider is a policy that can be told which nodes a new gang must not use
// (nodes out for repair, spare nodes); the simulator calls it before each
// Place in failure runs.
type hider interface {
	hide(nodes []bool)
}

// mover is a policy that keeps the pods of running gangs and must hear
// that a replacement moved one.
type mover interface {
	move(id, pod, node int) error
}

var (
	_ hider = (*EnginePolicy)(nil)
	_ mover = (*EnginePolicy)(nil)
)

// hide sets the nodes left out of the snapshot; a change drops it.
func (e *EnginePolicy) hide(nodes []bool) {
	if slices.Equal(e.hidden, nodes) {
		return
	}
	e.hidden = slices.Clone(nodes)
	e.snap = nil
}

// visible is the fabric's nodes and node-local slices without the hidden
// nodes.
func (e *EnginePolicy) visible(in index.SnapshotInput) index.SnapshotInput {
	if !slices.Contains(e.hidden, true) {
		return in
	}
	out := in
	out.Nodes, out.ResourceSlices = nil, nil
	for _, n := range in.Nodes {
		if i, ok := e.fabric.NodeIndex[n.Name]; !ok || !e.hidden[i] {
			out.Nodes = append(out.Nodes, n)
		}
	}
	for _, s := range in.ResourceSlices {
		if s.Spec.NodeName != nil {
			if i, ok := e.fabric.NodeIndex[*s.Spec.NodeName]; ok && e.hidden[i] {
				continue
			}
		}
		out.ResourceSlices = append(out.ResourceSlices, s)
	}
	return out
}

// move rebinds pod `pod` of running gang id to node (a replacement): the
// pod's node and its claim's devices (free GPUs of the node, in device
// order) change; the snapshot is rebuilt on the next Sync.
func (e *EnginePolicy) move(id, pod, node int) error {
	b := e.running[id]
	if b == nil || pod >= len(b.pods) {
		return fmt.Errorf("gang %d pod %d is not running", id, pod)
	}
	name := e.fabric.NodeNames[node]
	claimName := fmt.Sprintf("g%05d-%03d-gpu", id, pod)
	var claim *resourceapi.ResourceClaim
	used := map[[2]string]bool{}
	for _, rb := range e.running {
		for _, c := range rb.claims {
			if c.Name == claimName {
				claim = c
				continue
			}
			for _, r := range c.Status.Allocation.Devices.Results {
				used[[2]string{r.Pool, r.Device}] = true
			}
		}
	}
	if claim == nil {
		return fmt.Errorf("gang %d: claim %s not found", id, claimName)
	}
	if e.nodeGPUs == nil {
		e.nodeGPUs = topology.NodeGPUs(e.fabric.Input.ResourceSlices)
	}
	old := claim.Status.Allocation.Devices.Results
	results := make([]resourceapi.DeviceRequestAllocationResult, 0, len(old))
	for _, g := range e.nodeGPUs[name].Devices {
		if len(results) < len(old) && !used[[2]string{g.Pool, g.Device}] {
			r := old[len(results)]
			r.Pool, r.Device = g.Pool, g.Device
			results = append(results, r)
		}
	}
	if len(results) < len(old) {
		return fmt.Errorf("gang %d pod %d: node %s has %d free GPUs, %d needed", id, pod, name, len(results), len(old))
	}
	alloc := claim.Status.Allocation.DeepCopy()
	alloc.Devices.Results = results
	if alloc.NodeSelector != nil {
		alloc.NodeSelector = &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{name}},
		}}}}
	}
	claim.Status.Allocation = alloc
	p := b.pods[pod].DeepCopy()
	p.Spec.NodeName = name
	b.pods[pod] = p
	e.snap = nil
	return nil
}
