package trees

import "slices"

// run is one baseline decision on a copy of the free GPUs: the pods'
// nodes so far, and a log to undo takes.
type run struct {
	t    *Topology
	free []int
	out  []int
	log  []taken
	// first is each leaf's first pod (index into Spec.Flat order).
	first map[*Spec]int
	// level is the node-label level of each of the tree's keys.
	level map[string]int
}

// taken is one pod placed: its index, node and GPUs.
type taken struct{ pod, node, gpus int }

func newRun(t *Topology, free []int, s *Spec) (*run, error) {
	r := &run{t: t, free: append([]int(nil), free...), first: map[*Spec]int{}, level: map[string]int{}}
	for _, key := range s.Keys() {
		l, err := t.LabelLevel(key)
		if err != nil {
			return nil, err
		}
		r.level[key] = l
	}
	n := 0
	for _, l := range s.Leaves() {
		r.first[l] = n
		n += l.Pods
	}
	r.out = make([]int, n)
	for i := range r.out {
		r.out[i] = -1
	}
	return r, nil
}

func (r *run) take(pod, node, gpus int) {
	r.free[node] -= gpus
	r.out[pod] = node
	r.log = append(r.log, taken{pod, node, gpus})
}

func (r *run) mark() int { return len(r.log) }

func (r *run) revert(m int) {
	for len(r.log) > m {
		x := r.log[len(r.log)-1]
		r.free[x.node] += x.gpus
		r.out[x.pod] = -1
		r.log = r.log[:len(r.log)-1]
	}
}

// all is every node.
func (r *run) all() []int {
	out := make([]int, len(r.t.GPUs))
	for i := range out {
		out[i] = i
	}
	return out
}

// placements are the node sets g may be placed in inside the parent's
// nodes: nodes itself without a key, else each domain of the key's level
// cut to nodes (nodes without the level dropped; empty ones skipped), in
// domain order.
func (r *run) placements(g *Spec, nodes []int) [][]int {
	if g.TopologyKey == "" {
		return [][]int{nodes}
	}
	l := r.level[g.TopologyKey]
	by := map[int][]int{}
	var order []int
	for _, n := range nodes {
		d := r.t.DomainOf[l][n]
		if d < 0 {
			continue
		}
		if _, ok := by[d]; !ok {
			order = append(order, d)
		}
		by[d] = append(by[d], n)
	}
	slices.Sort(order)
	out := make([][]int, 0, len(order))
	for _, d := range order {
		out = append(out, by[d])
	}
	return out
}
