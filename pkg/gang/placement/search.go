package placement

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/rails"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Search over member → node assignments (issue 13, "no first-fit dead
// ends"). The greedy fill never revisits a member, so it dead-ends on the
// shapes of kubernetes#138765 where a placement exists: members asking
// [3, 3, 5] GPUs on nodes with 5 and 6 free (3 and 3 go to different
// nodes, then 5 fits nowhere), and a member whose first-fit devices on a
// node block another member's matchAttribute constraint there. When the
// greedy fill (and the firstAvailable search) fails in a domain and the
// gang needs it (needsSearch), search runs a depth-first search:
//
//   - members in rank order, each tried on the nodes in pack order, so the
//     first placement found is the closest to the greedy one; members of
//     one shape are interchangeable, so each goes to the node of the
//     previous member of its shape or a later one;
//   - a node is checked with the cheap checks (counts, resources, required
//     anti-affinity), then by allocating jointly, in one Allocate call, the
//     claims of every member already assigned there plus the new member's
//     (the allocator backtracks across all claims of one call), with the
//     devices of the members on other nodes and the shared claims' results
//     in flight (searchjoint.go); the call's results replace those of the
//     node's members;
//   - pruning: the main-class devices left must hold the members left
//     (searchbound.go); shapes that fit alone on no node are known first
//     (searchjoint.go);
//     a refused set of shapes is not asked again on a node with the same
//     free devices, nor a set holding a shape refused alone there
//     (searchmemo.go, for the whole Place call); an empty node equivalent
//     to one where the member's subtree already failed is skipped
//     (equivalent: same free devices, same static checks for every shape,
//     same allocatable, requests and pods, no cluster-level pool of the
//     claims' classes reaching it, no anti-affinity in play, and no
//     shape's cursor between the two);
//   - with minCount below the gang's size, a member may be left out when
//     it fits nowhere; once a member of a shape is left out, so are the
//     later members of that shape (they are interchangeable);
//   - a budget per domain (verify) of searchCalls allocator calls plus 2
//     per member, and searchStepsPerCall node tries per call: counts, not
//     a clock, so results stay deterministic (but for the allocator's own
//     Config.AllocateTimeout), and searchCallsPerPlace calls over all the
//     domains of one Place, so that a gang that fits nowhere does not cost
//     a search in every domain of a big cluster. A search that runs out
//     counts in Stats.SearchCutoffs and the domain is refused.

// CheckSearch and CheckSearchBudget count domains where the search found
// no placement: having searched every assignment, or having run out of
// budget.
const (
	CheckSearch       = "no assignment of the members to nodes fits (domains)"
	CheckSearchBudget = "search budget spent (domains)"
)

// searchCalls and searchStepsPerCall bound what one domain's searches may
// cost: allocator calls (plus 2 per member, so that big gangs can be
// placed at all), and nodes tried for a member per call.
const (
	searchCalls         = 2000
	searchStepsPerCall  = 25
	searchCallsPerPlace = 4 * searchCalls
)

// searchBudget is what the current domain's searches may still spend.
type searchBudget struct{ calls, steps int }

// newSearchBudget is one domain's budget: searchCalls plus 2 per member,
// at most what the Place has left (left).
func newSearchBudget(members, left int) searchBudget {
	calls := min(searchCalls+2*members, max(left, 0))
	return searchBudget{calls: calls, steps: searchStepsPerCall * calls}
}

// needsSearch reports whether the greedy fill can dead-end where a
// placement exists, beyond firstAvailable choices (firstalt.go): the gang
// is heterogeneous, or a member's claims have several requests or a
// constraint. Homogeneous gangs of single-request claims skip the search,
// since for them the greedy fill is exact.
func needsSearch(distinct []*shape) bool {
	return len(distinct) > 1 || (len(distinct) == 1 && constrained(distinct[0]))
}

// search is one depth-first search in one domain.
type search struct {
	sr       *searcher
	nodes    []*index.NodeState
	shared   []resourceapi.AllocationResult
	claimsOf func(int) []*resourceapi.ResourceClaim
	classes  []string // of every member's claims
	// skips is how many more members may be left out; left marks the
	// shapes a member of which was left out.
	skips int
	left  []bool
	// Per node position: its members in member order, their claims'
	// results in that order, and what they use.
	on   [][]int
	res  [][]resourceapi.AllocationResult
	used []*usage
	// where is each member's node position, -1 when not placed.
	where []int
	// counts bound the members left by main-class devices
	// (searchbound.go).
	counts searchCounts
	anti   bool
	// variant names claimsOf for the memo: "" for the members' own
	// claims, else the rail set they are restricted to.
	variant string
	memo    *searchMemo
	nm      nodeMemo
	// sharedOnly: the shared claims' devices, as in-flight devices.
	sharedOnly index.InFlight
	out        bool // the budget ran out
}

