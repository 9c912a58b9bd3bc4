package placement

import (
	"context"
	"fmt"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/rank"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/segment"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Hard segments (issue 25, item 2): a PodGroup with the annotations
// gpufabric.dev/segment-size N and gpufabric.dev/segment-topology-key K
// asks that members [0,N), [N,2N), … in rank order (rank.go) each lie in
// one domain of level K, all inside the gang's own domain.
//
// Rules:
//   - K must be strictly below the gang's topology key when it has one
//     (both tree levels; a key that is only a node label is not ordered
//     against the tree, and its segments lie in the intersection of both
//     domains); otherwise the gang is refused with a message naming the
//     annotation. A gang whose members are not a multiple of N (a partial
//     segment) is refused too.
//   - The gang's levels and domains are walked as for any gang (place.go);
//     in each domain the filler, after the shared claims' anchor, hands
//     the domain's nodes to the segmenter instead of filling them. The
//     segmenter groups them by their domain of K (bins), counts per bin
//     how many whole segments fit by the cheap checks (an upper bound),
//     and plans with pkg/gang/placement/segment: the fewest bins, fullest
//     first, segments dealt in rank order. Each bin's segments are then
//     placed by a filler of their members only (pack order, greedy fill,
//     search, rails, as for a gang in that bin), next to the devices the
//     bins before it took; a bin that does not verify gets a lower count
//     and the plan is made again (segment.Plan), within maxSegmentPlaces
//     bins verified per domain.
//   - minCount below the gang's size: at least ⌈minCount/N⌉ whole
//     segments, the first ones in rank order, as many as fit. Members of
//     the segments not placed stay pending and join later as late members.
//   - Late members (Gang.Running): ranks count the running members too. A
//     segment with a running member goes only to the domain of K where its
//     running members are (pinned); a segment none of whose members runs
//     is placed whole, and waits while some of its members are missing.
//   - Rail alignment required: each bin's segments are aligned, and the
//     domain is refused when the bins' rail sets differ.
//   - Required pod anti-affinity across bins is checked on the merged
//     placement.
//   - A shared fabric-domain claim (one IMEX channel of one NVLink domain)
//     still pins the whole gang to one NVLink domain: its segments lie in
//     it. A channel per segment needs a PodGroup per segment (composite
//     groups).

// CheckSegments counts domains where the segments found no placement.
const CheckSegments = "segments do not fit (domains)"

// maxSegmentPlaces bounds the bins verified per domain: a count, so the
// result stays deterministic.
const maxSegmentPlaces = 32

// segmentsOf reads a PodGroup's segment annotations (ErrInvalid when they
// are bad, or name the gang's own topology key).
func segmentsOf(pg *schedulingv1beta1.PodGroup, topologyKey string) (int, string, error) {
	size, key, err := topology.ParseSegments(pg.Annotations)
	if err == nil && size > 0 && key == topologyKey {
		err = fmt.Errorf("annotation %s: %s is the gang's own topology key: segments must use a smaller level", topology.AnnotationSegmentTopologyKey, key)
	}
	if err != nil {
		return 0, "", fmt.Errorf("podgroup %s/%s: %w: %w", pg.Namespace, pg.Name, err, ErrInvalid)
	}
	return size, key, nil
}

// segLayout is which segment each member is in.
type segLayout struct {
	size int
	// of is each pending member's segment; members the pending ones of
	// each segment, ascending; running the nodes of each segment's
	// running members.
	of      []int
	members [][]int
	running [][]string
}

// newSegLayout numbers the segments in rank order over the running and
// the pending members together.
func newSegLayout(g *Gang) segLayout {
	type entry struct {
		pod    *v1.Pod
		member int // -1: running
	}
	all := make([]entry, 0, len(g.Running)+len(g.Members))
	for _, p := range g.Running {
		all = append(all, entry{p, -1})
	}
	for i, m := range g.Members {
		all = append(all, entry{m.Pod, i})
	}
	sort.SliceStable(all, func(i, j int) bool { return rank.Compare(all[i].pod, all[j].pod) < 0 })
	n := (len(all) + g.SegmentSize - 1) / g.SegmentSize
	l := segLayout{size: g.SegmentSize, of: make([]int, len(g.Members)), members: make([][]int, n), running: make([][]string, n)}
	for pos, e := range all {
		s := pos / g.SegmentSize
		if e.member < 0 {
			l.running[s] = append(l.running[s], e.pod.Spec.NodeName)
			continue
		}
		l.of[e.member] = s
		l.members[s] = append(l.members[s], e.member)
	}
	for s := range l.members {
		slices.Sort(l.members[s])
	}
	return l
}

// whole reports whether segment s is complete: all its members exist.
func (l segLayout) whole(s int) bool { return len(l.members[s])+len(l.running[s]) == l.size }

// segmentRefusal says why a segmented gang cannot be placed at all on the
// snapshot's levels, "" when it can be tried.
func segmentRefusal(s *index.Snapshot, g *Gang, lay segLayout) string {
	sl := s.Level(g.SegmentTopologyKey)
	if g.TopologyKey != "" {
		gl := s.Level(g.TopologyKey)
		if g.TopologyKey == g.SegmentTopologyKey || gl.Index >= 0 && sl.Index >= gl.Index {
			return fmt.Sprintf("annotation %s: level %s is not below the gang's topology key %s; segments must be smaller than the gang's domain",
				topology.AnnotationSegmentTopologyKey, g.SegmentTopologyKey, g.TopologyKey)
		}
	}
	if len(sl.Domains) == 0 {
		return fmt.Sprintf("annotation %s: no node carries %s, so no segment has a domain", topology.AnnotationSegmentTopologyKey, g.SegmentTopologyKey)
	}
	if len(g.Running) == 0 && len(g.Members)%g.SegmentSize != 0 {
		return fmt.Sprintf("annotation %s: %d members make %s of %d and a partial one of %d; partial segments are refused: make the gang a multiple of %d",
			topology.AnnotationSegmentSize, len(g.Members), plural(len(g.Members)/g.SegmentSize, "whole segment"), g.SegmentSize, len(g.Members)%g.SegmentSize, g.SegmentSize)
	}
	return ""
}

// segmenter places a segmented gang's members in one domain (see the
// rules above); the filler calls it once the shared claims are placed.
type segmenter struct {
	*members
	s     *index.Snapshot
	size  int
	level *topology.Level
	lay   segLayout
	fit   *fits
	// fill is the gang's filler: its aligner scores the merged placement
	// and its searcher holds the Place's search budget.
	fill *filler
	// sub makes a filler for some of the members (newFiller).
	sub     func(m *members) *filler
	stats   *Stats
	refused refusals
	// invalid is segmentRefusal's answer.
	invalid string
	// why is, per gang domain id, its last plan's numbers (explain).
	why map[string]*segmentWhy
}

// segmentWhy is what one domain's plan found.
type segmentWhy struct {
	want, atLeast int
	bins          []string
	fits          []int
	res           segment.Result
	// broken names a segment whose running members are not in one domain
	// of the level inside this domain, or whose domain has no room;
	// waiting: all members were asked for, and some cannot be placed now.
	broken  string
	waiting bool
}

func newSegmenter(ctx context.Context, cfg Config, s *index.Snapshot, g *Gang, fill *filler) (*segmenter, error) {
	sg := &segmenter{members: fill.members, s: s, size: g.SegmentSize, level: s.Level(g.SegmentTopologyKey), lay: newSegLayout(g),
		fit: fill.fit, fill: fill, stats: fill.alloc.stats, refused: fill.refused, why: map[string]*segmentWhy{}}
	sg.invalid = segmentRefusal(s, g, sg.lay)
	sg.sub = func(m *members) *filler {
		fit := *fill.fit
		fit.members = m
		sub := g
		if g.Balanced {
			c := *g
			c.Balanced = false // the segments are the spread
			sub = &c
		}
		return newFiller(ctx, cfg, s, sub, &fit, fill.alloc, fill.refused, sharedClaims{})
	}
	return sg, nil
}

// place places at least need members in whole segments on the domain's
// nodes (in pack order, matching the shared claims' selectors), next to
// the shared claims' results, or returns nil.
func (sg *segmenter) place(ctx context.Context, d *topology.Domain, nodes []*index.NodeState, shared []resourceapi.AllocationResult, need int) (*attempt, error) {
	req, bins, why, err := sg.request(ctx, d, nodes, need)
	sg.why[d.ID] = why
	if err != nil || why.waiting {
		return nil, err
	}
	v := &segPlacer{sg: sg, bins: bins, shared: shared}
	res, err := segment.Plan(ctx, req, v)
	sg.stats.SegmentPlaces += res.Places
	for err == nil && res.PinnedFailed >= 0 && need < len(sg.per) {
		// Late members: the segments pinned to a bin without room for
		// them wait; the others are placed.
		b := res.PinnedFailed
		why.broken = fmt.Sprintf("segments %v: their running members are in %s %s, which has no room for their late members", req.Bins[b].Pinned, sg.level.Key, req.Bins[b].ID)
		req.Bins[b].Pinned = nil
		req.AtLeast = sg.atLeast(req, need)
		res, err = segment.Plan(ctx, req, v)
		sg.stats.SegmentPlaces += res.Places
	}
	why.res = res
	if err != nil || !res.Found {
		if res.Cutoff {
			sg.stats.SegmentCutoffs++
		}
		sg.refused.add(CheckSegments, d.ID)
		return nil, err
	}
	att := v.merge(d, shared)
	if len(att.members) < need {
		return nil, nil
	}
	return sg.finish(ctx, d, att, v)
}

// request makes the plan's request for the domain's nodes: the bins and
// their counts, the pinned segments (late members) and the free ones, and
// how many of those must be placed for need members; why.waiting when
// need asks for all members and some cannot be placed now.
func (sg *segmenter) request(ctx context.Context, d *topology.Domain, nodes []*index.NodeState, need int) (segment.Request, []*topology.Domain, *segmentWhy, error) {
	bins, byID := sg.bins(d, nodes)
	why := &segmentWhy{}
	req := segment.Request{Bins: make([]segment.Bin, len(bins)), MaxPlaces: maxSegmentPlaces}
	waiting := 0
	for s := range sg.lay.members {
		switch {
		case len(sg.lay.members[s]) == 0:
		case len(sg.lay.running[s]) > 0:
			bi, ok := sg.pinnedBin(s, byID)
			if !ok {
				why.broken = fmt.Sprintf("segment %d: its running members (on %s) are not in one %s domain with room here", s, shortList(sg.lay.running[s], 3), sg.level.Key)
				waiting += len(sg.lay.members[s])
				continue
			}
			req.Bins[bi].Pinned = append(req.Bins[bi].Pinned, s)
		case sg.lay.whole(s):
			req.Free = append(req.Free, s)
		default:
			waiting += len(sg.lay.members[s])
		}
	}
	req.AtLeast = sg.atLeast(req, need)
	why.waiting = need >= len(sg.per) && waiting > 0
	fs := sg.freeShapes(req.Free)
	for i, b := range bins {
		fit, err := sg.estimate(ctx, b, req.Bins[i].Pinned, fs)
		if err != nil {
			return req, nil, why, err
		}
		req.Bins[i].ID, req.Bins[i].Fit = b.ID, fit
		why.bins, why.fits = append(why.bins, b.ID), append(why.fits, fit)
	}
	why.want, why.atLeast = len(req.Free), req.AtLeast
	return req, bins, why, nil
}

// atLeast is how many free segments must be placed for need members
// besides the pinned ones: all of them when need is the gang's size.
func (sg *segmenter) atLeast(req segment.Request, need int) int {
	if need >= len(sg.per) {
		return len(req.Free)
	}
	for _, b := range req.Bins {
		for _, s := range b.Pinned {
			need -= len(sg.lay.members[s])
		}
	}
	return min(len(req.Free), (max(need, 0)+sg.size-1)/sg.size)
}

// pinnedBin is the bin of segment s's running members: all on nodes of
// one domain of the level, which holds some of this domain's nodes.
func (sg *segmenter) pinnedBin(s int, byID map[string]int) (int, bool) {
	id := ""
	for _, n := range sg.lay.running[s] {
		dom := sg.level.DomainOf(n)
		if dom == nil || id != "" && dom.ID != id {
			return 0, false
		}
		id = dom.ID
	}
	bi, ok := byID[id]
	return bi, ok
}

// bins groups the nodes by their domain of the segment level, as domains
// of those nodes only (in the level's id order), and indexes them by id.
func (sg *segmenter) bins(d *topology.Domain, nodes []*index.NodeState) ([]*topology.Domain, map[string]int) {
	byID := map[string]int{}
	var out []*topology.Domain
	for _, ns := range nodes {
		dom := sg.level.DomainOf(ns.Name())
		if dom == nil {
			continue
		}
		bi, ok := byID[dom.ID]
		if !ok {
			bi = len(out)
			byID[dom.ID] = bi
			out = append(out, &topology.Domain{Level: dom.Level, Key: dom.Key, ID: dom.ID, Parent: d})
		}
		out[bi].Nodes = append(out[bi].Nodes, ns.Name())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	for i, b := range out {
		byID[b.ID] = i
		slices.Sort(b.Nodes)
	}
	return out, byID
}
