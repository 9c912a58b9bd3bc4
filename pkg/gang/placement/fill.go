package placement

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/rails"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// filler places the gang in one domain (verify): the shared claims on an
// anchor node, the domain's nodes in pack order (packer), a balanced gang's
// quotas, the greedy fill, and when it fails the firstAvailable fills
// (firstalt.go) and the member search (searcher); rail alignment is the
// aligner's. Each fill places the members with the cheap checks (fits),
// then the allocator, NICs following their GPUs (rails.Follower).
type filler struct {
	*members
	s       *index.Snapshot
	fit     *fits
	pack    *packer
	follow  *rails.Follower
	align   *aligner
	search  *searcher
	alloc   allocator
	refused refusals
	shared  sharedClaims
	// anchors bounds the nodes tried as the shared claims' anchor
	// (Config.MaxSharedAnchors); old: Config.oldRails.
	anchors int
	old     bool
	// quota is set while a fill keeps to a balanced gang's quotas
	// (fillSpread).
	quota *spreadQuota
	// seg places a segmented gang in the domain instead of fillSpread
	// (segments.go); nil for other gangs.
	seg *segmenter
}

// sharedClaims are a gang's shared claims to allocate and their classes.
type sharedClaims struct {
	claims  []*resourceapi.ResourceClaim
	classes []string
}

// sharedOf returns the gang's shared claims to allocate, and the node
// selectors of those already allocated.
func sharedOf(g *Gang) (sharedClaims, []*nodeaffinity.NodeSelector, error) {
	var out sharedClaims
	var pins []*nodeaffinity.NodeSelector
	for _, c := range g.SharedClaims {
		if a := c.Status.Allocation; a != nil {
			if a.NodeSelector != nil {
				sel, err := nodeaffinity.NewNodeSelector(a.NodeSelector)
				if err != nil {
					return sharedClaims{}, nil, fmt.Errorf("claim %s/%s: node selector: %w", c.Namespace, c.Name, err)
				}
				pins = append(pins, sel)
			}
			continue
		}
		out.claims = append(out.claims, c)
	}
	out.classes = claimClasses(out.claims)
	return out, pins, nil
}

