package placement

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Prioritized alternatives (firstAvailable). The allocator gives each
// request the first subrequest that fits on the node, so filling the
// members one by one can dead-end: two members asking [2 GPUs, else 1] on
// a node with 2 free GPUs get 2 and then nothing, where 1 and 1 fit
// (kubernetes#138765). When the greedy fill fails, fillAlternatives
// searches the members' choices: a floor per member (its claims'
// firstAvailable requests keep only the subrequests from the floor on),
// in order of total demotion, later members demoted first, so that the
// members' first choices are kept as far as the gang allows. Members of
// one shape are interchangeable, so their floors only grow in member
// order. At most maxAlternativeFills fills are tried (deterministic: no
// clock).

// maxAlternativeFills bounds the fills one domain may cost the search.
const maxAlternativeFills = 128

// fillAlternatives returns a placement with some members' alternatives
// demoted, or nil when none is found within the budget. base gives the
// claims to demote (the members' own, or their rail-limited copies).
func (f *filler) fillAlternatives(ctx context.Context, d *topology.Domain, nodes []*index.NodeState, shared []resourceapi.AllocationResult, need int,
	base func(int) []*resourceapi.ResourceClaim) (*attempt, error) {
	alts := make([]int, len(f.per))
	most := 0
	for mi, sh := range f.per {
		alts[mi] = alternativesOf(sh.claims)
		most = max(most, alts[mi])
	}
	if most < 2 {
		return nil, nil
	}
	// Members of one shape have claims of their own (own names and UIDs),
	// so the copies are made per member.
	variants := map[[2]int][]*resourceapi.ResourceClaim{} // (member, floor) -> claims
	claimsFor := func(mi, floor int) []*resourceapi.ResourceClaim {
		k := [2]int{mi, floor}
		if v, ok := variants[k]; ok {
			return v
		}
		v := demote(base(mi), floor)
		variants[k] = v
		return v
	}
	budget := maxAlternativeFills
	total := 0
	for _, a := range alts {
		total += a - 1
	}
	floors := make([]int, len(f.per))
	for demotion := 1; demotion <= total && budget > 0; demotion++ {
		var found *attempt
		var ferr error
		f.floorVectors(alts, floors, len(f.per)-1, demotion, &budget, func() bool {
			v := append([]int(nil), floors...)
			found, ferr = f.fill(ctx, d, nodes, shared, func(mi int) []*resourceapi.ResourceClaim { return claimsFor(mi, v[mi]) }, v, need)
			return found != nil || ferr != nil
		})
		if found != nil || ferr != nil {
			return found, ferr
		}
	}
	return nil, nil
}

// floorVectors sets floors[0..mi] in every way that sums to left (each
// below the member's alternatives, not above the floor of the next member
// of its shape), the last members demoted first, and calls try for each
// until try returns true or the budget is spent. It reports whether to stop.
func (f *filler) floorVectors(alts, floors []int, mi, left int, budget *int, try func() bool) bool {
	if mi < 0 {
		if left != 0 {
			return false
		}
		if *budget <= 0 {
			return true
		}
		*budget--
		return try()
	}
	limit := min(left, alts[mi]-1)
	for next := mi + 1; next < len(floors); next++ {
		if f.ids[next] == f.ids[mi] {
			limit = min(limit, floors[next])
			break
		}
	}
	for floor := limit; floor >= 0; floor-- {
		floors[mi] = floor
		if f.floorVectors(alts, floors, mi-1, left-floor, budget, try) {
			return true
		}
	}
	floors[mi] = 0
	return false
}

// alternativesOf returns the most subrequests any firstAvailable request of
// the claims has (1 when none has any).
func alternativesOf(claims []*resourceapi.ResourceClaim) int {
	n := 1
	for _, c := range claims {
		for _, r := range c.Spec.Devices.Requests {
			n = max(n, len(r.FirstAvailable))
		}
	}
	return n
}

// demote returns copies of the claims whose firstAvailable requests keep
// only the subrequests from floor on (at least their last one). The
// allocation's results still name subrequests of the original claims.
func demote(claims []*resourceapi.ResourceClaim, floor int) []*resourceapi.ResourceClaim {
	if floor == 0 {
		return claims
	}
	out := make([]*resourceapi.ResourceClaim, len(claims))
	for i, c := range claims {
		c = c.DeepCopy()
		for j := range c.Spec.Devices.Requests {
			r := &c.Spec.Devices.Requests[j]
			if n := len(r.FirstAvailable); n > 1 {
				r.FirstAvailable = r.FirstAvailable[min(floor, n-1):]
			}
		}
		out[i] = c
	}
	return out
}
