package placement

import (
	"context"
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// decision turns a winning attempt into a Decision.
func (p *placer) decision(l *topology.Level, att *attempt) *Decision {
	d := &Decision{Gang: p.g.Key(), TopologyKey: l.Key, Domain: att.dom.ID, Spread: p.spreadOf(att), Score: att.score, Stats: p.stats, Warnings: p.warnings}
	for i, c := range p.sharedClaims {
		d.Claims = append(d.Claims, ClaimAllocation{Namespace: c.Namespace, Name: c.Name, UID: c.UID, Shared: true, Allocation: att.shared[i]})
	}
	for i, mi := range att.members {
		m := p.g.Members[mi]
		d.Pods = append(d.Pods, PodPlacement{Namespace: m.Pod.Namespace, Name: m.Pod.Name, UID: m.Pod.UID, Node: att.memberNode[i].node.Name})
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
	u := &Unschedulable{Gang: p.g.Key(), Pods: len(p.g.Members), MinCount: p.g.MinCount, Devices: p.need, DeviceClass: p.class, Levels: p.reports, Stats: p.stats}
	counts := map[string]int{}
	nodes := p.s.nodes
	if p.pin != nil {
		nodes = nil
		for _, n := range p.pin.Nodes {
			nodes = append(nodes, p.s.byName[n])
		}
	}
	for _, ns := range nodes {
		if _, why, err := p.fitOn(ctx, ns, 0, nil); err != nil {
			return nil, err
		} else if why != "" {
			counts[why]++
		}
	}
	for check, nodes := range p.refused {
		counts[check] += len(nodes)
	}
	u.NodeChecks = sortedChecks(counts)
	if err := p.explain(ctx, u); err != nil {
		return nil, err
	}
	u.Message = u.message()
	for _, w := range p.warnings {
		u.Message += "\n" + w
	}
	return u, nil
}

// Assume adds a decision of Place for gang g to the snapshot: its pods use
// their nodes' resources and its claims' devices are allocated, so the next
// Place sees them. It does not verify the decision. A pod whose node is not
// in the snapshot (deleted since) is skipped: it holds nothing there.
func (s *Snapshot) Assume(ctx context.Context, g *Gang, d *Decision) error {
	byUID := make(map[types.UID]*v1.Pod, len(g.Members))
	for _, m := range g.Members {
		byUID[m.Pod.UID] = m.Pod
	}
	touched := map[*nodeState]bool{}
	for _, pp := range d.Pods {
		pod := byUID[pp.UID]
		if pod == nil {
			return fmt.Errorf("decision places pod %s/%s, which is not a member of gang %s", pp.Namespace, pp.Name, g.Key())
		}
		ns := s.byName[pp.Node]
		if ns == nil {
			continue
		}
		ns.addPod(podRequests(pod))
		ns.boundPods = append(ns.boundPods, pod)
		s.indexAnti(pod, ns.node)
		touched[ns] = true
		s.globalTouched = s.globalTouched || hasAntiAffinity(pod)
	}
	for _, c := range d.Claims {
		for _, r := range c.Allocation.Devices.Results {
			if ns := s.poolNode[poolID{r.Driver, r.Pool}]; ns != nil {
				touched[ns] = true
			} else {
				s.globalTouched = true
			}
		}
	}
	nodes := make([]*nodeState, 0, len(touched))
	for ns := range touched {
		nodes = append(nodes, ns)
		s.touched[ns.node.Name] = true
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].node.Name < nodes[j].node.Name })
	keys := make([]string, 0, len(s.levels))
	for k := range s.levels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	before := map[*nodeState]map[string]int{}
	for _, ns := range nodes {
		before[ns] = map[string]int{}
		for _, k := range keys {
			if c := s.levels[k].class; c != "" {
				f, err := s.freeDevices(ctx, ns, c)
				if err != nil {
					return err
				}
				before[ns][c] = f
			}
		}
	}
	for i := range d.Claims {
		s.markAllocated(&d.Claims[i].Allocation)
		s.recordHolders(g.Key(), &d.Claims[i].Allocation)
	}
	for _, k := range keys {
		li := s.levels[k]
		if li.class == "" {
			continue
		}
		for _, ns := range nodes {
			f, err := s.freeDevices(ctx, ns, li.class)
			if err != nil {
				return err
			}
			li.update(ns.node.Name, before[ns][li.class], f)
		}
	}
	return nil
}
