package trees

// Kube places a tree as kube-scheduler 1.37.1 places a CompositePodGroup
// tree with topology-aware workload scheduling (KEP-6012; notes in
// docs/design/simulator.md, "Hierarchical workloads"):
//
//   - top down: a group with a topology key is tried in every domain of
//     its key's node-label level inside its parent's placement (the
//     NVLink domain, not a node label, is read as the label level that
//     stands for it: Topology.LabelLevel); a group without one takes its
//     parent's placement;
//   - in each domain the children are placed one by one in creation
//     order, each by its own rule, and each one placed stays (no
//     backtracking across siblings); the composite needs all of them
//     (minGroupCount = children), so it stops at the first that fails;
//   - a leaf's pods go greedily one by one to the node most allocated
//     after placing the pod (MostAllocated, as the flat kube baseline);
//   - of the domains where the group fits, the one most allocated after
//     placement wins (PodGroupPodsCount ties: every success places all the
//     pods); upstream breaks ties at random, here by domain order;
//   - the winner is placed again (deterministic, so the same) and kept.
//
// free is the free GPUs per node (not changed); the result is each pod's
// node in Spec.Flat order, or nil when the tree does not fit.
func Kube(t *Topology, free []int, s *Spec) ([]int, error) {
	r, err := newRun(t, free, s)
	if err != nil {
		return nil, err
	}
	if !r.group(s, r.all()) {
		return nil, nil
	}
	return r.out, nil
}

// group places g inside the parent's placement nodes: in the best of its
// domains, as Kube says.
func (r *run) group(g *Spec, nodes []int) bool {
	places := r.placements(g, nodes)
	if len(places) == 1 {
		return r.inside(g, places[0]) // a single placement is not scored
	}
	best, bestUsed, bestCap := -1, 0, 1
	for i, p := range places {
		m := r.mark()
		if r.inside(g, p) {
			used, capacity := r.allocated(p)
			if best < 0 || used*bestCap > bestUsed*capacity {
				best, bestUsed, bestCap = i, used, capacity
			}
		}
		r.revert(m)
	}
	return best >= 0 && r.inside(g, places[best])
}

// inside places g in nodes: a leaf's pods one by one, a composite's
// children in order; on failure nothing stays taken.
func (r *run) inside(g *Spec, nodes []int) bool {
	m := r.mark()
	if g.Leaf() {
		first := r.first[g]
		for i := range g.Pods {
			n := r.mostAllocated(nodes, g.GPUsPerPod)
			if n < 0 {
				r.revert(m)
				return false
			}
			r.take(first+i, n, g.GPUsPerPod)
		}
		return true
	}
	for i := range g.Children {
		if !r.group(&g.Children[i], nodes) {
			r.revert(m)
			return false
		}
	}
	return true
}

// mostAllocated is the node of nodes with room for gpus that is most
// allocated after placing them (ties: the first), -1 when none has room.
func (r *run) mostAllocated(nodes []int, gpus int) int {
	pick := -1
	for _, n := range nodes {
		if r.free[n] < gpus || r.t.GPUs[n] == 0 {
			continue
		}
		if pick < 0 || (r.t.GPUs[n]-r.free[n]+gpus)*r.t.GPUs[pick] > (r.t.GPUs[pick]-r.free[pick]+gpus)*r.t.GPUs[n] {
			pick = n
		}
	}
	return pick
}

// allocated is the GPUs taken and the capacity of nodes.
func (r *run) allocated(nodes []int) (used, capacity int) {
	for _, n := range nodes {
		used += r.t.GPUs[n] - r.free[n]
		capacity += r.t.GPUs[n]
	}
	return used, max(capacity, 1)
}

// KubeFits reports whether Kube would place s on free, where kube's
// placement is what the tree asks: the node labels it reads are exactly
// the tree's levels (on HGX the rack only stands for the NVLink domain)
// and no rail coupling is required (kube cannot ask for one). It measures
// the claim that the engine's joint search places every tree the greedy
// order places.
func KubeFits(t *Topology, free []int, s *Spec) bool {
	if requiresCoupling(s) {
		return false
	}
	for _, key := range s.Keys() {
		l, err := t.LabelLevel(key)
		if err != nil || l != t.Level(key) && !t.same(t.Level(key), l) {
			return false
		}
	}
	out, err := Kube(t, free, s)
	return err == nil && out != nil
}

// requiresCoupling reports whether a composite of s requires a rail
// coupling.
func requiresCoupling(s *Spec) bool {
	if mode, ok := s.Coupled(); ok && mode == CouplingRequired {
		return true
	}
	for i := range s.Children {
		if requiresCoupling(&s.Children[i]) {
			return true
		}
	}
	return false
}
