package placement

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Rail alignment across members (issue 13, "rails done fully").
//
// Rules: a member's rail set is the rails of all its devices that carry
// an ibRail attribute, counted only when one of them is of the main class
// (members without a lead device on a rail do not count). Its NICs follow
// its GPUs (railfollow.go), so the set is its GPUs' rails; a NIC off them
// makes the set differ. Score.RailSets is the number of distinct sets; 1
// is aligned: every member uses the same set. With rail-alignment
// required and a placement that is not aligned, or none, the engine
// searches rail sets R (aligner.align):
//
//   - candidates: the sets R of the rails where some node of the domain
//     has a free lead device, of at most as many rails as the smallest
//     lead demand g of a member (every member uses every rail of R) and at
//     least as many as the largest demand needs at the most free lead
//     devices on one rail of a node, larger sets first, at most
//     maxRailCandidates of them; with at most 8 rails all are counted;
//   - count filter: R is kept when the members that fit on the domain's
//     nodes using exactly R (memberFit: the cheap checks, a free lead
//     device on every rail of R, enough free lead devices on R and enough
//     following devices on R) add up, per shape, to the members needed;
//   - order: most room first (members that fit, over all shapes), then
//     wider sets, then by rail numbers;
//   - verification: the gang is placed again on the nodes where a member
//     fits on R, every member's claims limited to R and its lead request
//     split so that it takes a device on every rail of R (railclaims.go):
//     the greedy fill, then the search (search.go, within the domain's
//     search budget) when that fails, or the firstAvailable fills for a
//     placement found by demoting alternatives. The first placement whose
//     members all use exactly R wins;
//   - budget: maxRailRefills sets verified per domain (a count, not a
//     clock); a cut counts in Stats.RailCutoffs. A domain whose first
//     placement no set replaces is refused with CheckRailAlignment and a
//     reason with numbers; without a first placement the refills refuse
//     nothing themselves.
//
// On nodes with one lead device per rail (HGX) and on nodes with up to two,
// for homogeneous gangs of exactCount claims the count filter is exact, so
// the first candidate verifies whenever an aligned placement exists.

// CheckRailAlignment counts domains rejected because rail alignment was
// required and no aligned placement was found.
const CheckRailAlignment = "rail alignment impossible (domains)"

// maxRailRefills bounds the rail sets verified per domain; maxRailCandidates
// the rail sets counted per domain (and per member and node, railfollow.go).
const (
	maxRailRefills    = 8
	maxRailCandidates = 4096
)

// aligner searches rail sets for a gang that requires rail alignment (see
// the rules above) in one Place call.
type aligner struct {
	*members
	fit     *fits
	follow  *follower
	copies  *railCopies
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

// railRefill places the gang again on the nodes (in pack order) with
// every member's claims given by claimsOf (variant names them for the
// search's memo).
type railRefill func(variant string, nodes []*index.NodeState, claimsOf func(int) []*resourceapi.ResourceClaim) (*attempt, error)

// align scores att's rail alignment and, when alignment is required
// and att is not aligned, returns the first aligned refill over the
// candidate rail sets (see the rules above), or nil after refusing the
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
	cands, why, err := a.railCandidates(ctx, nodes, need)
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
			n, cands[0].key, plural(cands[0].room, "pod"), verified, maxRailRefills)
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
func (a *aligner) verifyRailSets(ctx context.Context, nodes []*index.NodeState, cands []railCand, refill railRefill) (*attempt, int, error) {
	for i, c := range cands {
		if i == maxRailRefills {
			a.stats.RailCutoffs++
			return nil, i, nil
		}
		alt, err := a.refillRails(ctx, nodes, c.rails, refill)
		if alt != nil || err != nil {
			return alt, i + 1, err
		}
	}
	return nil, len(cands), nil
}