// searcher runs the searches of one Place call (see the rules above): it
// keeps the budgets and the memo; each search is one depth-first search in
// one domain.
type searcher struct {
	*members
	s       *index.Snapshot
	fit     *fits
	follow  *rails.Follower
	copies  *rails.Copies
	alloc   allocator
	stats   *Stats
	refused refusals
	logger  klog.Logger
	// on: the greedy fill may dead-end (needsSearch) and the search is
	// not turned off (Config.greedyOnly).
	on bool
	// budget is what the current domain's searches may still spend; left
	// the allocator calls all of this Place's searches may still make.
	budget searchBudget
	left   int
	memo   *searchMemo
}

// startDomain gives the searches of the next domain their budget.
func (sr *searcher) startDomain() { sr.budget = newSearchBudget(len(sr.per), sr.left) }

// run returns a placement of at least need members in the domain's nodes,
// or nil.
func (sr *searcher) run(ctx context.Context, d *topology.Domain, nodes []*index.NodeState, shared []resourceapi.AllocationResult,
	variant string, claimsOf func(int) []*resourceapi.ResourceClaim, need int) (*attempt, error) {
	s, err := sr.newSearch(ctx, nodes, shared, claimsOf, need)
	if err != nil {
		return nil, err
	}
	s.variant = variant
	sr.stats.Searches++
	ok := false
	if err = s.lonely(ctx); err == nil {
		ok, err = s.dfs(ctx, 0)
	}
	sr.logger.V(5).Info("Searched member placements", "domain", d.ID, "need", need, "nodes", len(nodes), "found", ok, "callsLeft", sr.budget.calls, "stepsLeft", sr.budget.steps)
	switch {
	case err != nil:
		return nil, err
	case !ok && s.out:
		sr.stats.SearchCutoffs++
		sr.refused.add(CheckSearchBudget, d.ID)
		return nil, nil
	case !ok:
		sr.refused.add(CheckSearch, d.ID)
		return nil, nil
	}
	return s.attempt(d), nil
}

func (sr *searcher) newSearch(ctx context.Context, nodes []*index.NodeState, shared []resourceapi.AllocationResult,
	claimsOf func(int) []*resourceapi.ResourceClaim, need int) (*search, error) {
	s := &search{sr: sr, nodes: nodes, shared: shared, claimsOf: claimsOf, skips: max(0, len(sr.per)-need),
		left: make([]bool, len(sr.distinct)), on: make([][]int, len(nodes)), res: make([][]resourceapi.AllocationResult, len(nodes)),
		used: make([]*usage, len(nodes)), where: make([]int, len(sr.per)), anti: sr.s.HasAntiTerms(), nm: newNodeMemo(len(nodes), shared)}
	if sr.memo == nil {
		sr.memo = newSearchMemo()
	}
	s.memo = sr.memo
	var all []*resourceapi.ResourceClaim
	for mi, sh := range sr.per {
		s.where[mi] = -1
		s.anti = s.anti || len(sh.anti) > 0
		all = append(all, sh.claims...)
	}
	s.classes = claimClasses(all)
	counts, err := newSearchCounts(ctx, sr.s, sr.members, nodes)
	s.counts = counts
	return s, err
}

// dfs places the members from mi on and reports whether it got all it
// must; on success the state holds the placement.
func (s *search) dfs(ctx context.Context, mi int) (bool, error) {
	if mi == len(s.sr.per) {
		return true, nil
	}
	if s.out || !s.counts.bound(mi, s.sr.ids, s.left, s.skips) {
		return false, nil
	}
	id := s.sr.ids[mi]
	if !s.left[id] {
		cursors := s.cursors(mi)
		tried := map[int]int{} // equivalence class of an empty node whose subtree failed → its position
		for pos := cursors[id]; pos < len(s.nodes) && !s.out; pos++ {
			ok, err := s.try(ctx, mi, pos, cursors, tried)
			if ok || err != nil {
				return ok, err
			}
		}
	}
	return s.leaveOut(ctx, mi)
}

