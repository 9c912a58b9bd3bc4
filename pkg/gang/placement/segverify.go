package placement

import (
	"context"
	"fmt"
	"slices"
	"sort"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/segment"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

var _ segment.Verifier = (*segPlacer)(nil)

// segPlacer verifies one domain's picks for segment.Plan: each pick's
// members are placed in its bin by a filler of those members only, next
// to the shared claims' results and the devices of the picks kept.
type segPlacer struct {
	sg     *segmenter
	bins   []*topology.Domain
	shared []resourceapi.AllocationResult
	kept   []segPlaced
}

// segPlaced is one verified pick: its members (gang indexes, ascending)
// and their placement, whose member indexes count in idx.
type segPlaced struct {
	idx []int
	att *attempt
}

// Keep drops the placements of all but the first n picks.
func (v *segPlacer) Keep(n int) { v.kept = v.kept[:n] }

// Place places the pick's members in its bin: pack order, the greedy
// fill, the search and rail alignment, as for a gang of those members in
// that domain.
func (v *segPlacer) Place(ctx context.Context, p segment.Pick) (bool, error) {
	var idx []int
	for _, s := range p.Segments {
		idx = append(idx, v.sg.lay.members[s]...)
	}
	slices.Sort(idx)
	carry := slices.Clone(v.shared)
	for _, k := range v.kept {
		for _, res := range k.att.memberRes {
			carry = append(carry, res...)
		}
	}
	f := v.sg.sub(subMembers(v.sg.members, idx))
	f.search.left = v.sg.fill.search.left
	f.search.startDomain()
	bin := v.bins[p.Bin]
	nodes, _, err := f.pack.nodes(ctx, bin, len(idx))
	if err != nil {
		return false, err
	}
	att, err := f.fillSpread(ctx, bin, nodes, carry, len(idx), nil)
	v.sg.fill.search.left = f.search.left
	if err != nil || att == nil {
		return false, err
	}
	v.kept = append(v.kept, segPlaced{idx: idx, att: att})
	return true, nil
}

// merge makes one attempt in the gang's domain of the kept picks, members
// in gang order.
func (v *segPlacer) merge(d *topology.Domain, shared []resourceapi.AllocationResult) *attempt {
	type one struct {
		mi  int
		ns  *index.NodeState
		clm []*resourceapi.ResourceClaim
		res []resourceapi.AllocationResult
	}
	var all []one
	for _, k := range v.kept {
		for i, smi := range k.att.members {
			all = append(all, one{k.idx[smi], k.att.memberNode[i], k.att.memberClm[i], k.att.memberRes[i]})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mi < all[j].mi })
	att := &attempt{dom: d, inflight: index.InFlight{}, used: map[*index.NodeState]*usage{}, shared: shared}
	att.inflight.Add(shared)
	for _, o := range all {
		att.place(o.mi, o.ns, v.sg.per[o.mi], o.clm, o.res)
	}
	return att
}

// finish checks what the bins cannot see of each other (required pod
// anti-affinity between their members, one rail set when alignment is
// required) and scores the rail sets.
func (sg *segmenter) finish(ctx context.Context, d *topology.Domain, att *attempt, v *segPlacer) (*attempt, error) {
	if sg.crossAnti(att, v) {
		sg.refused.add(CheckPodAntiAffinity, d.ID)
		return nil, nil
	}
	sets, err := sg.fill.align.railSets(ctx, att)
	if err != nil {
		return nil, err
	}
	att.score.RailSets = len(sets)
	if sg.fill.align.required && !sg.fill.align.old && len(sets) > 1 {
		if sg.fill.align.why == nil {
			sg.fill.align.why = map[string]string{}
		}
		sg.fill.align.why[d.ID] = fmt.Sprintf("each %s domain's segments are aligned, on %d different rail sets", sg.level.Key, len(sets))
		sg.refused.add(CheckRailAlignment, d.ID)
		return nil, nil
	}
	return att, nil
}

// crossAnti reports whether two members placed by different picks
// conflict by required pod anti-affinity.
func (sg *segmenter) crossAnti(att *attempt, v *segPlacer) bool {
	anti := false
	for _, sh := range sg.distinct {
		anti = anti || len(sh.anti) > 0
	}
	if !anti {
		return false
	}
	pick := map[int]int{}
	for ki, k := range v.kept {
		for _, mi := range k.idx {
			pick[mi] = ki
		}
	}
	for i, a := range att.members {
		for j := i + 1; j < len(att.members); j++ {
			b := att.members[j]
			sa, sb := sg.per[a], sg.per[b]
			if pick[a] != pick[b] && (len(sa.anti) > 0 || len(sb.anti) > 0) &&
				index.PodsConflict(sa.pod, sa.anti, att.memberNode[i].Node(), sb.pod, sb.anti, att.memberNode[j].Node()) {
				return true
			}
		}
	}
	return false
}

// freeShapes is what the free segments need per shape: want, the members
// of that shape over all of them; least, the fewest members of that shape
// any one of them has.
type freeShapes struct {
	segments    int
	want, least []int
}

func (sg *segmenter) freeShapes(free []int) freeShapes {
	fs := freeShapes{segments: len(free), want: make([]int, len(sg.distinct)), least: make([]int, len(sg.distinct))}
	per := make([]int, len(sg.distinct))
	for i, s := range free {
		clear(per)
		for _, mi := range sg.lay.members[s] {
			per[sg.ids[mi]]++
			fs.want[sg.ids[mi]]++
		}
		for id, n := range per {
			if i == 0 || n < fs.least[id] {
				fs.least[id] = n
			}
		}
	}
	return fs
}

// estimate is how many of the free segments the bin holds at most besides
// its pinned ones, by the cheap checks: per shape, the copies that fit on
// its nodes, less the pinned members', over the fewest members of that
// shape any free segment has; and all members over the segment size.
func (sg *segmenter) estimate(ctx context.Context, bin *topology.Domain, pinned []int, fs freeShapes) (int, error) {
	if fs.segments == 0 {
		return 0, nil
	}
	taken := make([]int, len(sg.distinct)) // by pinned members
	for _, s := range pinned {
		for _, mi := range sg.lay.members[s] {
			taken[sg.ids[mi]]++
		}
	}
	bound, total := fs.segments, 0
	for id := range sg.distinct {
		if fs.want[id] == 0 {
			continue
		}
		got := 0
		for _, n := range bin.Nodes {
			c, _, err := sg.fit.fitOn(ctx, sg.s.Node(n), id, nil)
			if err != nil {
				return 0, err
			}
			if got += c; got >= fs.want[id]+taken[id] {
				got = fs.want[id] + taken[id]
				break
			}
		}
		avail := max(got-taken[id], 0)
		total += avail
		if fs.least[id] > 0 {
			bound = min(bound, avail/fs.least[id])
		}
	}
	return min(bound, total/sg.size), nil
}

// subMembers is the members idx (ascending gang indexes) of m: their
// shapes, with m's distinct shapes and main class.
func subMembers(m *members, idx []int) *members {
	sub := &members{distinct: m.distinct, class: m.class}
	for _, mi := range idx {
		sub.per = append(sub.per, m.per[mi])
		sub.ids = append(sub.ids, m.ids[mi])
		sub.need += m.per[mi].need[m.class]
	}
	sub.perPod = sub.need
	for _, sh := range sub.per {
		sub.perPod = min(sub.perPod, sh.need[m.class])
	}
	return sub
}
