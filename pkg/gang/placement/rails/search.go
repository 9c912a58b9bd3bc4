package rails

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// Rail alignment across members (issue 13, "rails done fully").
//
// Rules: a member's rail set is the rails of all its devices that carry
// an ibRail attribute, counted only when one of them is of the main class
// (members without a lead device on a rail do not count). Its NICs follow
// its GPUs (follow.go), so the set is its GPUs' rails; a NIC off them
// makes the set differ. Score.RailSets is the number of distinct sets; 1
// is aligned: every member uses the same set. With rail-alignment
// required and a placement that is not aligned, or none, the engine's
// aligner searches rail sets R, counting them with Search:
//
//   - candidates: the sets R of the rails where some node of the domain
//     has a free lead device, of at most as many rails as the smallest
//     lead demand g of a member (every member uses every rail of R) and at
//     least as many as the largest demand needs at the most free lead
//     devices on one rail of a node, larger sets first, at most
//     MaxCandidates of them; with at most 8 rails all are counted;
//   - count filter: R is kept when the members that fit on the domain's
//     nodes using exactly R (Members.Fit: the cheap checks, a free lead
//     device on every rail of R, enough free lead devices on R and enough
//     following devices on R) add up, per shape, to the members needed;
//   - order: most room first (members that fit, over all shapes), then
//     wider sets, then by rail numbers;
//   - verification: the gang is placed again on the nodes where a member
//     fits on R, every member's claims limited to R and its lead request
//     split so that it takes a device on every rail of R (claims.go):
//     the greedy fill, then the member search (the engine's search.go,
//     within the domain's search budget) when that fails, or the firstAvailable fills for a
//     placement found by demoting alternatives. The first placement whose
//     members all use exactly R wins;
//   - budget: the engine's maxRailRefills sets verified per domain (a
//     count, not a clock); a cut counts in Stats.Cutoffs (the engine's
//     Stats.RailCutoffs). A domain whose first
//     placement no set replaces is refused with CheckRailAlignment and a
//     reason with numbers; without a first placement the refills refuse
//     nothing themselves.
//
// On nodes with one lead device per rail (HGX) and on nodes with up to two,
// for homogeneous gangs of exactCount claims the count filter is exact, so
// the first candidate verifies whenever an aligned placement exists.

// MaxCandidates bounds the rail sets counted per domain (and per member
// and node, follow.go).
const MaxCandidates = 4096

// Search counts and limits rail sets for the engine's aligner in one
// Place call (see the rules above).
type Search struct {
	*Members
	follow *Follower
	fit    Fits
	stats  Stats
}

// NewSearch returns the rail-set search of one Place call.
func NewSearch(m *Members, follow *Follower, fit Fits, stats Stats) *Search {
	return &Search{Members: m, follow: follow, fit: fit, stats: stats}
}

// OnRails returns the nodes (in their order) where a member fits by
// counts with every member on exactly the rails (Fit).
func (a *Search) OnRails(ctx context.Context, nodes []*index.NodeState, rails []int64) ([]*index.NodeState, error) {
	var fit []*index.NodeState
	for _, ns := range nodes {
		nr, err := a.follow.FreeRailsOf(ctx, ns)
		if err != nil {
			return nil, err
		}
		for id, sh := range a.Distinct {
			cheap, err := a.fit.FitOn(ctx, ns, id)
			if err != nil {
				return nil, err
			}
			if a.Fit(nr, sh, rails, cheap) > 0 {
				fit = append(fit, ns)
				break
			}
		}
	}
	return fit, nil
}

// Limited returns each member's claims, those of a member with lead
// demand limited to the rails with a lead device on every one
// (claims.go).
func (a *Search) Limited(copies *Copies, rails []int64) [][]*resourceapi.ResourceClaim {
	claims := make([][]*resourceapi.ResourceClaim, len(a.Per))
	for mi := range a.Per {
		claims[mi] = a.Per[mi].Claims
		if a.Per[mi].Need[a.Class] > 0 {
			claims[mi] = copies.Limit(a.Per[mi].Claims, rails, true)
		}
	}
	return claims
}

// Cand is a candidate rail set and the members that fit on it.
type Cand struct {
	Rails []int64
	Key   string
	Room  int
}