// verify places at least need members (all of them when need is the gang's
// size) in the domain, or returns nil. Shared claims are allocated first on
// an anchor node; the members then go only to nodes matching the
// allocations' node selectors. Anchors whose node matches the selectors of
// an anchor that already failed are skipped.
func (f *filler) verify(ctx context.Context, d *topology.Domain, need int) (*attempt, error) {
	f.search.startDomain()
	nodes, balance, err := f.pack.nodes(ctx, d, need)
	if err != nil || len(f.shared.claims) == 0 {
		if err != nil {
			return nil, err
		}
		return f.fillDomain(ctx, d, nodes, nil, need, balance)
	}
	var failed [][]*nodeaffinity.NodeSelector
	refusedViews := map[string]bool{}
	anchors := 0
	for _, ns := range nodes {
		view, err := f.sharedView(ctx, ns)
		if err != nil {
			return nil, err
		}
		if refusedViews[view] || matchesAny(failed, ns) {
			continue
		}
		if anchors++; anchors > f.anchors {
			break
		}
		res, why, err := f.alloc.allocate(ctx, ns, f.shared.claims, f.shared.classes, nil)
		if err != nil {
			return nil, err
		}
		if res == nil {
			f.refused.add(why+" for shared claims (domains)", d.ID)
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
		att, err := f.fillDomain(ctx, d, sub, res, need, balance)
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
func (f *filler) sharedView(ctx context.Context, ns *index.NodeState) (string, error) {
	cluster, err := f.s.ClusterSliceNames(ctx, ns, f.shared.classes)
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

// fillDomain places the members on the domain's nodes: a segmented gang's
// segments (segmenter), the others' members (fillSpread).
func (f *filler) fillDomain(ctx context.Context, d *topology.Domain, nodes []*index.NodeState, shared []resourceapi.AllocationResult, need int, balance *spreadQuota) (*attempt, error) {
	if f.seg != nil {
		return f.seg.place(ctx, d, nodes, shared, need)
	}
	return f.fillSpread(ctx, d, nodes, shared, need, balance)
}

// fillSpread fills the members (fillAligned): for a balanced gang first
// within the quotas the pack order gave (balance), greedy fill only; when
// that fails, or for a packed gang, as packed.
func (f *filler) fillSpread(ctx context.Context, d *topology.Domain, nodes []*index.NodeState, shared []resourceapi.AllocationResult, need int, balance *spreadQuota) (*attempt, error) {
	if balance != nil {
		f.quota = balance
		att, err := f.fillAligned(ctx, d, nodes, shared, need)
		f.quota = nil
		if att != nil || err != nil {
			return att, err
		}
	}
	return f.fillAligned(ctx, d, nodes, shared, need)
}

// fillAligned fills the members (fillHarder when the greedy fill fails)
// and scores rail alignment; with alignment required and a placement that
// is not aligned, or none, it searches rail sets (aligner.align), each
// verified by the greedy fill (then the search when that fails; the
// firstAvailable fills for a placement found by demoting alternatives).
func (f *filler) fillAligned(ctx context.Context, d *topology.Domain, nodes []*index.NodeState, shared []resourceapi.AllocationResult, need int) (*attempt, error) {
	own := func(mi int) []*resourceapi.ResourceClaim { return f.per[mi].claims }
	att, err := f.fill(ctx, d, nodes, shared, own, nil, need)
	if err != nil {
		return nil, err
	}
	refill := railRefill(func(variant string, nodes []*index.NodeState, claimsOf func(int) []*resourceapi.ResourceClaim) (*attempt, error) {
		alt, err := f.fill(ctx, d, nodes, shared, claimsOf, nil, need)
		if alt != nil || err != nil || f.old || f.quota != nil { // balanced: greedy only (fillSpread)
			return alt, err
		}
		return f.search.run(ctx, d, nodes, shared, variant, claimsOf, need)
	})
	if att == nil {
		var harder railRefill
		if att, harder, err = f.fillHarder(ctx, d, nodes, shared, need); err != nil {
			return nil, err
		}
		if harder != nil {
			refill = harder
		}
	}
	return f.align.align(ctx, d, nodes, att, need, refill)
}

// fillHarder runs when the greedy fill failed: greedy first choices can
// dead-end where later alternatives fit (firstalt.go), and greedy member
// placement where another assignment fits (search.go). It returns the
// placement found and, for one found by demoting alternatives, how to
// place the gang again on one rail set (rails.go; nil: the greedy refill).
// A balanced fill that fails falls back to packed (fillSpread) instead.
func (f *filler) fillHarder(ctx context.Context, d *topology.Domain, nodes []*index.NodeState, shared []resourceapi.AllocationResult, need int) (*attempt, railRefill, error) {
	if f.quota != nil {
		return nil, nil, nil
	}
	own := func(mi int) []*resourceapi.ResourceClaim { return f.per[mi].claims }
	att, err := f.fillAlternatives(ctx, d, nodes, shared, need, own)
	if att != nil || err != nil {
		return att, func(_ string, nodes []*index.NodeState, claimsOf func(int) []*resourceapi.ResourceClaim) (*attempt, error) {
			return f.fillAlternatives(ctx, d, nodes, shared, need, claimsOf)
		}, err
	}
	if !f.search.on {
		return nil, nil, nil
	}
	att, err = f.search.run(ctx, d, nodes, shared, "", own, need)
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
func (f *filler) fill(ctx context.Context, d *topology.Domain, nodes []*index.NodeState, shared []resourceapi.AllocationResult,
	claimsOf func(int) []*resourceapi.ResourceClaim, variant []int, need int) (*attempt, error) {
	att := &attempt{dom: d, inflight: index.InFlight{}, used: map[*index.NodeState]*usage{}, shared: shared}
	att.inflight.Add(shared)
	quota := f.quota.start()
	cursors := map[[2]int]int{}
	for mi, sh := range f.per {
		id := f.ids[mi]
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
			c, _, err := f.fit.fitOn(ctx, ns, id, att.used[ns])
			if err != nil {
				return nil, err
			}
			if c == 0 {
				continue
			}
			if f.fit.antiExisting(mi, ns) || att.antiConflict(f.members, mi, ns) {
				f.refused.add(CheckPodAntiAffinity, ns.Name())
				continue
			}
			claims := claimsOf(mi)
			var res []resourceapi.AllocationResult
			if len(claims) > 0 {
				var why string
				res, why, err = f.follow.AllocMember(ctx, ns, mi, claims, att.inflight)
				if err != nil {
					return nil, err
				}
				if res == nil {
					f.refused.add(why, ns.Name())
					continue
				}
			}
			att.place(mi, ns, sh, claims, res)
			quota.take(ns)
			placed = true
			cursor-- // stay on this node for the next member of the shape
		}
		cursors[key] = cursor
		if !placed && need >= len(f.per) {
			return nil, nil
		}
	}
	if len(att.members) < need {
		return nil, nil
	}
	return att, nil
}