// leaveOut continues without member mi when a member may still be left
// out.
func (s *search) leaveOut(ctx context.Context, mi int) (bool, error) {
	if s.skips == 0 || s.out {
		return false, nil
	}
	id := s.sr.ids[mi]
	was := s.left[id]
	s.skips--
	s.left[id] = true
	ok, err := s.dfs(ctx, mi+1)
	if !ok {
		s.skips++
		s.left[id] = was
	}
	return ok, err
}

// cursors returns, per distinct shape, the node position of the last
// member before mi placed of that shape (0 when none): the first position
// the shape's next member may take.
func (s *search) cursors(mi int) []int {
	out := make([]int, len(s.sr.distinct))
	for q := range mi {
		if pos := s.where[q]; pos >= 0 {
			out[s.sr.ids[q]] = pos
		}
	}
	return out
}

// between reports whether a shape's cursor lies in (x, y]: then the nodes
// at x and y differ for that shape's later members.
func between(cursors []int, x, y int) bool {
	for _, c := range cursors {
		if x < c && c <= y {
			return true
		}
	}
	return false
}

// try puts member mi on the node at pos and searches on; it undoes the
// assignment when that fails.
func (s *search) try(ctx context.Context, mi, pos int, cursors []int, tried map[int]int) (bool, error) {
	if s.sr.budget.steps <= 0 {
		s.out = true
		return false, nil
	}
	s.sr.budget.steps--
	ns := s.nodes[pos]
	if c, _, err := s.sr.fit.fitOn(ctx, ns, s.sr.ids[mi], s.used[pos]); err != nil || c == 0 {
		return false, err
	}
	if s.anti && s.antiFail(mi, pos) {
		return false, nil
	}
	eq := -1
	if len(s.on[pos]) == 0 && !s.anti {
		var err error
		if eq, err = s.eqClass(ctx, pos); err != nil {
			return false, err
		}
		if x, ok := tried[eq]; ok && eq >= 0 && !between(cursors, x, pos) {
			return false, nil
		}
	}
	prev, ok, err := s.assign(ctx, mi, pos)
	if err != nil {
		return false, err
	}
	if ok {
		found, err := s.dfs(ctx, mi+1)
		if found || err != nil {
			return found, err
		}
		s.unassign(mi, pos, prev)
	}
	if eq >= 0 && !s.out {
		tried[eq] = pos
	}
	return false, nil
}

// antiFail reports whether member mi on the node at pos conflicts with a
// bound pod or a placed member by required anti-affinity.
func (s *search) antiFail(mi, pos int) bool {
	ns := s.nodes[pos]
	if s.sr.fit.antiExisting(mi, ns) {
		return true
	}
	sh := s.sr.per[mi]
	for q, qp := range s.where {
		o := s.sr.per[q]
		if qp >= 0 && (len(sh.anti) > 0 || len(o.anti) > 0) && index.PodsConflict(sh.pod, sh.anti, ns.Node(), o.pod, o.anti, s.nodes[qp].Node()) {
			return true
		}
	}
	return false
}

// assign puts member mi on the node at pos when the allocator finds the
// claims of all its members there; it returns the node's previous results.
func (s *search) assign(ctx context.Context, mi, pos int) ([]resourceapi.AllocationResult, bool, error) {
	members := append(s.on[pos][:len(s.on[pos]):len(s.on[pos])], mi)
	res, ok, err := s.resultsFor(ctx, pos, members)
	if !ok || err != nil {
		return nil, false, err
	}
	prev := s.res[pos]
	s.on[pos], s.res[pos], s.where[mi] = members, res, pos
	s.addUse(mi, pos, 1)
	return prev, true, nil
}

func (s *search) unassign(mi, pos int, prev []resourceapi.AllocationResult) {
	s.on[pos] = s.on[pos][:len(s.on[pos])-1]
	s.res[pos], s.where[mi] = prev, -1
	s.addUse(mi, pos, -1)
}

func (s *search) addUse(mi, pos, sign int) {
	sh := s.sr.per[mi]
	u := s.used[pos]
	if u == nil {
		u = &usage{res: index.ResList{}, dev: map[string]int{}}
		s.used[pos] = u
	}
	u.res.Add(sh.req, int64(sign))
	u.pods += int64(sign)
	for c, n := range sh.need {
		u.dev[c] += sign * n
	}
	s.counts.take(pos, sign*s.counts.demand[mi])
}