// Candidates returns the rail sets where the members needed fit by
// counts, in try order, and why none when there is none (see the rules).
func (a *Search) Candidates(ctx context.Context, nodes []*index.NodeState, need int) ([]Cand, string, error) {
	groups, universe, err := a.railGroups(ctx, nodes)
	if err != nil {
		return nil, "", err
	}
	perRail := 0
	for _, g := range groups {
		perRail = max(perRail, g.rails.Lead.Most()+g.rails.Lead.None)
	}
	want := make([]int, len(a.Distinct))
	most, least := index.Unbounded, 1
	for mi, id := range a.IDs {
		want[id]++
		if g := a.Per[mi].Need[a.Class]; g > 0 {
			most, least = min(most, g), max(least, LeastRails(g, perRail))
		}
	}
	var cands []Cand
	bestKey, bestFit := "", 0
	cut := EnumSets(universe, least, most, MaxCandidates, func(rails []int64) {
		fit, room := a.railRoom(groups, want, rails)
		key := Key(slices.Clone(rails))
		switch {
		case fit >= need:
			cands = append(cands, Cand{Rails: slices.Clone(rails), Key: key, Room: room})
		case bestKey == "" || fit > bestFit:
			bestKey, bestFit = key, fit
		}
	})
	if cut {
		*a.stats.Cutoffs++
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.Room != b.Room {
			return a.Room > b.Room
		}
		if len(a.Rails) != len(b.Rails) {
			return len(a.Rails) > len(b.Rails)
		}
		return a.Key < b.Key
	})
	why := fmt.Sprintf("no set of IB rails has room for %s with a device on each of its rails", plural(need, "pod"))
	if bestKey != "" {
		why += fmt.Sprintf(" (most: rails %s, room for %d)", bestKey, bestFit)
	}
	if cut {
		why += fmt.Sprintf("; only the first %d of the rail sets were counted", MaxCandidates)
	}
	return cands, why, nil
}

// railRoom returns how many of the members needed fit with every member
// on exactly the rails (per shape at most its members), and the room in
// members over all shapes.
func (a *Search) railRoom(groups []railGroup, want []int, rails []int64) (int, int) {
	fit, room := 0, 0
	for id, sh := range a.Distinct {
		got := 0
		for _, g := range groups {
			got += g.nodes * a.Fit(g.rails, sh, rails, g.cheap[id])
		}
		fit += min(got, want[id])
		room += got
	}
	return fit, room
}

// railGroup is the nodes with the same free devices by rail and the same
// cheap fit per shape.
type railGroup struct {
	rails NodeRails
	cheap []int
	nodes int
}

// railGroups groups the nodes for railRoom (by signature, sorted) and
// returns the rails with a free lead device on some node.
func (a *Search) railGroups(ctx context.Context, nodes []*index.NodeState) ([]railGroup, []int64, error) {
	bySig := map[string]*railGroup{}
	railSet := map[int64]bool{}
	for _, ns := range nodes {
		nr, err := a.follow.FreeRailsOf(ctx, ns)
		if err != nil {
			return nil, nil, err
		}
		cheap := make([]int, len(a.Distinct))
		for id := range a.Distinct {
			if cheap[id], err = a.fit.FitOn(ctx, ns, id); err != nil {
				return nil, nil, err
			}
		}
		for r, n := range nr.Lead.By {
			railSet[r] = railSet[r] || n > 0
		}
		sig := nr.Signature(cheap)
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

// Sets returns, per distinct member rail set (see the rules above), how
// many of the placed members (on nodes, with results res) use it.
func (fo *Follower) Sets(ctx context.Context, nodes []*index.NodeState, res [][]resourceapi.AllocationResult) (map[string]int, error) {
	out := map[string]int{}
	for i, ns := range nodes {
		lead, all, err := fo.MemberRails(ctx, ns, res[i])
		if err != nil {
			return nil, err
		}
		if len(lead) > 0 {
			out[Key(all)]++
		}
	}
	return out, nil
}

// RestrictOld returns each member's claims with a selector added to
// every request of the main class: devices on one of the rails (or
// without one).
func (m *Members) RestrictOld(rails string) [][]*resourceapi.ResourceClaim {
	var list []int64
	for _, f := range strings.Split(rails, ",") {
		if r, err := strconv.ParseInt(f, 10, 64); err == nil {
			list = append(list, r)
		}
	}
	sel := Selector(list)
	out := make([][]*resourceapi.ResourceClaim, len(m.Per))
	for mi, sh := range m.Per {
		for _, c := range sh.Claims {
			c = c.DeepCopy()
			for i := range c.Spec.Devices.Requests {
				if e := c.Spec.Devices.Requests[i].Exactly; e != nil && e.DeviceClassName == m.Class {
					e.Selectors = append(e.Selectors, sel)
				}
			}
			out[mi] = append(out[mi], c)
		}
	}
	return out
}

// plural is "1 noun" or "n nouns" (as the engine's messages).
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
