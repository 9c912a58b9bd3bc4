package trees

import (
	"fmt"
	"sort"
)

// Kueue places a tree as Kueue's topology-aware scheduling (BestFit) can
// express it; Kueue has no composites:
//
//   - a tree whose children are alike segments (leaves of one size with
//     one topology key) is one PodSet of all their pods with
//     podset-slice-size = a segment's pods, podset-slice-required-topology
//     = the segments' key and podset-required-topology = the root's key
//     (two-level TAS): of the root-level domains that hold all the
//     slices, the one with the fewest wins (ties: fewer free GPUs), the
//     slices go to its slice-level domains greedily, most slices first,
//     the last to the tightest domain that holds the rest (ties: fewer
//     free GPUs), and in each domain the pods go to nodes by BestFit
//     (most room first, the rest to the tightest node); a slice's pods
//     are consecutive ranks;
//   - any other tree (an inference service) is one flat group of all its
//     pods (its PodSets in one podset group) required in one domain of
//     the root's key: the domain with the fewest free GPUs where all the
//     pods fit, filled role by role by BestFit; the roles' own keys and
//     rail groups are not expressed.
//
// Keys are node-label levels (Topology.LabelLevel). free is not changed;
// the result is each pod's node in Spec.Flat order, or nil.
func Kueue(t *Topology, free []int, s *Spec) ([]int, error) {
	r, err := newRun(t, free, s)
	if err != nil {
		return nil, err
	}
	ok := false
	if sliced(s) {
		if r.level[s.Children[0].TopologyKey] > r.levelOf(s.TopologyKey) {
			return nil, fmt.Errorf("tree %s: podset-slice-required-topology %s is above podset-required-topology %s", s.Name, s.Children[0].TopologyKey, s.TopologyKey)
		}
		ok = r.slices(s)
	} else {
		ok = r.flat(s)
	}
	if !ok {
		return nil, nil
	}
	return r.out, nil
}

// sliced reports whether s is expressible as one PodSet in slices: its
// children are leaves of one size and key, with GPUs.
func sliced(s *Spec) bool {
	if s.Leaf() {
		return false
	}
	c0 := s.Children[0]
	for _, c := range s.Children {
		if !c.Leaf() || c.TopologyKey == "" || c.TopologyKey != c0.TopologyKey || c.Pods != c0.Pods || c.GPUsPerPod != c0.GPUsPerPod || c.GPUsPerPod == 0 {
			return false
		}
	}
	return true
}

// levelOf is key's level, past the last level for no key (the cluster).
func (r *run) levelOf(key string) int {
	if key == "" {
		return len(r.t.Levels)
	}
	return r.level[key]
}

// slices is the two-level TAS placement of Kueue's doc comment.
func (r *run) slices(s *Spec) bool {
	seg := &s.Children[0]
	k, g, need := seg.Pods, seg.GPUsPerPod, len(s.Children)
	var best [][]int
	var bestRoom []room
	bestSlices, bestFree := 0, 0
	for _, p := range r.placements(s, r.all()) {
		subs := r.placements(seg, p)
		rooms := make([]room, len(subs))
		total, free := 0, 0
		for i, sub := range subs {
			pods := 0
			for _, n := range sub {
				pods += r.free[n] / g
				rooms[i].free += r.free[n]
			}
			rooms[i].n = pods / k
			total += rooms[i].n
			free += rooms[i].free
		}
		if total >= need && (best == nil || total < bestSlices || total == bestSlices && free < bestFree) {
			best, bestRoom, bestSlices, bestFree = subs, rooms, total, free
		}
	}
	if best == nil {
		return false
	}
	next := 0
	for _, pick := range bestFit(bestRoom, need) {
		nodes, ok := r.nodeFill(best[pick.i], pick.n*k, g)
		if !ok {
			return false // the counts are exact: cannot happen
		}
		for _, n := range nodes {
			r.take(next, n, g)
			next++
		}
	}
	return true
}

// flat places all the tree's pods as one group in the domain of the
// root's key with the fewest free GPUs where they all fit.
func (r *run) flat(s *Spec) bool {
	var best []int
	bestFree := 0
	for _, p := range r.placements(s, r.all()) {
		free := 0
		for _, n := range p {
			free += r.free[n]
		}
		if best != nil && free >= bestFree {
			continue
		}
		m := r.mark()
		if r.fillLeaves(s, p) {
			best, bestFree = p, free
		}
		r.revert(m)
	}
	return best != nil && r.fillLeaves(s, best)
}

// fillLeaves places every leaf's pods in nodes, leaf by leaf, by BestFit.
func (r *run) fillLeaves(s *Spec, nodes []int) bool {
	m := r.mark()
	for _, l := range s.Leaves() {
		got, ok := r.nodeFill(nodes, l.Pods, l.GPUsPerPod)
		if !ok {
			r.revert(m)
			return false
		}
		for i, n := range got {
			r.take(r.first[l]+i, n, l.GPUsPerPod)
		}
	}
	return true
}

// nodeFill is Kueue's BestFit over nodes for pods of gpus GPUs each: the
// node for each pod (nothing taken), false when they do not fit. A pod
// without GPUs goes to the first node.
func (r *run) nodeFill(nodes []int, pods, gpus int) ([]int, bool) {
	if len(nodes) == 0 {
		return nil, false
	}
	if gpus == 0 {
		out := make([]int, pods)
		for i := range out {
			out[i] = nodes[0]
		}
		return out, true
	}
	rooms := make([]room, len(nodes))
	for i, n := range nodes {
		rooms[i] = room{n: r.free[n] / gpus}
	}
	var out []int
	for _, pick := range bestFit(rooms, pods) {
		for range pick.n {
			out = append(out, nodes[pick.i])
		}
	}
	return out, len(out) == pods
}

// room is one domain's (or node's) room in units (slices, pods) and its
// free GPUs (a tie-break for domains; 0 for nodes).
type room struct{ n, free int }

// pick is n units taken from domain i.
type pick struct{ i, n int }

// bestFit takes need units from rooms as Kueue's BestFit does: the
// largest room first (ties: fewer free GPUs, then index), except that the
// rest goes to the tightest room that holds it all (ties likewise). It
// returns what it took, possibly less than need.
func bestFit(rooms []room, need int) []pick {
	idx := make([]int, 0, len(rooms))
	for i, rm := range rooms {
		if rm.n > 0 {
			idx = append(idx, i)
		}
	}
	less := func(a, b int) bool { // a before b among equals
		return rooms[a].free < rooms[b].free || rooms[a].free == rooms[b].free && a < b
	}
	sort.SliceStable(idx, func(x, y int) bool {
		a, b := idx[x], idx[y]
		return rooms[a].n > rooms[b].n || rooms[a].n == rooms[b].n && less(a, b)
	})
	var out []pick
	for left := need; left > 0 && len(idx) > 0; {
		at := 0 // the largest, unless one holds the rest
		tight := -1
		for k, i := range idx {
			if rooms[i].n >= left && (tight < 0 || rooms[i].n < rooms[idx[tight]].n || rooms[i].n == rooms[idx[tight]].n && less(i, idx[tight])) {
				tight = k
			}
		}
		if tight >= 0 {
			at = tight
		}
		n := min(left, rooms[idx[at]].n)
		out = append(out, pick{idx[at], n})
		left -= n
		idx = append(idx[:at], idx[at+1:]...)
	}
	return out
}
