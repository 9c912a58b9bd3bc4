package placement

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// SegmentPlacement is where one segment of a segmented gang went.
type SegmentPlacement struct {
	// Index is the segment's number in rank order (members
	// [Index*size, (Index+1)*size) of the whole gang).
	Index int
	// Domain is its domain of Decision.SegmentTopologyKey; Pods how many
	// of its members this decision places.
	Domain string
	Pods   int
}

// placements lists the placed segments, in rank order.
func (sg *segmenter) placements(att *attempt) []SegmentPlacement {
	at := map[int]int{}
	var out []SegmentPlacement
	for i, mi := range att.members {
		s := sg.lay.of[mi]
		pi, ok := at[s]
		if !ok {
			id := ""
			if dom := sg.level.DomainOf(att.memberNode[i].Name()); dom != nil {
				id = dom.ID
			}
			pi = len(out)
			at[s] = pi
			out = append(out, SegmentPlacement{Index: s, Domain: id})
		}
		out[pi].Pods++
	}
	// Members are in gang order, so segments are too.
	return out
}

// maxSegmentRuns is how many runs of segments SegmentSummary names.
const maxSegmentRuns = 4

// SegmentSummary renders where a segmented gang's segments went, for
// events: "segments of 16 in gpufabric.dev/nvlinkDomain: 0-3 in nvl-a, 4-7
// in nvl-c" (consecutive segments in one domain as one run, at most four
// runs named); "" for a gang without segments.
func (d *Decision) SegmentSummary() string {
	if len(d.Segments) == 0 {
		return ""
	}
	type run struct {
		first, last int
		domain      string
	}
	var runs []run
	for _, sp := range d.Segments {
		if n := len(runs); n > 0 && runs[n-1].domain == sp.Domain && runs[n-1].last == sp.Index-1 {
			runs[n-1].last = sp.Index
			continue
		}
		runs = append(runs, run{sp.Index, sp.Index, sp.Domain})
	}
	parts := make([]string, 0, min(len(runs), maxSegmentRuns)+1)
	for _, r := range runs[:min(len(runs), maxSegmentRuns)] {
		if r.first == r.last {
			parts = append(parts, fmt.Sprintf("%d in %s", r.first, r.domain))
			continue
		}
		parts = append(parts, fmt.Sprintf("%d-%d in %s", r.first, r.last, r.domain))
	}
	if more := len(runs) - maxSegmentRuns; more > 0 {
		parts = append(parts, fmt.Sprintf("%d more", more))
	}
	return fmt.Sprintf("segments in %s: %s", d.SegmentTopologyKey, strings.Join(parts, ", "))
}

// explainLevel is the level whose domains a refusal explains: the widest
// tried (the segments' best chance), unless it is not above the segment
// level; then the first tried.
func (sg *segmenter) explainLevel(levels []*topology.Level) *topology.Level {
	if l := levels[len(levels)-1]; sg.level.Index < 0 || l.Index > sg.level.Index {
		return l
	}
	return levels[0]
}

// whySegments: the domain's segment-level domains hold too few whole
// segments (by counts, as verification left them), a late member's
// segment has no domain here, or the plan ran out of its budget.
func (x *explainer) whySegments(ctx context.Context, _ *topology.Level, e *index.DomainEntry, r *DomainRefusal) (bool, error) {
	sg := x.seg
	if sg == nil {
		return false, nil
	}
	w := sg.why[e.Domain().ID]
	if w == nil { // not verified: the counts alone
		nodes := make([]*index.NodeState, 0, len(e.Domain().Nodes))
		for _, n := range e.Domain().Nodes {
			nodes = append(nodes, x.s.Node(n))
		}
		var err error
		if _, _, w, err = sg.request(ctx, e.Domain(), nodes, x.needPods()); err != nil {
			return false, err
		}
	}
	fits := w.fits
	if w.res.Fits != nil {
		fits = w.res.Fits
	}
	total, best := 0, -1
	for i, f := range fits {
		total += f
		if best < 0 || f > fits[best] {
			best = i
		}
	}
	size, key := sg.size, sg.level.Key
	switch {
	case w.broken != "":
		r.Why = w.broken
		r.Action = "wait for room in that domain, or restart the gang whole"
	case w.res.Found:
		return false, nil
	case w.res.Cutoff:
		r.Why = fmt.Sprintf("the segment plan verified %d %s domains (its budget) without finding %d whole segments of %d", w.res.Places, key, w.atLeast, size)
		r.Action = "retry when the cluster changes, or use a wider segment level"
	case total >= w.atLeast && w.atLeast > 0:
		return false, nil
	default:
		r.Why = fmt.Sprintf("needs %s of %d pods, each in one %s: its %s hold %s",
			plural(max(w.atLeast, 1), "segment"), size, key, plural(len(fits), key+" domain"), plural(total, "whole segment"))
		if best >= 0 {
			r.Why += fmt.Sprintf(" (the best, %s, holds %d)", w.bins[best], fits[best])
		}
		var actions []string
		if total > 0 {
			actions = append(actions, fmt.Sprintf("lower minCount to %d (%s)", total*size, plural(total, "segment")))
		}
		r.Action = strings.Join(append(actions, "use a smaller "+topology.AnnotationSegmentSize, "wait for devices to free up"), ", or ")
	}
	return true, nil
}
