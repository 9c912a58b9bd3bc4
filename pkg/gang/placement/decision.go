package placement

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// decision turns a winning attempt into a Decision.
func (p *placer) decision(l *topology.Level, att *attempt) *Decision {
	d := &Decision{Gang: p.g.Key(), TopologyKey: l.Key, Domain: att.dom.ID, Spread: spreadOf(p.s.Tree(), att), Score: att.score, Stats: *p.stats, Warnings: p.warnings, FabricHealth: p.fabricNote}
	if sg := p.fill.seg; sg != nil {
		d.SegmentTopologyKey, d.Segments = sg.level.Key, sg.placements(att)
	}
	for i, c := range p.shared.claims {
		d.Claims = append(d.Claims, ClaimAllocation{Namespace: c.Namespace, Name: c.Name, UID: c.UID, Shared: true, Allocation: att.shared[i]})
	}
	for i, mi := range att.members {
		m := p.g.Members[mi]
		d.Pods = append(d.Pods, PodPlacement{Namespace: m.Pod.Namespace, Name: m.Pod.Name, UID: m.Pod.UID, Node: att.memberNode[i].Name()})
		for ci, c := range att.memberClm[i] {
			d.Claims = append(d.Claims, ClaimAllocation{Namespace: c.Namespace, Name: c.Name, UID: c.UID, Pod: m.Pod.Name, Allocation: att.memberRes[i][ci]})
		}
	}
	return d
}

// unschedulable builds the report: the levels tried, and per-node check
// counts for the first member's shape over all nodes (the pinned domain's,
// when pinned) plus the refusals seen while verifying.
func (p *placer) unschedulable(ctx context.Context) (*Unschedulable, error) {
	u := &Unschedulable{Gang: p.g.Key(), Pods: len(p.g.Members), MinCount: p.g.MinCount, Devices: p.need, DeviceClass: p.class, Levels: p.reports, Stats: *p.stats,
		SegmentSize: p.g.SegmentSize, SegmentTopologyKey: p.g.SegmentTopologyKey}
	counts := map[string]int{}
	nodes := p.s.Nodes()
	if p.pin != nil {
		nodes = nil
		for _, n := range p.pin.Nodes {
			nodes = append(nodes, p.s.Node(n))
		}
	}
	for _, ns := range nodes {
		if p.s.Tree().IsRefused(ns.Name()) {
			counts[CheckNodeRefused]++
			continue
		}
		if _, why, err := p.fit.fitOn(ctx, ns, 0, nil); err != nil {
			return nil, err
		} else if why != "" {
			counts[why]++
		}
	}
	for check, nodes := range p.refused {
		counts[check] += len(nodes)
	}
	u.NodeChecks = sortedChecks(counts)
	ex := &explainer{members: p.members, s: p.s, g: p.g, fit: p.fit, refused: p.refused, shared: p.shared.claims, pin: p.pin, railWhy: p.fill.align.why, seg: p.fill.seg}
	if err := ex.explain(ctx, u); err != nil {
		return nil, err
	}
	u.Message = u.message() + extendedNote(p.g)
	for _, w := range p.warnings {
		u.Message += "\n" + w
	}
	return u, nil
}

// Assume adds a decision of Place for gang g to the snapshot: its pods use
// their nodes' resources and its claims' devices are allocated, so the next
// Place sees them (index.Snapshot.Assume). It does not verify the decision,
// but refuses, changing nothing, one that places a pod that is not a
// member of g. A pod whose node is not in the snapshot (deleted since) is
// skipped: it holds nothing there.
func Assume(ctx context.Context, s *index.Snapshot, g *Gang, d *Decision) error {
	byUID := make(map[types.UID]*v1.Pod, len(g.Members))
	for _, m := range g.Members {
		byUID[m.Pod.UID] = m.Pod
	}
	pods := make([]index.PlacedPod, 0, len(d.Pods))
	for _, pp := range d.Pods {
		pod := byUID[pp.UID]
		if pod == nil {
			return fmt.Errorf("decision places pod %s/%s, which is not a member of gang %s", pp.Namespace, pp.Name, g.Key())
		}
		pods = append(pods, index.PlacedPod{Pod: pod, Node: pp.Node})
	}
	allocations := make([]*resourceapi.AllocationResult, len(d.Claims))
	for i := range d.Claims {
		allocations[i] = &d.Claims[i].Allocation
	}
	return s.Assume(ctx, g.Key(), pods, allocations)
}
