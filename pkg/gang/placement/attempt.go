package placement

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// usage is what the gang's earlier members take on one node.
type usage struct {
	res  index.ResList
	pods int64
	dev  map[string]int
}

// attempt is a (partial) placement of the gang in one domain.
type attempt struct {
	dom      *topology.Domain
	inflight index.InFlight
	used     map[*index.NodeState]*usage
	shared   []resourceapi.AllocationResult
	// members[i] is the gang index of the i-th placed member; memberNode,
	// memberRes and memberClm are parallel to it.
	members    []int
	memberNode []*index.NodeState
	memberRes  [][]resourceapi.AllocationResult
	memberClm  [][]*resourceapi.ResourceClaim
	score      Score
}

// allocate runs one Allocate call (index.Snapshot.Allocate), counted in
// the Place's Stats; it returns nil and the failed check when the claims
// do not fit.
func (p *placer) allocate(ctx context.Context, ns *index.NodeState, claims []*resourceapi.ResourceClaim, classes []string, inflight index.InFlight) ([]resourceapi.AllocationResult, string, error) {
	a, err := p.s.Allocate(ctx, ns, claims, classes, inflight)
	if err != nil {
		return nil, "", err
	}
	p.stats.record(a.Took)
	switch {
	case a.TimedOut:
		return nil, CheckAllocatorTime, nil
	case a.Results == nil:
		return nil, CheckAllocator, nil
	}
	return a.Results, "", nil
}

func (p *placer) refuse(check string, node string) {
	if p.refused[check] == nil {
		p.refused[check] = map[string]bool{}
	}
	p.refused[check][node] = true
}

// verify places at least need members (all of them when need is the gang's
// size) in the domain, or returns nil. Shared claims are allocated first on
// an anchor node; the members then go only to nodes matching the
// allocations' node selectors. Anchors whose node matches the selectors of
// an anchor that already failed are skipped.
func (p *placer) verify(ctx context.Context, d *topology.Domain, need int) (*attempt, error) {
	p.budget = newSearchBudget(len(p.per), p.searchLeft)
	nodes, err := p.packOrder(ctx, d, need)
	if err != nil || len(p.sharedClaims) == 0 {
		if err != nil {
			return nil, err
		}
		return p.fillSpread(ctx, d, nodes, nil, need)
	}
	var failed [][]*nodeaffinity.NodeSelector
	refusedViews := map[string]bool{}
	anchors := 0
	for _, ns := range nodes {
		view, err := p.sharedView(ctx, ns)
		if err != nil {
			return nil, err
		}
		if refusedViews[view] || matchesAny(failed, ns) {
			continue
		}
		if anchors++; anchors > p.cfg.MaxSharedAnchors {
			break
		}
		res, why, err := p.allocate(ctx, ns, p.sharedClaims, p.sharedClasses, nil)
		if err != nil {
			return nil, err
		}
		if res == nil {
			p.refuse(why+" for shared claims (domains)", d.ID)
			refusedViews[view] = true
			continue
		}
		sels, err := selectorsOf(res)
		if err != nil {
			return nil, err
		}
		var sub []*index.NodeState
		for _, n := range nodes {
			if matchesAll(sels, n) {
				sub = append(sub, n)
			}
		}
		att, err := p.fillSpread(ctx, d, sub, res, need)
		if att != nil || err != nil {
			return att, err
		}
		failed = append(failed, sels)
	}
	return nil, nil
}

// sharedView names the cluster-level slices of the shared claims' classes
// that a node sees. Nodes with the same view get the same answer for the
// shared claims, so after a refusal the engine skips them.
func (p *placer) sharedView(ctx context.Context, ns *index.NodeState) (string, error) {
	cluster, err := p.s.ClusterSliceNames(ctx, ns, p.sharedClasses)
	if err != nil {
		return "", err
	}
	if len(cluster) == 0 {
		return ns.Name(), nil // node-local slices differ per node
	}
	return strings.Join(cluster, "\x00"), nil // the shared classes live in cluster-level pools
}

func selectorsOf(results []resourceapi.AllocationResult) ([]*nodeaffinity.NodeSelector, error) {
	var out []*nodeaffinity.NodeSelector
	for _, r := range results {
		if r.NodeSelector == nil {
			continue
		}
		sel, err := nodeaffinity.NewNodeSelector(r.NodeSelector)
		if err != nil {
			return nil, fmt.Errorf("allocation node selector: %w", err)
		}
		out = append(out, sel)
	}
	return out, nil
}

