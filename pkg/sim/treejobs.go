package sim

import (
	"fmt"

	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
	"github.com/gpufabric/gpufabric/pkg/sim/trees"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// DevicePlacer is a Policy that chooses its pods' devices (the engine).
// In runs with tree jobs the simulator tracks every GPU by position, for
// the rail metrics: a DevicePlacer's own choice, else the lowest free
// GPUs of the node (the DRA allocator takes a slice's devices in order).
type DevicePlacer interface {
	// PlacedDevices returns, for gang id's last Place, each pod's GPU
	// positions on its node (nil for pods it did not place).
	PlacedDevices(id int) [][]int
}

// initTrees prepares a run whose trace has tree jobs: GPUs tracked by
// position and tree metrics. Failure runs do not take trees.
func (r *runner) initTrees(tr *Trace) error {
	for _, g := range tr.Gangs {
		if g.Tree == nil {
			continue
		}
		if r.opt.Failures != nil {
			return fmt.Errorf("gang %d: failure runs do not replay tree jobs", g.ID)
		}
		r.devs = trees.NewDevices(r.c.Fabric.Topo, r.c.Fabric.BusyDevs)
		r.res.Trees = &trees.Stats{}
		for id, gr := range r.gangs {
			r.gangs[id].devs = make([][]int, len(gr.nodes))
		}
		return nil
	}
	return nil
}

// takeDevices records the GPUs pod i of gr takes on node n.
func (r *runner) takeDevices(gr *gangRun, i, n int) error {
	if r.devs == nil || gr.gpus[i] == 0 {
		return nil
	}
	if dp, ok := r.p.(DevicePlacer); ok {
		if got := dp.PlacedDevices(gr.g.ID); i < len(got) && got[i] != nil {
			if len(got[i]) != gr.gpus[i] {
				return fmt.Errorf("pod %d: %d devices for %d GPUs", i, len(got[i]), gr.gpus[i])
			}
			gr.devs[i] = got[i]
			return r.devs.Take(n, got[i])
		}
	}
	d, err := r.devs.Lowest(n, gr.gpus[i])
	gr.devs[i] = d
	return err
}

// giveDevices frees pod i's GPUs.
func (r *runner) giveDevices(gr *gangRun, i int) {
	if r.devs != nil && gr.devs[i] != nil {
		r.devs.Give(gr.nodes[i], gr.devs[i])
		gr.devs[i] = nil
	}
}

// treeStarted counts a tree job placed whole.
func (r *runner) treeStarted(gr *gangRun) {
	if gr.g.Tree == nil {
		return
	}
	o := trees.Measure(r.c.Fabric.Topo, gr.g.Tree, gr.nodes, gr.devs)
	r.res.Trees.Started(gr.g.Tree, o, r.now-gr.g.Arrival)
}

// treeRefused counts an attempt of a gang policy that left a tree
// unplaced and, for the policies other than kube-scheduler's, whether
// kube's greedy rule would have placed it on the same free GPUs.
func (r *runner) treeRefused(gr *gangRun) {
	if gr.g.Tree == nil || r.p.PodByPod() {
		return
	}
	r.res.Trees.Refused(r.p.Name() != PolicyTAS && trees.KubeFits(r.c.Fabric.Topo, r.c.Free, gr.g.Tree))
}

// heldGPUs is the GPUs of gr's placed pods.
func (gr *gangRun) heldGPUs() int {
	n := 0
	for i, node := range gr.nodes {
		if node >= 0 {
			n += gr.gpus[i]
		}
	}
	return n
}

// treesHow says how policy name expresses tree jobs on f (the report's
// last column).
func treesHow(name string, f *fabric.Fabric) string {
	nvl := "none"
	if l, err := f.Topo.LabelLevel(topology.TopologyKeyNVLinkDomain); err == nil {
		nvl = f.Levels[l]
	}
	switch name {
	case PolicyFirstFit:
		return "pods one by one: no groups, keys or rails"
	case PolicyTAS:
		return fmt.Sprintf("CompositePodGroups top down, children in creation order, no backtracking; node labels only (%s for the NVLink domain); rails not seen", nvl)
	case PolicyBestFit:
		return fmt.Sprintf("training: one PodSet, podset-slice-size = a segment's pods, slice topology %s, required topology the job's; services: one podset group at the service's key (%s for the NVLink domain), roles and rails not expressed", nvl, nvl)
	}
	return "CompositePodGroups placed by composite.Place (the tree as one decision), keys as written; prefill and decode coupled (gpufabric.dev/rail-coupling)"
}
