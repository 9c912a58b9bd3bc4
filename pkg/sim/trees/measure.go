package trees

import (
	"slices"
)

// Outcome is what one placed tree got.
type Outcome struct {
	// AsAsked: every group with a topology key has all its pods in one
	// domain of that level of the fabric (the NVLink domain for
	// gpufabric.dev/nvlinkDomain, whatever a baseline read it as).
	AsAsked bool
	// Segments: leaves with RoleSegment; SegmentsInDomain those whose
	// pods share one NVLink domain.
	Segments, SegmentsInDomain int
	// Couples: rail groups (two or more leaves of one composite with the
	// same RailGroup); CouplesMatched those whose pods with GPUs all use
	// one and the same set of IB rails (what coupled roles ask).
	Couples, CouplesMatched int
	// Pairs: pairs of pods with GPUs of different leaves of a rail group
	// (prefill pod × decode pod); PairsMatched those on the same set of
	// IB rails (every GPU with a rail).
	Pairs, PairsMatched int
}

// Measure computes a placed tree's Outcome: nodes[i] and devs[i] are pod
// i's node and GPU positions (Spec.Flat order).
func Measure(t *Topology, s *Spec, nodes []int, devs [][]int) Outcome {
	var o Outcome
	o.AsAsked = true
	next := 0
	var walk func(g *Spec) (lo, hi int)
	walk = func(g *Spec) (int, int) {
		lo := next
		if g.Leaf() {
			next += g.Pods
			if g.Role == RoleSegment {
				o.Segments++
				if sameDomain(t, 0, nodes[lo:next]) {
					o.SegmentsInDomain++
				}
			}
		} else {
			groups := map[string][][2]int{}
			var order []string
			for i := range g.Children {
				a, b := walk(&g.Children[i])
				if rg := g.Children[i].RailGroup; rg != "" && g.Children[i].Leaf() {
					if groups[rg] == nil {
						order = append(order, rg)
					}
					groups[rg] = append(groups[rg], [2]int{a, b})
				}
			}
			for _, rg := range order {
				if len(groups[rg]) < 2 {
					continue
				}
				o.couple(railSets(t, nodes, devs, groups[rg]))
			}
		}
		if g.TopologyKey != "" && !sameDomain(t, t.Level(g.TopologyKey), nodes[lo:next]) {
			o.AsAsked = false
		}
		return lo, next
	}
	walk(s)
	return o
}

// couple counts one rail group: the rail sets of its leaves' pods.
func (o *Outcome) couple(sets [][][]int64) {
	o.Couples++
	if oneSet(sets) {
		o.CouplesMatched++
	}
	for i := range sets {
		for j := i + 1; j < len(sets); j++ {
			for _, a := range sets[i] {
				for _, b := range sets[j] {
					o.Pairs++
					if a != nil && slices.Equal(a, b) {
						o.PairsMatched++
					}
				}
			}
		}
	}
}

// sameDomain reports whether nodes all lie in one domain of level l.
func sameDomain(t *Topology, l int, nodes []int) bool {
	if l < 0 {
		return false
	}
	for _, n := range nodes {
		if n < 0 || t.DomainOf[l][n] < 0 || t.DomainOf[l][n] != t.DomainOf[l][nodes[0]] {
			return false
		}
	}
	return true
}

// railSets are the rail sets of the pods with GPUs of each range (a
// leaf): sorted rails, nil when a GPU has no rail.
func railSets(t *Topology, nodes []int, devs [][]int, ranges [][2]int) [][][]int64 {
	out := make([][][]int64, len(ranges))
	for k, rg := range ranges {
		for p := rg[0]; p < rg[1]; p++ {
			if p >= len(devs) || len(devs[p]) == 0 {
				continue
			}
			var set []int64
			for _, d := range devs[p] {
				r := t.Rails[nodes[p]][d]
				if r < 0 {
					set = nil
					break
				}
				set = append(set, r)
			}
			slices.Sort(set)
			out[k] = append(out[k], slices.Compact(set))
		}
	}
	return out
}

// oneSet reports whether every pod of every leaf has one and the same
// rail set (and there is a pod).
func oneSet(sets [][][]int64) bool {
	var want []int64
	for _, leaf := range sets {
		for _, s := range leaf {
			if s == nil || want != nil && !slices.Equal(want, s) {
				return false
			}
			want = s
		}
	}
	return want != nil
}
