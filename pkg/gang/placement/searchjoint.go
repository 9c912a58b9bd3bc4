package placement

import (
	"context"
	"slices"
	"sort"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Checking a node for the search (search.go): the joint Allocate call of
// the members assigned there (through the memo, searchmemo.go), the shapes
// that fit alone on no node, and the attempt the search's state makes.

// resultsFor allocates the members' claims jointly on the node at pos
// (claims in member order), through the memo; false when refused or the
// budget is spent.
func (s *search) resultsFor(ctx context.Context, pos int, members []int) ([]resourceapi.AllocationResult, bool, error) {
	dev, err := s.devClass(ctx, pos)
	if err != nil {
		return nil, false, err
	}
	seq, set := keys(s.variant, s.nodes[pos].Index(), dev, s.sr.ids, members)
	if res, ok := s.memo.results[seq]; ok && dev >= 0 {
		return res, true, nil
	}
	if dev >= 0 && (s.memo.refused[set] || s.refusedAlone(dev, members)) {
		return nil, false, nil
	}
	res, why, err := s.allocate(ctx, pos, dev, members)
	switch {
	case err != nil:
		return nil, false, err
	case res == nil && why == "":
		return nil, true, nil // no claims
	case res == nil:
		// Only a refusal is remembered: a timed-out call or a spent budget
		// says nothing about other nodes of the class.
		if dev >= 0 && (why == CheckAllocator || why == CheckRailFollow || why == CheckRailFollowBudget) {
			s.memo.refused[set] = true
		}
		return nil, false, nil
	}
	if dev >= 0 {
		s.memo.results[seq] = res
	}
	return res, true, nil
}

// allocate runs one Allocate call for the members' claims on the node at
// pos and returns the results in member order; nil and "" when they have
// no claims, nil and the failed check when refused or out of budget. The
// call lists the claims of members with constraints first, then those
// asking more main-class devices (stable): the allocator backtracks less
// when the hard claims choose first.
func (s *search) allocate(ctx context.Context, pos, dev int, members []int) ([]resourceapi.AllocationResult, string, error) {
	order := slices.Clone(members)
	sort.SliceStable(order, func(i, j int) bool {
		a, b := s.sr.per[order[i]], s.sr.per[order[j]]
		if ca, cb := constrained(a), constrained(b); ca != cb {
			return ca
		}
		return s.counts.demand[order[i]] > s.counts.demand[order[j]]
	})
	var claims []*resourceapi.ResourceClaim
	for _, m := range order {
		claims = append(claims, s.claimsOf(m)...)
	}
	if len(claims) == 0 {
		return nil, "", nil
	}
	if s.sr.budget.calls <= 0 {
		s.out = true
		return nil, CheckSearchBudget, nil
	}
	s.sr.budget.calls--
	s.sr.left--
	s.sr.stats.SearchCalls++
	inflight := s.inflight(pos, dev)
	res, why, err := s.sr.alloc.allocate(ctx, s.nodes[pos], claims, s.classes, inflight)
	if res == nil || err != nil {
		return nil, why, err
	}
	res = s.sr.copies.Unsplit(claims, res)
	byMember := map[int][]resourceapi.AllocationResult{}
	for _, m := range order {
		n := len(s.claimsOf(m))
		byMember[m], res = res[:n], res[n:]
	}
	if why, err := s.follow(ctx, pos, order, byMember, inflight); why != "" || err != nil {
		return nil, why, err
	}
	out := make([]resourceapi.AllocationResult, 0, len(claims))
	for _, m := range members {
		out = append(out, byMember[m]...)
	}
	return out, "", nil
}

// follow puts each member's NICs on its GPUs' rails (rails.Follower), in
// call order, the devices of the node's other members fixed; it replaces
// the members' results in byMember, or returns the failed check.
func (s *search) follow(ctx context.Context, pos int, order []int, byMember map[int][]resourceapi.AllocationResult, inflight index.InFlight) (string, error) {
	ns := s.nodes[pos]
	for _, m := range order {
		others := func() index.InFlight {
			tmp := &attempt{inflight: index.InFlight{}}
			for pid, ids := range inflight {
				tmp.inflight[pid] = slices.Clone(ids)
			}
			for _, q := range order {
				if q != m {
					tmp.inflight.Add(byMember[q])
				}
			}
			return tmp.inflight
		}
		res, why, err := s.sr.follow.Follow(ctx, ns, m, s.claimsOf(m), byMember[m], others)
		if why != "" || err != nil {
			return why, err
		}
		byMember[m] = res
	}
	return "", nil
}

// constrained reports whether a member's claims have a constraint or
// several requests.
func constrained(sh *shape) bool {
	requests := 0
	for _, c := range sh.claims {
		if len(c.Spec.Devices.Constraints) > 0 {
			return true
		}
		requests += len(c.Spec.Devices.Requests)
	}
	return requests > 1
}

// inflight is the shared claims' devices and those of the members on the
// other nodes. A node with a device class (searchmemo.go) sees no pool
// those members use, so the shared claims' devices do there.
func (s *search) inflight(pos, dev int) index.InFlight {
	if dev >= 0 && s.sharedOnly != nil {
		return s.sharedOnly
	}
	tmp := &attempt{inflight: index.InFlight{}}
	tmp.inflight.Add(s.shared)
	if dev >= 0 {
		s.sharedOnly = tmp.inflight
		return s.sharedOnly
	}
	for q, r := range s.res {
		if q != pos {
			tmp.inflight.Add(r)
		}
	}
	return tmp.inflight
}

// attempt turns the search's state into an attempt, members in member
// order, splitting each node's joint results back per member.
func (s *search) attempt(d *topology.Domain) *attempt {
	att := &attempt{dom: d, inflight: index.InFlight{}, used: map[*index.NodeState]*usage{}, shared: s.shared}
	att.inflight.Add(s.shared)
	for mi, pos := range s.where {
		if pos < 0 {
			continue
		}
		off := 0
		for _, q := range s.on[pos] {
			if q == mi {
				break
			}
			off += len(s.claimsOf(q))
		}
		claims := s.claimsOf(mi)
		var res []resourceapi.AllocationResult
		if len(claims) > 0 {
			res = s.res[pos][off : off+len(claims)]
		}
		att.place(mi, s.nodes[pos], s.sr.per[mi], claims, res)
	}
	return att
}

// lonely marks, before the search, the shapes none of whose members fits
// alone on any node (cheap checks, then Allocate on the empty node): their
// members can only be left out.
func (s *search) lonely(ctx context.Context) error {
	seen := make([]bool, len(s.sr.distinct))
	for mi, id := range s.sr.ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		found := false
		for pos := 0; pos < len(s.nodes) && !found && !s.out; pos++ {
			ns := s.nodes[pos]
			c, _, err := s.sr.fit.fitOn(ctx, ns, id, nil)
			if err != nil {
				return err
			}
			if c == 0 || (s.anti && s.sr.fit.antiExisting(mi, ns)) {
				continue
			}
			if _, found, err = s.resultsFor(ctx, pos, []int{mi}); err != nil {
				return err
			}
		}
		s.left[id] = !found && !s.out
	}
	return nil
}

// refusedAlone reports whether one of the members' shapes was refused
// alone on the device class: then so is any set holding it.
func (s *search) refusedAlone(dev int, members []int) bool {
	if len(members) < 2 {
		return false
	}
	for _, mi := range members {
		if s.memo.refused[s.variant+"|"+strconv.Itoa(dev)+":"+strconv.Itoa(s.sr.ids[mi])] {
			return true
		}
	}
	return false
}