func matchesAll(sels []*nodeaffinity.NodeSelector, ns *index.NodeState) bool {
	for _, s := range sels {
		if !s.Match(ns.Node()) {
			return false
		}
	}
	return true
}

func matchesAny(sets [][]*nodeaffinity.NodeSelector, ns *index.NodeState) bool {
	for _, sels := range sets {
		if matchesAll(sels, ns) {
			return true
		}
	}
	return false
}

// fillHarder runs when the greedy fill failed: greedy first choices can
// dead-end where later alternatives fit (firstalt.go), and greedy member
// placement where another assignment fits (search.go). It returns the
// placement found and, for one found by demoting alternatives, how to
// place the gang again on one rail set (rails.go; nil: the greedy refill).
// A balanced fill that fails falls back to packed (fillSpread) instead.
func (p *placer) fillHarder(ctx context.Context, d *topology.Domain, nodes []*index.NodeState, shared []resourceapi.AllocationResult, need int) (*attempt, railRefill, error) {
	if p.quota != nil {
		return nil, nil, nil
	}
	own := func(mi int) []*resourceapi.ResourceClaim { return p.per[mi].claims }
	att, err := p.fillAlternatives(ctx, d, nodes, shared, need, own)
	if att != nil || err != nil {
		return att, func(_ string, nodes []*index.NodeState, claimsOf func(int) []*resourceapi.ResourceClaim) (*attempt, error) {
			return p.fillAlternatives(ctx, d, nodes, shared, need, claimsOf)
		}, err
	}
	if !p.searchable {
		return nil, nil, nil
	}
	att, err = p.search(ctx, d, nodes, shared, "", own, need)
	return att, nil, err
}

// fill places the members in order. Each member goes to the first node (in
// the given order, from where the previous member of its shape went) that
// passes the cheap checks and where the allocator finds its claims'
// devices next to the gang's in-flight ones. Nodes a shape failed on are
// not tried again for that shape: the gang only ever takes more. Members
// whose claims differ (variant, nil: none do) keep separate cursors. When
// need is less than the gang's size, a member that fits nowhere is left
// out; the attempt succeeds with at least need members.
func (p *placer) fill(ctx context.Context, d *topology.Domain, nodes []*index.NodeState, shared []resourceapi.AllocationResult,
	claimsOf func(int) []*resourceapi.ResourceClaim, variant []int, need int) (*attempt, error) {
	att := &attempt{dom: d, inflight: index.InFlight{}, used: map[*index.NodeState]*usage{}, shared: shared}
	att.inflight.Add(shared)
	quota := p.quota.start()
	cursors := map[[2]int]int{}
	for mi, sh := range p.per {
		id := p.ids[mi]
		key := [2]int{id, 0}
		if variant != nil {
			key[1] = variant[mi]
		}
		cursor := cursors[key]
		placed := false
		for ; cursor < len(nodes) && !placed; cursor++ {
			ns := nodes[cursor]
			if !quota.allows(ns) {
				continue
			}
			c, _, err := p.fitOn(ctx, ns, id, att.used[ns])
			if err != nil {
				return nil, err
			}
			if c == 0 {
				continue
			}
			if p.antiFailExisting(mi, ns) || p.antiFailPlaced(att, mi, ns) {
				p.refuse(CheckPodAntiAffinity, ns.Name())
				continue
			}
			claims := claimsOf(mi)
			var res []resourceapi.AllocationResult
			if len(claims) > 0 {
				var why string
				res, why, err = p.allocMember(ctx, ns, mi, claims, att.inflight)
				if err != nil {
					return nil, err
				}
				if res == nil {
					p.refuse(why, ns.Name())
					continue
				}
			}
			att.place(mi, ns, sh, claims, res)
			quota.take(ns)
			placed = true
			cursor-- // stay on this node for the next member of the shape
		}
		cursors[key] = cursor
		if !placed && need >= len(p.per) {
			return nil, nil
		}
	}
	if len(att.members) < need {
		return nil, nil
	}
	return att, nil
}

func (att *attempt) place(mi int, ns *index.NodeState, sh *shape, claims []*resourceapi.ResourceClaim, res []resourceapi.AllocationResult) {
	u := att.used[ns]
	if u == nil {
		u = &usage{res: index.ResList{}, dev: map[string]int{}}
		att.used[ns] = u
	}
	u.res.Add(sh.req, 1)
	u.pods++
	for c, n := range sh.need {
		u.dev[c] += n
	}
	att.inflight.Add(res)
	att.members = append(att.members, mi)
	att.memberNode = append(att.memberNode, ns)
	att.memberRes = append(att.memberRes, res)
	att.memberClm = append(att.memberClm, claims)
}
