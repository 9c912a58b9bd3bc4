package placement

import (
	"context"
	"fmt"
	"slices"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/rails"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Rail alignment across members (issue 13, "rails done fully"): the
// aligner scores a placement's rail sets and, when alignment is required
// and the placement is not aligned, verifies the rail sets that the leaf
// package pkg/gang/placement/rails counts, by placing the gang again
// (its rules: pkg/gang/placement/rails, search.go). NICs follow their
// GPUs (rails.Follower), claims are limited to rail sets (rails.Copies).

// CheckRailFollow counts nodes refused because no allocation there puts a
// member's NICs on its GPUs' rails and the gang requires rail alignment;
// CheckRailFollowBudget those where the tries stopped at
// rails.MaxFollowCalls.
const (
	CheckRailFollow       = rails.CheckFollow
	CheckRailFollowBudget = rails.CheckFollowBudget
)

// CheckRailAlignment counts domains rejected because rail alignment was
// required and no aligned placement was found.
const CheckRailAlignment = "rail alignment impossible (domains)"

// maxRailRefills bounds the rail sets verified per domain.
const maxRailRefills = 8

// aligner searches rail sets for a gang that requires rail alignment (the
// rules: pkg/gang/placement/rails, search.go) in one Place call.
type aligner struct {
	*members
	search  *rails.Search
	follow  *rails.Follower
	copies  *rails.Copies
	stats   *Stats
	refused refusals
	logger  klog.Logger
	// required: the gang requires rail alignment; old: Config.oldRails.
	required bool
	old      bool
	// why: per domain id, why no rail set placed the gang there (for the
	// explanation). Made on first use.
	why map[string]string
}

// railMembers is m as the rail searches read it: the same shapes'
// claims, classes and needs, not copied.
func railMembers(m *members) *rails.Members {
	rm := &rails.Members{Class: m.class, IDs: m.ids}
	of := map[*shape]*rails.Shape{}
	conv := func(sh *shape) *rails.Shape {
		if r, ok := of[sh]; ok {
			return r
		}
		r := &rails.Shape{Need: sh.need, Classes: sh.classes, Claims: sh.claims, AllClasses: sh.allClasses}
		of[sh] = r
		return r
	}
	for _, sh := range m.per {
		rm.Per = append(rm.Per, conv(sh))
	}
	for _, sh := range m.distinct {
		rm.Distinct = append(rm.Distinct, conv(sh))
	}
	return rm
}

// railRefill places the gang again on the nodes (in pack order) with
// every member's claims given by claimsOf (variant names them for the
// search's memo).
type railRefill func(variant string, nodes []*index.NodeState, claimsOf func(int) []*resourceapi.ResourceClaim) (*attempt, error)

// align scores att's rail alignment and, when alignment is required
// and att is not aligned, returns the first aligned refill over the
// candidate rail sets (the rails package's rules), or nil after refusing the
// domain. With att nil (no placement found) it searches the rail sets
// only when alignment is required, and refuses nothing itself.
func (a *aligner) align(ctx context.Context, d *topology.Domain, nodes []*index.NodeState, att *attempt, need int, refill railRefill) (*attempt, error) {
	if att == nil && (!a.required || a.old) {
		return nil, nil
	}
	if att != nil {
		sets, err := a.railSets(ctx, att)
		if err != nil {
			return nil, err
		}
		att.score.RailSets = len(sets)
		if !a.required || len(sets) <= 1 {
			return att, nil
		}
		if a.old {
			return a.alignRailsOld(ctx, d, nodes, sets, refill)
		}
	}
	cands, why, err := a.search.Candidates(ctx, nodes, need)
	if err != nil {
		return nil, err
	}
	alt, verified, err := a.verifyRailSets(ctx, nodes, cands, refill)
	a.logger.V(5).Info("Searched rail sets", "domain", d.ID, "firstPlacement", att != nil, "candidates", len(cands), "verified", verified, "found", alt != nil)
	if alt != nil || err != nil || att == nil {
		return alt, err
	}
	if n := len(cands); n > 0 {
		why = fmt.Sprintf("rail sets with room by counts: %d (most: rails %s, room for %s); placed again on %d of them (the budget: %d), the members never all used the set",
			n, cands[0].Key, plural(cands[0].Room, "pod"), verified, maxRailRefills)
	}
	if a.why == nil {
		a.why = map[string]string{}
	}
	a.why[d.ID] = why
	a.refused.add(CheckRailAlignment, d.ID)
	return nil, nil
}

// verifyRailSets refills the candidates in order, at most maxRailRefills
// of them, and returns the first aligned placement and how many it tried.
func (a *aligner) verifyRailSets(ctx context.Context, nodes []*index.NodeState, cands []rails.Cand, refill railRefill) (*attempt, int, error) {
	for i, c := range cands {
		if i == maxRailRefills {
			a.stats.RailCutoffs++
			return nil, i, nil
		}
		alt, err := a.refillRails(ctx, nodes, c.Rails, refill)
		if alt != nil || err != nil {
			return alt, i + 1, err
		}
	}
	return nil, len(cands), nil
}

// refillRails places the gang with every member limited to the rails, on
// the nodes where a member fits by counts (rails.Search.OnRails), and
// returns the
// placement when every member uses exactly them.
func (a *aligner) refillRails(ctx context.Context, nodes []*index.NodeState, set []int64, refill railRefill) (*attempt, error) {
	a.stats.RailRefills++
	fit, err := a.search.OnRails(ctx, nodes, set)
	if err != nil {
		return nil, err
	}
	claims := a.search.Limited(a.copies, set)
	key := rails.Key(slices.Clone(set))
	alt, err := refill("rails "+key, fit, func(mi int) []*resourceapi.ResourceClaim { return claims[mi] })
	if alt == nil || err != nil {
		return nil, err
	}
	sets, err := a.railSets(ctx, alt)
	if err != nil {
		return nil, err
	}
	if alt.score.RailSets = len(sets); len(sets) == 1 && sets[key] > 0 {
		return alt, nil
	}
	return nil, nil
}

// railSets returns, per distinct member rail set of att (rails.Sets), how
// many members use it.
func (a *aligner) railSets(ctx context.Context, att *attempt) (map[string]int, error) {
	return a.follow.Sets(ctx, att.memberNode, att.memberRes)
}

// alignRailsOld is the rail alignment before the search over rail sets,
// kept for comparisons (OldRails in export_test.go): refills with the
// main-class requests limited to one of the four most used sets of att,
// without a device on every rail of the set.
func (a *aligner) alignRailsOld(ctx context.Context, d *topology.Domain, nodes []*index.NodeState, sets map[string]int, refill railRefill) (*attempt, error) {
	keys := make([]string, 0, len(sets))
	for k := range sets {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if sets[keys[i]] != sets[keys[j]] {
			return sets[keys[i]] > sets[keys[j]]
		}
		return keys[i] < keys[j]
	})
	for _, set := range keys[:min(4, len(keys))] {
		restricted := a.search.RestrictOld(set)
		alt, err := refill("rails "+set, nodes, func(mi int) []*resourceapi.ResourceClaim { return restricted[mi] })
		if err != nil {
			return nil, err
		}
		if alt == nil {
			continue
		}
		got, err := a.railSets(ctx, alt)
		if err != nil {
			return nil, err
		}
		if alt.score.RailSets = len(got); len(got) <= 1 {
			return alt, nil
		}
	}
	a.refused.add(CheckRailAlignment, d.ID)
	return nil, nil
}