// refillRails places the gang with every member limited to the rails, on
// the nodes where a member fits by counts (memberFit), and returns the
// placement when every member uses exactly them.
func (a *aligner) refillRails(ctx context.Context, nodes []*index.NodeState, rails []int64, refill railRefill) (*attempt, error) {
	a.stats.RailRefills++
	var fit []*index.NodeState
	for _, ns := range nodes {
		nr, err := a.follow.freeRailsOf(ctx, ns)
		if err != nil {
			return nil, err
		}
		for id, sh := range a.distinct {
			cheap, _, err := a.fit.fitOn(ctx, ns, id, nil)
			if err != nil {
				return nil, err
			}
			if a.memberFit(nr, sh, rails, cheap) > 0 {
				fit = append(fit, ns)
				break
			}
		}
	}
	claims := make([][]*resourceapi.ResourceClaim, len(a.per))
	for mi := range a.per {
		claims[mi] = a.per[mi].claims
		if a.per[mi].need[a.class] > 0 {
			claims[mi] = a.copies.limit(a.per[mi].claims, rails, true)
		}
	}
	key := railKey(slices.Clone(rails))
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

// railSets returns, per distinct member rail set (see the rules above),
// how many members use it.
func (a *aligner) railSets(ctx context.Context, att *attempt) (map[string]int, error) {
	out := map[string]int{}
	for i, ns := range att.memberNode {
		lead, all, err := a.follow.memberRails(ctx, ns, att.memberRes[i])
		if err != nil {
			return nil, err
		}
		if len(lead) > 0 {
			out[railKey(all)]++
		}
	}
	return out, nil
}

// railCand is a candidate rail set and the members that fit on it.
type railCand struct {
	rails []int64
	key   string
	room  int
}

// railCandidates returns the rail sets where the members needed fit by
// counts, in try order, and why none when there is none (see the rules).
func (a *aligner) railCandidates(ctx context.Context, nodes []*index.NodeState, need int) ([]railCand, string, error) {
	groups, universe, err := a.railGroups(ctx, nodes)
	if err != nil {
		return nil, "", err
	}
	perRail := 0
	for _, g := range groups {
		perRail = max(perRail, g.rails.lead.most()+g.rails.lead.none)
	}
	want := make([]int, len(a.distinct))
	most, least := index.Unbounded, 1
	for mi, id := range a.ids {
		want[id]++
		if g := a.per[mi].need[a.class]; g > 0 {
			most, least = min(most, g), max(least, leastRails(g, perRail))
		}
	}
	var cands []railCand
	bestKey, bestFit := "", 0
	cut := enumRailSets(universe, least, most, maxRailCandidates, func(rails []int64) {
		fit, room := a.railRoom(groups, want, rails)
		key := railKey(slices.Clone(rails))
		switch {
		case fit >= need:
			cands = append(cands, railCand{rails: slices.Clone(rails), key: key, room: room})
		case bestKey == "" || fit > bestFit:
			bestKey, bestFit = key, fit
		}
	})
	if cut {
		a.stats.RailCutoffs++
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.room != b.room {
			return a.room > b.room
		}
		if len(a.rails) != len(b.rails) {
			return len(a.rails) > len(b.rails)
		}
		return a.key < b.key
	})
	why := fmt.Sprintf("no set of IB rails has room for %s with a device on each of its rails", plural(need, "pod"))
	if bestKey != "" {
		why += fmt.Sprintf(" (most: rails %s, room for %d)", bestKey, bestFit)
	}
	if cut {
		why += fmt.Sprintf("; only the first %d of the rail sets were counted", maxRailCandidates)
	}
	return cands, why, nil
}

// railRoom returns how many of the members needed fit with every member
// on exactly the rails (per shape at most its members), and the room in
// members over all shapes.
func (a *aligner) railRoom(groups []railGroup, want []int, rails []int64) (int, int) {
	fit, room := 0, 0
	for id, sh := range a.distinct {
		got := 0
		for _, g := range groups {
			got += g.nodes * a.memberFit(g.rails, sh, rails, g.cheap[id])
		}
		fit += min(got, want[id])
		room += got
	}
	return fit, room
}

// railGroup is the nodes with the same free devices by rail and the same
// cheap fit per shape.
type railGroup struct {
	rails nodeRails
	cheap []int
	nodes int
}

// railGroups groups the nodes for railRoom (by signature, sorted) and
// returns the rails with a free lead device on some node.
func (a *aligner) railGroups(ctx context.Context, nodes []*index.NodeState) ([]railGroup, []int64, error) {
	bySig := map[string]*railGroup{}
	railSet := map[int64]bool{}
	for _, ns := range nodes {
		nr, err := a.follow.freeRailsOf(ctx, ns)
		if err != nil {
			return nil, nil, err
		}
		cheap := make([]int, len(a.distinct))
		for id := range a.distinct {
			if cheap[id], _, err = a.fit.fitOn(ctx, ns, id, nil); err != nil {
				return nil, nil, err
			}
		}
		for r, n := range nr.lead.by {
			railSet[r] = railSet[r] || n > 0
		}
		sig := nr.signature(cheap)
		if g := bySig[sig]; g != nil {
			g.nodes++
			continue
		}
		bySig[sig] = &railGroup{rails: nr, cheap: cheap, nodes: 1}
	}
	sigs := make([]string, 0, len(bySig))
	for s := range bySig {
		sigs = append(sigs, s)
	}
	sort.Strings(sigs)
	groups := make([]railGroup, len(sigs))
	for i, s := range sigs {
		groups[i] = *bySig[s]
	}
	var universe []int64
	for r, ok := range railSet {
		if ok {
			universe = append(universe, r)
		}
	}
	slices.Sort(universe)
	return groups, universe, nil
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
	for _, rails := range keys[:min(4, len(keys))] {
		restricted := a.restrictRailsOld(rails)
		alt, err := refill("rails "+rails, nodes, func(mi int) []*resourceapi.ResourceClaim { return restricted[mi] })
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

// restrictRailsOld returns each member's claims with a selector added to
// every request of the main class: devices on one of the rails (or
// without one).
func (a *aligner) restrictRailsOld(rails string) [][]*resourceapi.ResourceClaim {
	var list []int64
	for _, f := range strings.Split(rails, ",") {
		if r, err := strconv.ParseInt(f, 10, 64); err == nil {
			list = append(list, r)
		}
	}
	sel := railSelector(list)
	out := make([][]*resourceapi.ResourceClaim, len(a.per))
	for mi, sh := range a.per {
		for _, c := range sh.claims {
			c = c.DeepCopy()
			for i := range c.Spec.Devices.Requests {
				if e := c.Spec.Devices.Requests[i].Exactly; e != nil && e.DeviceClassName == a.class {
					e.Selectors = append(e.Selectors, sel)
				}
			}
			out[mi] = append(out[mi], c)
		}
	}
	return out
}
